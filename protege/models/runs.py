"""Runs (one piece of an agent's work), their audit trail of events, and responsibilities."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

import peewee

from protege.cron import Schedule, check_timezone, normalize_expression
from protege.db import database
from protege.errors import ProtegeError, did_you_mean
from protege.models.agents import Agent
from protege.models.base import Record, utcnow
from protege.models.messages import Message

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"

# The run-state changes and event appends happen on every run, several times: they are
# plain SQL because building them with peewee's query builder cost more than running them.
_CLAIM_SQL = (
    "UPDATE run SET status = 'running', attempts = attempts + 1, started_at = {p} "
    "WHERE id = {p} AND status = 'queued'"
)
_FINISH_SQL = "UPDATE run SET status = {p}, error = {p}, finished_at = {p} WHERE id = {p}"
_APPEND_SQL = (
    "INSERT INTO event (run_id, seq, kind, payload, created_at) VALUES ({p}, {p}, {p}, {p}, {p})"
)
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

    class Meta:
        indexes = ((("responsibility", "due_at"), True),)

    def timeline(self) -> list[Event]:
        """This run's events, in the order they happened."""
        return list(self.events.order_by(Event.seq))

    @staticmethod
    def claim(run_id: int, started: datetime.datetime) -> bool:
        """Mark the queued run ``run_id`` running, if it still is queued; whether it was
        (safe when several workers race for it)."""
        cursor = database.execute_sql(_CLAIM_SQL.format(p=database.param), (started, run_id))
        return cursor.rowcount == 1

    def finish(self, status: str, error: str | None = None) -> None:
        """Record that this run ended, done or failed, and why."""
        self.status, self.error, self.finished_at = status, error, utcnow()
        database.execute_sql(
            _FINISH_SQL.format(p=database.param), (status, error, self.finished_at, self.id)
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
    def append(run_id: int, seq: int, kind: str, payload_json: str) -> None:
        """Add event number ``seq`` of ``kind`` to the trail of run ``run_id``."""
        database.execute_sql(
            _APPEND_SQL.format(p=database.param), (run_id, seq, kind, payload_json, utcnow())
        )

    @property
    def payload(self) -> dict[str, Any]:
        """The event's data."""
        return json.loads(self.payload_json)
