"""The model endpoint's circuit breaker: when the endpoint keeps failing on its side (5xx,
429, time-outs, no connection), workers stop taking runs for a while, then let one run try
it, and go on as before once it answers.

The state is the ``circuit`` table's row for the endpoint, shared by every process on the
database. Each change is one conditional statement, so that processes racing for it see one
winner: one opens the circuit (and tells the operators), one takes the probe. A process keeps
the state it last saw, refreshed on each of its polls and by its own failures, so that a
model call that succeeded costs no database work while the endpoint is healthy.
"""

from __future__ import annotations

import datetime
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

import attrs

from protege.config import Config, ModelSettings
from protege.db import database
from protege.limit_settings import LimitSettings
from protege.limits.windows import naive_utc
from protege.models.base import utcnow
from protege.models.limits import CLOSED, HALF_OPEN, OPEN, Circuit

Clock = Callable[[], datetime.datetime]

# An endpoint's Retry-After is honoured up to this (a day): a wrong or hostile header must
# not stop the workers for good.
MAX_RETRY_AFTER = 86_400.0
OPENAI = "https://api.openai.com/v1"
_MAX_ERROR = 2000  # characters of the last error kept
# Doublings of the backoff counted at most: past them any backoff is at its maximum (a day
# at most), while 2**opened times a float overflows after about a thousand openings.
_MAX_DOUBLINGS = 32


def endpoint_of(settings: ModelSettings) -> str:
    """The key the circuit of the endpoint ``settings`` call is kept under: its base URL
    (``OPENAI_BASE_URL``, then OpenAI's own, when none is set), as the client resolves it,
    with only its scheme, host, port and path. A user and password or a query (``?key=``)
    may be a secret, and the key is stored, shown by ``protege status`` and the dashboard,
    and mailed to the operators."""
    url = settings.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:  # not a URL the client could call either: keep nothing of it
        return "(an unreadable base URL)"
    host = parts.netloc.rpartition("@")[2]
    kept = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    return kept.rstrip("/")[:400]


@attrs.frozen
class State:
    """The circuit as one process last saw it (times naive UTC)."""

    state: str = CLOSED
    failures: int = 0
    opened: int = 0
    failing_since: datetime.datetime | None = None
    open_until: datetime.datetime | None = None
    last_error: str | None = None

    @property
    def healthy(self) -> bool:
        """Closed, with no failure since the last success: nothing to write on a success."""
        return self.state == CLOSED and self.failures == 0


@attrs.frozen
class Gate:
    """Whether a worker may take a run now: ``take`` (closed, or this worker holds the
    probe, then ``probe``), else it waits until ``until`` (or a wake)."""

    take: bool
    probe: bool = False
    until: datetime.datetime | None = None


_CLOSED_GATE = Gate(take=True)
_COLUMNS = "state, failures, opened, failing_since, open_until, last_error"


class Breaker:
    """The circuit of one endpoint, as one process uses it: workers ask ``gate`` before
    they take a run; runs report each model call's end (``failed``, ``succeeded``)."""

    def __init__(
        self,
        endpoint: str,
        settings: LimitSettings,
        *,
        probe_seconds: float = 300.0,
        clock: Clock = utcnow,
    ) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.probe_seconds = probe_seconds
        self.clock = clock
        self.seen: State | None = None
        """The state this process last read or wrote; None before the first look."""

    @classmethod
    def of(cls, config: Config, *, clock: Clock = utcnow) -> Breaker:
        """The breaker of ``config``'s model endpoint. A probe may take as long as one
        model call may, after which another worker may try."""
        return cls(
            endpoint_of(config.model),
            config.limits,
            probe_seconds=config.model.max_call_seconds,
            clock=clock,
        )

    # -- reading ------------------------------------------------------------------------

    def refresh(self) -> State:
        """The state as the database has it now (kept as ``seen``)."""
        rows = database.execute_sql(
            f"SELECT {_COLUMNS} FROM circuit WHERE endpoint = {database.param}",
            (self.endpoint,),
        ).fetchall()
        self.seen = _state(rows[0]) if rows else State()
        return self.seen

    def known(self) -> State:
        """The state last seen, read first if there is none yet."""
        return self.seen if self.seen is not None else self.refresh()

    # -- workers ------------------------------------------------------------------------

    def gate(self) -> Gate:
        """May this worker take a run? Closed: yes. Open or half-open until a time to
        come: no, until then. Past it: one worker takes the probe (a conditional update, so
        that only one of them does) and may take one run; the others wait for its end."""
        seen = self.known()
        if seen.state == CLOSED:
            return _CLOSED_GATE
        now = naive_utc(self.clock())
        if seen.open_until is not None and now < seen.open_until:
            return Gate(take=False, until=seen.open_until)
        deadline = now + datetime.timedelta(seconds=self.probe_seconds)
        p = database.param
        taken = database.execute_sql(
            f"UPDATE circuit SET state = '{HALF_OPEN}', open_until = {p}, updated_at = {p} "
            f"WHERE endpoint = {p} AND state IN ('{OPEN}', '{HALF_OPEN}') "
            f"AND (open_until IS NULL OR open_until <= {p})",
            (deadline, now, self.endpoint, now),
        ).rowcount
        state = self.refresh()
        if taken == 1:
            return Gate(take=True, probe=True, until=deadline)
        if state.state == CLOSED:  # closed meanwhile by another process
            return _CLOSED_GATE
        return Gate(take=False, until=state.open_until)

    def probe_unused(self) -> None:
        """The worker holding the probe found no run to take: the next look may probe."""
        now = naive_utc(self.clock())
        p = database.param
        database.execute_sql(
            f"UPDATE circuit SET state = '{OPEN}', open_until = {p}, updated_at = {p} "
            f"WHERE endpoint = {p} AND state = '{HALF_OPEN}'",
            (now, now, self.endpoint),
        )
        self.refresh()

    # -- runs ---------------------------------------------------------------------------

    def succeeded(self) -> None:
        """A model call was answered: the circuit closes. Nothing is written when this
        process saw it closed with no failure (the common case)."""
        if self.known().healthy:
            return
        p = database.param
        database.execute_sql(
            f"UPDATE circuit SET state = '{CLOSED}', failures = 0, opened = 0, "
            f"failing_since = NULL, open_until = NULL, updated_at = {p} "
            f"WHERE endpoint = {p} AND NOT (state = '{CLOSED}' AND failures = 0)",
            (naive_utc(self.clock()), self.endpoint),
        )
        self.seen = State()

    def failed(self, error: str, retry_after: float | None = None) -> State | None:
        """A model call failed on the endpoint's side with ``error``: count it; the
        circuit opens after ``circuit_failures`` in a row, or again at once when the probe
        (or any call while half-open) failed. Returns the state when this call opened it
        (so that one process, and one only, tells the operators), else None.

        Open, it stays so for ``circuit_backoff_seconds``, doubled each time it opens
        again before it closed, up to ``circuit_max_backoff_seconds``, and at least as
        long as the endpoint's ``retry_after`` asked (up to ``MAX_RETRY_AFTER``)."""
        now = naive_utc(self.clock())
        p = database.param
        error = error[:_MAX_ERROR]
        database.execute_sql(
            "INSERT INTO circuit (endpoint, state, failures, opened, updated_at) "
            f"VALUES ({p}, '{CLOSED}', 0, 0, {p}) ON CONFLICT (endpoint) DO NOTHING",
            (self.endpoint, now),
        )
        counted = database.execute_sql(
            f"UPDATE circuit SET failures = failures + 1, last_error = {p}, "
            f"failing_since = COALESCE(failing_since, {p}), updated_at = {p} "
            f"WHERE endpoint = {p} RETURNING {_COLUMNS}",
            (error, now, now, self.endpoint),
        ).fetchall()
        state = _state(counted[0])
        wait = min(retry_after or 0.0, MAX_RETRY_AFTER)
        opening = state.state == HALF_OPEN or (
            state.state == CLOSED and state.failures >= self.settings.circuit_failures
        )
        if opening:
            backoff = min(
                self.settings.circuit_backoff_seconds * 2 ** min(state.opened, _MAX_DOUBLINGS),
                self.settings.circuit_max_backoff_seconds,
            )
            until = now + datetime.timedelta(seconds=max(backoff, wait))
            opened = database.execute_sql(
                f"UPDATE circuit SET state = '{OPEN}', opened = opened + 1, open_until = {p}, "
                f"updated_at = {p} WHERE endpoint = {p} AND state = {p} AND opened = {p}",
                (until, now, self.endpoint, state.state, state.opened),
            ).rowcount
            if opened == 1:
                self.seen = attrs.evolve(
                    state, state=OPEN, opened=state.opened + 1, open_until=until
                )
                return self.seen
        elif state.state == OPEN and wait:  # the endpoint asks for longer than planned
            until = now + datetime.timedelta(seconds=wait)
            database.execute_sql(
                f"UPDATE circuit SET open_until = {p} WHERE endpoint = {p} "
                f"AND state = '{OPEN}' AND open_until < {p}",
                (until, self.endpoint, until),
            )
        self.refresh()
        return None


def close(endpoint: str, now: datetime.datetime) -> bool:
    """Close the circuit of ``endpoint`` as a success would (an operator knows the endpoint
    answers again): workers take runs from their next look. Returns whether it was open,
    half-open or counting failures."""
    p = database.param
    return (
        database.execute_sql(
            f"UPDATE circuit SET state = '{CLOSED}', failures = 0, opened = 0, "
            f"failing_since = NULL, open_until = NULL, updated_at = {p} "
            f"WHERE endpoint = {p} AND NOT (state = '{CLOSED}' AND failures = 0)",
            (naive_utc(now), endpoint),
        ).rowcount
        == 1
    )


def _state(row: tuple[Any, ...]) -> State:
    state, failures, opened, failing_since, open_until, last_error = row
    return State(
        state=str(state),
        failures=int(failures),
        opened=int(opened),
        failing_since=_moment(failing_since),
        open_until=_moment(open_until),
        last_error=last_error,
    )


def _moment(value: Any) -> datetime.datetime | None:
    """A time as a row gives it (SQLite: text), as a naive UTC datetime."""
    if value is None:
        return None
    moment = Circuit.open_until.python_value(value)
    return naive_utc(moment) if isinstance(moment, datetime.datetime) else None


def describe(now: datetime.datetime, endpoint: str | None = None) -> dict[str, Any] | None:
    """How the model endpoint fares, for ``protege status`` and the dashboard: None when
    its calls succeed; else the ``endpoint``, the circuit's ``state``, ``failures`` in a
    row, ``failing_since``, ``open_until`` (while open or probed), ``seconds_left`` until
    runs are taken again (0 when they are) and ``last_error``. Without ``endpoint``, the
    circuit that changed last among the failing ones."""
    query = Circuit.select().where((Circuit.state != CLOSED) | (Circuit.failures > 0))
    if endpoint is not None:
        query = query.where(Circuit.endpoint == endpoint)
    found = query.order_by(Circuit.updated_at.desc(), Circuit.id.desc()).first()
    if found is None:
        return None
    until = found.open_until if found.state != CLOSED else None
    left = max(0.0, (until - naive_utc(now)).total_seconds()) if until is not None else 0.0
    return {
        "endpoint": found.endpoint,
        "state": found.state,
        "failures": found.failures,
        "opened": found.opened,
        "failing_since": _iso(found.failing_since),
        "open_until": _iso(until),
        "seconds_left": round(left, 1),
        "last_error": found.last_error,
    }


def summary(described: dict[str, Any]) -> str:
    """One line for operators saying what ``describe`` found."""
    since = described["failing_since"] or "?"
    line = f"model endpoint failing since {since}"
    if described["state"] == OPEN:
        line += f", circuit open until {described['open_until']}"
    elif described["state"] == HALF_OPEN:
        line += ", circuit half-open: one run is trying it"
    else:
        line += f", {described['failures']} failed call(s) in a row, circuit closed"
    if described["last_error"]:
        line += f" (last error: {described['last_error']})"
    return line


def _iso(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.replace(microsecond=0).isoformat(sep=" ") + "Z"


def alert_mail(to: str, endpoint: str, opened: State, settings: LimitSettings) -> dict[str, Any]:
    """The mail telling the operators at ``to`` that the circuit of ``endpoint`` opened
    (``opened``: the state this left it in)."""
    until = _iso(opened.open_until) or "?"
    return {
        "to": [to],
        "subject": f"Model endpoint failing: no runs are taken until {until}",
        "body": (
            f"The model endpoint {endpoint} failed {opened.failures} call(s) in a row"
            f" (since {_iso(opened.failing_since) or '?'}); the last error was:\n\n"
            f"{opened.last_error or '?'}\n\n"
            f"Workers take no runs until {until}, then let one run try the endpoint; its "
            "success resumes the others, its failure waits longer (up to "
            f"{settings.circuit_max_backoff_seconds:g} s, or as long as the endpoint asks). "
            "No run is failed meanwhile: they wait in the queue. `protege status` shows how "
            "it stands; no other mail is sent until the endpoint has answered again.\n"
        ),
    }
