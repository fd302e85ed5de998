"""Runs (one piece of an agent's work), their audit trail of events, and responsibilities."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import peewee

from protege.cron import Schedule, check_timezone, normalize_expression
from protege.db import database
from protege.errors import ProtegeError, did_you_mean
from protege.models.agents import Agent
from protege.models.base import Record, utcnow
from protege.models.messages import Message

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
WAITING = "waiting"  # a tool call waits for approval; an answer queues the run again
HELD = "held"  # over a limit: released into the queue when its window reopens
ENDED = (DONE, FAILED, CANCELLED)

# The run-state changes and event appends happen on every run, several times: they are
# plain SQL because building them with peewee's query builder cost more than running them.
# A claim marks the run running under a lease and answers with what the worker needs to go
# on: the attempt's number and the last event it already has.
_CLAIMED = (
    "UPDATE run SET status = 'running', attempts = attempts + 1, started_at = {p}, "
    "lease_owner = {p}, lease_expires_at = {p} WHERE {where} "
    "RETURNING id, attempts, (SELECT COALESCE(MAX(seq), 0) FROM event WHERE run_id = run.id), "
    "cancel_requested_at"
)
_CLAIM_ONE = "id = {p} AND status = 'queued'"
# The oldest queued run, and a running run whose worker stopped renewing its lease. On
# PostgreSQL, SKIP LOCKED lets concurrent workers each take a different row without waiting;
# SQLite runs one writing statement at a time, which makes the plain subquery just as safe.
# Queued runs are taken by turn (``protege.limits.fairness``), then in order of arrival.
_NEXT_QUEUED = (
    "id = (SELECT id FROM run WHERE status = 'queued'{busy} ORDER BY turn, id LIMIT 1{lock})"
)
# A running run with no lease at all was left by a protege older than leases: expired too.
_EXPIRED = "status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < {p})"
_NEXT_EXPIRED = (
    "id = (SELECT id FROM run WHERE " + _EXPIRED + " ORDER BY id LIMIT 1{lock}) AND " + _EXPIRED
)
# Looked at first, so an idle worker's poll only reads: on SQLite, an UPDATE takes the write
# lock even when it matches nothing, and would hold up mail being stored.
_ANY_TO_CLAIM = "SELECT 1 FROM run WHERE status = 'queued' OR (" + _EXPIRED + ") LIMIT 1"
_RENEW_SQL = (
    "UPDATE run SET lease_expires_at = {p} WHERE id = {p} AND lease_owner = {p} "
    "AND status = 'running' RETURNING cancel_requested_at"
)
_FINISH_SQL = (
    "UPDATE run SET status = {p}, error = {p}, finished_at = {p}, lease_owner = NULL, "
    "lease_expires_at = NULL WHERE id = {p} AND status = 'running' AND lease_owner = {p}"
)
_HAND_BACK_SQL = (
    "UPDATE run SET status = 'queued', attempts = attempts - 1, lease_owner = NULL, "
    "lease_expires_at = NULL WHERE id = {p} AND lease_owner = {p} AND status = 'running'"
)
_HAND_BACK_TO_SQL = (
    "UPDATE run SET status = 'queued', attempts = attempts - 1, lease_owner = NULL, "
    "lease_expires_at = NULL, turn = {p} WHERE id = {p} AND lease_owner = {p} "
    "AND status = 'running'"
)
# Rows per INSERT: five values each stay under SQLite's oldest limit of 999 variables.
APPEND_CHUNK = 150
_APPEND_SQL = "INSERT INTO event (run_id, seq, kind, payload, created_at) VALUES "
REPLY, SCHEDULED = "reply", "scheduled"


class Responsibility(Record):
    """A duty an agent carries out on its own: instructions (the prompt), run on a schedule.

    ``schedule`` is a five-field cron expression read in ``timezone`` (see
    ``protege.cron``); without one, the duty runs only when asked (``protege
    responsibilities run``). Due times count from ``scheduled_from``: it is set on create,
    and again when the schedule, time zone or enabled state changes, so a change never
    makes up runs for due times before it. Everything is checked on save.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        agent_id: Any
        runs: Any

    agent = peewee.ForeignKeyField(Agent, backref="responsibilities", on_delete="CASCADE")
    name = peewee.CharField(max_length=200)
    prompt = peewee.TextField()
    schedule = peewee.CharField(max_length=200, null=True)
    timezone = peewee.CharField(max_length=64, default="UTC")
    enabled = peewee.BooleanField(default=True)
    scheduled_from = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(null=True)

    class Meta:
        indexes = ((("agent", "name"), True),)

    @classmethod
    def named(cls, name: str, agent: Agent | None = None) -> Responsibility:
        """The responsibility called ``name`` (of ``agent``, when several agents have one by
        that name); ``ProtegeError`` if there is none or the name is ambiguous."""
        query = cls.select(cls, Agent).join(Agent).where(cls.name == name)
        if agent is not None:
            query = query.where(cls.agent == agent)
        found = list(query.limit(2))
        if not found:
            whose = f" for {agent.name}" if agent is not None else ""
            others = cls.select(cls.name)
            if agent is not None:
                others = others.where(cls.agent == agent)
            hint = did_you_mean(name, [row.name for row in others])
            raise ProtegeError(f"no responsibility named {name!r}{whose}{hint}")
        if len(found) > 1:
            raise ProtegeError(
                f"several agents have a responsibility named {name!r}: say whose with --agent"
            )
        return found[0]

    @property
    def cron(self) -> Schedule | None:
        """The parsed schedule, or None when the duty runs only when asked."""
        return None if self.schedule is None else Schedule(self.schedule, self.timezone)

    def save(self, force_insert: bool = False, only: Any = None) -> Any:
        changed = {field.name for field in self.dirty_fields}  # before the clean-up below
        self.name = " ".join((self.name or "").split())
        if not self.name or not self.name.isprintable():
            raise ProtegeError("a responsibility needs a name (one line of text)")
        if not (self.prompt or "").strip():
            raise ProtegeError(f"responsibility {self.name!r} needs instructions")
        self.timezone = self.timezone or "UTC"
        check_timezone(self.timezone)
        if self.schedule is not None:
            self.schedule = normalize_expression(self.schedule)
        clash = Responsibility.get_or_none(
            (Responsibility.agent == self.agent_id)
            & (Responsibility.name == self.name)
            & (Responsibility.id != self.id)
        )
        if clash is not None:
            raise ProtegeError(
                f"{self.agent.name} already has a responsibility named {self.name!r}"
            )
        creating = force_insert or self.id is None
        timing = {"schedule", "timezone", "enabled"}
        if "scheduled_from" not in changed and (creating or changed & timing):
            self.scheduled_from = utcnow()
        self.updated_at = utcnow()
        return super().save(force_insert=force_insert, only=only)


_CANCELLED_QUEUED = "cancelled by an operator before it started"
_CANCELLED_WAITING = "cancelled by an operator while it waited for approval"
_CANCELLED_HELD = "cancelled by an operator while it was held"


class Run(Record):
    """One run of an agent: answering an inbound message, or carrying out a responsibility."""

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        agent_id: Any
        message_id: Any
        responsibility_id: Any
        events: Any
        sent: Any

    agent = peewee.ForeignKeyField(Agent, backref="runs", on_delete="CASCADE")
    kind = peewee.CharField(max_length=9)
    message = peewee.ForeignKeyField(Message, null=True, backref="runs", on_delete="CASCADE")
    responsibility = peewee.ForeignKeyField(
        Responsibility, null=True, backref="runs", on_delete="CASCADE"
    )
    status = peewee.CharField(max_length=8, default=QUEUED)
    attempts = peewee.IntegerField(default=0)
    correlation_id = peewee.CharField(max_length=64, unique=True)
    error = peewee.TextField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)
    started_at = peewee.DateTimeField(null=True)
    finished_at = peewee.DateTimeField(null=True)
    due_at = peewee.DateTimeField(null=True)  # the due time a scheduled run stands for (UTC)
    settled_at = peewee.DateTimeField(null=True)  # when its failure was retried out, reported
    # Guardrails (``protege.limits``): who the run counts against, its place among queued
    # runs (workers take the lowest turn first), when it was let into the queue, and while
    # held, until when and why.
    sender_key = peewee.CharField(max_length=320, null=True)
    turn = peewee.IntegerField(default=0)
    admitted_at = peewee.DateTimeField(null=True)
    held_until = peewee.DateTimeField(null=True)
    held_reason = peewee.TextField(null=True)
    # Who released it from its last hold, when an operator did: a run a spending limit
    # stopped part way then goes on past that limit.
    released_by = peewee.CharField(max_length=200, null=True)
    # The lane it takes turns in: its sender's, or, for mail that did not prove its
    # sender, one lane for all such mail of its agent (``protege.limits.senders``).
    lane = peewee.CharField(max_length=320, null=True)

    class Meta:
        indexes = ((("responsibility", "due_at"), True),)

    def timeline(self) -> list[Event]:
        """This run's events, in the order they happened."""
        return list(self.events.order_by(Event.seq))

    lease_owner = peewee.CharField(max_length=64, null=True)  # the worker attempt holding it
    lease_expires_at = peewee.DateTimeField(null=True)  # taken over by another worker after
    cancel_requested_at = peewee.DateTimeField(null=True)  # an operator asked it to stop

    @staticmethod
    def claim(
        run_id: int, owner: str, now: datetime.datetime, lease_seconds: float
    ) -> Claim | None:
        """Mark the queued run ``run_id`` running under a lease held by ``owner``, if it is
        still queued (safe when several workers race for it); None if it was not."""
        sql = _CLAIMED.format(p=database.param, where=_CLAIM_ONE.format(p=database.param))
        lease = now + datetime.timedelta(seconds=lease_seconds)
        return _claimed(database.execute_sql(sql, (now, owner, lease, run_id)), owner, False)

    @staticmethod
    def claim_next(
        owner: str,
        now: datetime.datetime,
        lease_seconds: float,
        *,
        look: bool = True,
        expired: bool = True,
        busy_agents: Sequence[int] = (),
    ) -> Claim | None:
        """Take the next run for a worker: first a running run whose lease expired before
        ``now`` (its worker died), then the queued one with the lowest turn (the oldest
        among equals), leaving alone the queued runs of ``busy_agents`` (agents at their
        limit of runs in flight); None when there is neither.

        A busy worker, whose last claim found a run, may skip the ``look`` (a read, first,
        that spares an idle poll SQLite's write lock) and, between its regular looks, the
        ``expired`` runs (a lease runs for many seconds)."""
        p = database.param
        if look and not database.execute_sql(_ANY_TO_CLAIM.format(p=p), (now,)).fetchall():
            return None
        lock = (
            " FOR UPDATE SKIP LOCKED" if isinstance(database.obj, peewee.PostgresqlDatabase) else ""
        )
        lease = now + datetime.timedelta(seconds=lease_seconds)
        if expired:
            sql = _CLAIMED.format(p=p, where=_NEXT_EXPIRED.format(p=p, lock=lock))
            found = _claimed(database.execute_sql(sql, (now, owner, lease, now, now)), owner, True)
            if found is not None:
                return found
        busy = (
            " AND agent_id NOT IN (" + ", ".join(str(int(a)) for a in busy_agents) + ")"
            if busy_agents
            else ""
        )
        queued = _CLAIMED.format(p=p, where=_NEXT_QUEUED.format(lock=lock, busy=busy))
        return _claimed(database.execute_sql(queued, (now, owner, lease)), owner, False)

    @staticmethod
    def renew_lease(run_id: int, owner: str, now: datetime.datetime, lease_seconds: float) -> Lease:
        """Extend ``owner``'s lease on run ``run_id``; says whether it still holds it and
        whether an operator asked the run to stop."""
        lease = now + datetime.timedelta(seconds=lease_seconds)
        rows = database.execute_sql(
            _RENEW_SQL.format(p=database.param), (lease, run_id, owner)
        ).fetchall()
        return Lease(held=bool(rows), cancel_requested=bool(rows) and rows[0][0] is not None)

    @staticmethod
    def cancelled_among(run_ids: list[int]) -> list[int]:
        """Which of the runs ``run_ids`` an operator asked to stop (one query for all)."""
        if not run_ids:
            return []
        query = Run.select(Run.id).where(
            Run.id.in_(run_ids) & Run.cancel_requested_at.is_null(False)
        )
        return [run.id for run in query]

    @staticmethod
    def hand_back(run_id: int, owner: str, *, turn: int | None = None) -> bool:
        """Put run ``run_id``, held by ``owner``, back in the queue (its worker is shutting
        down, or the model endpoint failed); it resumes from its events, in its own turn or
        in ``turn``. Whether it was still held."""
        if turn is None:
            cursor = database.execute_sql(_HAND_BACK_SQL.format(p=database.param), (run_id, owner))
        else:
            cursor = database.execute_sql(
                _HAND_BACK_TO_SQL.format(p=database.param), (turn, run_id, owner)
            )
        return cursor.rowcount == 1

    @staticmethod
    def request_cancel(run_id: int, now: datetime.datetime) -> str | None:
        """Stop run ``run_id``: a queued, waiting or held run is cancelled at once, a running
        one is asked to stop at its next step. Returns the status it had, or None if there
        is no such run."""
        # One statement, so that nothing (an approval waking the run, a worker claiming it,
        # a release) lands between seeing its status and changing it: the status it had
        # decides.
        p = database.param
        cursor = database.execute_sql(
            "UPDATE run SET "
            "status = CASE WHEN status IN ('queued', 'waiting', 'held') THEN 'cancelled' "
            "ELSE status END, "
            f"error = CASE status WHEN 'queued' THEN {p} WHEN 'waiting' THEN {p} "
            f"WHEN 'held' THEN {p} ELSE error END, "
            "finished_at = CASE WHEN status IN ('queued', 'waiting', 'held') "
            f"THEN {p} ELSE finished_at END, "
            f"cancel_requested_at = CASE WHEN status = 'running' THEN {p} "
            "ELSE cancel_requested_at END "
            f"WHERE id = {p} AND status IN ('queued', 'waiting', 'held', 'running') "
            "RETURNING status, error",
            (_CANCELLED_QUEUED, _CANCELLED_WAITING, _CANCELLED_HELD, now, now, run_id),
        )
        changed = cursor.fetchone()
        if changed is not None:
            status, error = changed
            if status == RUNNING:
                return RUNNING
            return {_CANCELLED_QUEUED: QUEUED, _CANCELLED_WAITING: WAITING}.get(error, HELD)
        found = Run.select(Run.status).where(Run.id == run_id).first()
        return None if found is None else found.status

    def finish(self, status: str, error: str | None = None, owner: str | None = None) -> bool:
        """Record that this run ended (done, failed or cancelled) and why; whether it was
        recorded: not when the run is no longer running, nor when ``owner`` no longer holds
        its lease (a run taken over and ended by another worker stays as that one ended it;
        this object is left as it was)."""
        finished_at = utcnow()
        cursor = database.execute_sql(
            _FINISH_SQL.format(p=database.param),
            (status, error, finished_at, self.id, owner),
        )
        if cursor.rowcount != 1:
            return False
        self.status, self.error, self.finished_at = status, error, finished_at
        return True


@attrs.frozen
class Claim:
    """A worker's hold on a run it took: the attempt's number, the last event the run has,
    the lease's owner, and whether it took the run over from a worker that stopped."""

    run_id: int
    attempts: int
    last_seq: int
    owner: str
    taken_over: bool
    cancel_requested: bool = False


@attrs.frozen
class Lease:
    """What renewing a lease found: whether the worker still holds the run, and whether an
    operator asked it to stop."""

    held: bool
    cancel_requested: bool


def _claimed(cursor: Any, owner: str, taken_over: bool) -> Claim | None:
    rows = cursor.fetchall()  # all of them: SQLite finishes the statement only then
    if not rows:
        return None
    run_id, attempts, last_seq, cancel_requested_at = rows[0]
    return Claim(
        cancel_requested=cancel_requested_at is not None,
        run_id=run_id,
        attempts=attempts,
        last_seq=last_seq,
        owner=owner,
        taken_over=taken_over,
    )


class Event(Record):
    """One step of a run, appended and never changed: the run's audit trail."""

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        run_id: Any

    run = peewee.ForeignKeyField(Run, backref="events", on_delete="CASCADE")
    seq = peewee.IntegerField()
    kind = peewee.CharField(max_length=32)
    payload_json = peewee.TextField(column_name="payload")
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("run", "seq"), True),)

    @staticmethod
    def append(run_id: int, rows: list[tuple[int, str, str]]) -> datetime.datetime:
        """Add events to the trail of run ``run_id``: each row is its number, kind and
        payload (JSON text), a statement per ``APPEND_CHUNK`` rows. Returns the time they
        are recorded at."""
        now, p = utcnow(), database.param
        for start in range(0, len(rows), APPEND_CHUNK):
            chunk = rows[start : start + APPEND_CHUNK]
            values = ", ".join([f"({p}, {p}, {p}, {p}, {p})"] * len(chunk))
            database.execute_sql(
                _APPEND_SQL + values,
                [
                    field
                    for seq, kind, payload in chunk
                    for field in (run_id, seq, kind, payload, now)
                ],
            )
        return now

    @property
    def payload(self) -> dict[str, Any]:
        """The event's data."""
        return json.loads(self.payload_json)
