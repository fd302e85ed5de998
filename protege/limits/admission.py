"""Whether a run may go into the queue now, or is held: the limits of ``[limits]`` read
against what the database says was admitted and spent in each window.

Runs count from when they were admitted (queued, or released from being held); spending
comes from ``usage_day``, kept as answers come (``protege.limits.spending``). Each check
is a few indexed reads, made in the transaction that stores the run: admissions of one
agent take turns (SQLite's write lock; an advisory lock per agent on PostgreSQL), so no two
processes both see a count just under its limit.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Mapping

import attrs
import peewee

from protege.db import database
from protege.limit_settings import (
    AGENT_COST_PER_DAY,
    AGENT_COST_PER_MONTH,
    AGENT_RUNS_PER_HOUR,
    AGENT_TOKENS_PER_DAY,
    AGENT_TOKENS_PER_MONTH,
    INSTALLATION_COST_PER_DAY,
    INSTALLATION_TOKENS_PER_DAY,
    SENDER_RUNS_PER_DAY,
    SENDER_RUNS_PER_HOUR,
    SPENDING_LIMITS,
    UNPROVEN_RUNS_PER_HOUR,
    LimitSettings,
)
from protege.limits.senders import is_unproven, lane_of, shown
from protege.limits.windows import DAY, HOUR, MONTH, day_key, naive_utc, window

BEHIND_HELD = "held_mail"  # not a limit: earlier mail of the same sender is held
MICROS = 1_000_000

WINDOW_OF = {
    SENDER_RUNS_PER_HOUR: HOUR,
    SENDER_RUNS_PER_DAY: DAY,
    AGENT_RUNS_PER_HOUR: HOUR,
    UNPROVEN_RUNS_PER_HOUR: HOUR,
    AGENT_TOKENS_PER_DAY: DAY,
    AGENT_TOKENS_PER_MONTH: MONTH,
    INSTALLATION_TOKENS_PER_DAY: DAY,
    AGENT_COST_PER_DAY: DAY,
    AGENT_COST_PER_MONTH: MONTH,
    INSTALLATION_COST_PER_DAY: DAY,
}

_SENDER_RUNS = (
    "SELECT COUNT(*), SUM(CASE WHEN admitted_at >= {p} THEN 1 ELSE 0 END) FROM run "
    "WHERE agent_id = {p} AND sender_key = {p} AND admitted_at >= {p}"
)
_AGENT_RUNS = "SELECT COUNT(*) FROM run WHERE agent_id = {p} AND admitted_at >= {p}"
_LANE_RUNS = "SELECT COUNT(*) FROM run WHERE agent_id = {p} AND admitted_at >= {p} AND lane = {p}"
_HELD_BEFORE = (
    "SELECT MIN(held_until) FROM run WHERE status = 'held' AND sender_key = {p} AND agent_id = {p}"
)
# One read for the three spending windows: the agent's day and month, everyone's day.
_SPENT = (
    "SELECT "
    "SUM(CASE WHEN agent_id = {p} AND day = {p} THEN prompt_tokens + completion_tokens END), "
    "SUM(CASE WHEN agent_id = {p} THEN prompt_tokens + completion_tokens END), "
    "SUM(CASE WHEN day = {p} THEN prompt_tokens + completion_tokens END), "
    "SUM(CASE WHEN agent_id = {p} AND day = {p} THEN cost_micros END), "
    "SUM(CASE WHEN agent_id = {p} THEN cost_micros END), "
    "SUM(CASE WHEN day = {p} THEN cost_micros END) "
    "FROM usage_day WHERE day >= {p} AND day < {p} AND (agent_id = {p} OR day = {p})"
)


@attrs.frozen
class Hold:
    """Why a run is held: the ``limit`` reached (or ``held_mail``: earlier mail of the same
    sender waits), what it allows and what was used in the window, and the window's start
    and end (naive UTC), when the run may be released."""

    limit: str
    allowed: float
    used: float
    window_start: datetime.datetime
    until: datetime.datetime
    subject: str = ""  # whose: the sender, the agent or the installation

    @property
    def reason(self) -> str:
        """The hold in one line, as operators and events read it."""
        until = f"held until {self.until:%Y-%m-%d %H:%M} UTC"
        whose = shown(self.subject)
        if self.limit == BEHIND_HELD:
            return f"earlier mail from {whose} is held; {until}"
        used, allowed = _amount(self.limit, self.used), _amount(self.limit, self.allowed)
        return f"{self.limit} reached by {whose} ({used} of {allowed}); {until}"

    def as_json(self) -> dict[str, object]:
        """The hold as events and ``--json`` output carry it."""
        return {
            "limit": self.limit,
            "allowed": self.allowed,
            "used": self.used,
            "subject": self.subject,
            "window_start": self.window_start.isoformat(),
            "until": self.until.isoformat(),
            "reason": self.reason,
        }


def _amount(limit: str, value: float) -> str:
    if "cost" in limit:
        return f"{value:.4f}"
    return f"{int(value):,}"


def run_limit_reached(
    agent_id: int,
    sender_key: str | None,
    now: datetime.datetime,
    limits: Mapping[str, float],
    *,
    subject: str = "",
) -> Hold | None:
    """The run limit of ``limits`` (an agent's, ``LimitSettings.for_agent``) that one more
    run of ``sender_key`` for agent ``agent_id`` would pass, or None; of several, the one
    whose window ends last (nothing may run before then)."""
    now = naive_utc(now)
    p = database.param
    hour_start, hour_end = window(HOUR, now)
    day_start, day_end = window(DAY, now)
    reached: list[Hold] = []
    if sender_key is not None and (limits[SENDER_RUNS_PER_HOUR] or limits[SENDER_RUNS_PER_DAY]):
        today, this_hour = database.execute_sql(
            _SENDER_RUNS.format(p=p), (hour_start, agent_id, sender_key, day_start)
        ).fetchone()
        today, this_hour = int(today or 0), int(this_hour or 0)
        for limit, used, start, end in (
            (SENDER_RUNS_PER_HOUR, this_hour, hour_start, hour_end),
            (SENDER_RUNS_PER_DAY, today, day_start, day_end),
        ):
            if limits[limit] and used >= limits[limit]:
                reached.append(Hold(limit, limits[limit], used, start, end, subject or sender_key))
    if limits[AGENT_RUNS_PER_HOUR]:
        (used,) = database.execute_sql(_AGENT_RUNS.format(p=p), (agent_id, hour_start)).fetchone()
        if int(used or 0) >= limits[AGENT_RUNS_PER_HOUR]:
            reached.append(
                Hold(
                    AGENT_RUNS_PER_HOUR,
                    limits[AGENT_RUNS_PER_HOUR],
                    int(used),
                    hour_start,
                    hour_end,
                    "the agent",
                )
            )
    if is_unproven(sender_key) and limits[UNPROVEN_RUNS_PER_HOUR]:
        (used,) = database.execute_sql(
            _LANE_RUNS.format(p=p), (agent_id, hour_start, lane_of(sender_key, agent_id))
        ).fetchone()
        if int(used or 0) >= limits[UNPROVEN_RUNS_PER_HOUR]:
            reached.append(
                Hold(
                    UNPROVEN_RUNS_PER_HOUR,
                    limits[UNPROVEN_RUNS_PER_HOUR],
                    int(used),
                    hour_start,
                    hour_end,
                    "mail that did not prove its sender",
                )
            )
    return _binding(reached)


def _binding(reached: list[Hold]) -> Hold | None:
    """Of the limits reached, the one that holds longest (the first named, among equals)."""
    if not reached:
        return None
    return max(reached, key=lambda hold: hold.until)


def spending_limit_reached(
    agent_id: int, now: datetime.datetime, limits: Mapping[str, float]
) -> Hold | None:
    """The spending limit (tokens or money) the agent ``agent_id`` or the installation has
    reached in its window, or None; of several, the one whose window ends last."""
    if not any(limits[name] for name in SPENDING_LIMITS):
        return None
    now = naive_utc(now)
    day_start, day_end = window(DAY, now)
    month_start, month_end = window(MONTH, now)
    today = day_key(now)
    p = database.param
    row = database.execute_sql(
        _SPENT.format(p=p),
        (
            agent_id,
            today,
            agent_id,
            today,
            agent_id,
            today,
            agent_id,
            today,
            day_key(month_start),
            day_key(month_end),
            agent_id,
            today,
        ),
    ).fetchone()
    spent = [int(value or 0) for value in row]
    used = {
        AGENT_TOKENS_PER_DAY: spent[0],
        AGENT_TOKENS_PER_MONTH: spent[1],
        INSTALLATION_TOKENS_PER_DAY: spent[2],
        AGENT_COST_PER_DAY: spent[3] / MICROS,
        AGENT_COST_PER_MONTH: spent[4] / MICROS,
        INSTALLATION_COST_PER_DAY: spent[5] / MICROS,
    }
    reached = []
    for limit in SPENDING_LIMITS:
        allowed = limits[limit]
        if allowed and used[limit] >= allowed:
            start, end = (
                (month_start, month_end) if WINDOW_OF[limit] == MONTH else (day_start, day_end)
            )
            whose = "the installation" if limit.startswith("installation") else "the agent"
            reached.append(Hold(limit, allowed, used[limit], start, end, whose))
    return _binding(reached)


def held_before(agent_id: int, sender_key: str | None) -> datetime.datetime | None:
    """When the earliest held run of ``sender_key`` for agent ``agent_id`` may be released,
    if any of its runs is held (new mail then waits behind it, in order)."""
    if sender_key is None:
        return None
    (until,) = database.execute_sql(
        _HELD_BEFORE.format(p=database.param), (sender_key, agent_id)
    ).fetchone()
    return until if until is None or isinstance(until, datetime.datetime) else _parsed(until)


def _parsed(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(str(value))


ADMISSION_LOCK = 0x6C696D74  # "limt": one admission per agent at a time on PostgreSQL


@contextlib.contextmanager
def admitting(agent_id: int) -> Iterator[None]:
    """A transaction in which runs of agent ``agent_id`` are admitted one at a time across
    processes, so counts are exact: on PostgreSQL an advisory lock per agent until the
    transaction ends, on SQLite the write lock, taken before the counts are read."""
    target = getattr(database, "obj", None) or database
    if isinstance(target, peewee.PostgresqlDatabase):
        with database.atomic():
            _lock_agent(agent_id)
            yield
    elif database.transaction_depth() == 0:
        with database.atomic(lock_type="IMMEDIATE"):
            yield
    else:  # within the caller's transaction, which holds the write lock once it wrote
        with database.atomic():
            yield


def _lock_agent(agent_id: int) -> None:
    lock_admissions([agent_id])


def lock_admissions(agent_ids: list[int]) -> None:
    """Within the caller's transaction, take the admission locks of ``agent_ids`` (on
    PostgreSQL; SQLite's write lock covers them), in one order whatever the caller's: a mail
    to two agents and another to the same two, listed the other way, never deadlock."""
    if isinstance(getattr(database, "obj", None) or database, peewee.PostgresqlDatabase):
        for agent_id in sorted(set(agent_ids)):
            database.execute_sql("SELECT pg_advisory_xact_lock(%s, %s)", (ADMISSION_LOCK, agent_id))


def admission(
    agent_id: int,
    agent_name: str,
    sender_key: str | None,
    now: datetime.datetime,
    settings: LimitSettings,
    *,
    count_runs: bool = True,
    waiting_behind: bool = True,
) -> Hold | None:
    """Why a new run of agent ``agent_id`` for ``sender_key`` (None: a scheduled run) must
    be held now, or None when it may be queued. New mail waits behind its sender's held
    mail (``waiting_behind``; not a held run being released, oldest first);
    ``count_runs=False`` leaves run limits out (a scheduled run)."""
    now = naive_utc(now)
    limits = settings.for_agent(agent_name)
    if count_runs:
        _lock_agent(agent_id)  # held to the end of the caller's transaction
        waiting = held_before(agent_id, sender_key) if waiting_behind else None
        if waiting is not None:
            start, _ = window(HOUR, now)
            return Hold(BEHIND_HELD, 0, 0, start, max(waiting, now), sender_key or "")
        reached = run_limit_reached(agent_id, sender_key, now, limits)
        if reached is not None:
            return reached
    return spending_limit_reached(agent_id, now, limits)
