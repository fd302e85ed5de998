"""The records guardrails keep: spending per agent and day, notices already sent for a
window, and the model endpoint's circuit (``protege.limits``)."""

from __future__ import annotations

import peewee

from protege.models.agents import Agent
from protege.models.base import Record, utcnow

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"
SENDER, OPERATORS = "sender", "operators"


class UsageDay(Record):
    """What one agent spent on one model on one UTC day (``YYYY-MM-DD``): answers, tokens
    sent and written, and their cost in millionths of the price table's currency."""

    agent = peewee.ForeignKeyField(Agent, on_delete="CASCADE")
    day = peewee.CharField(max_length=10)
    model = peewee.CharField(max_length=200)
    responses = peewee.IntegerField(default=0)
    prompt_tokens = peewee.BigIntegerField(default=0)
    completion_tokens = peewee.BigIntegerField(default=0)
    cost_micros = peewee.BigIntegerField(default=0)

    class Meta:
        table_name = "usage_day"
        indexes = ((("agent", "day", "model"), True),)


class LimitNotice(Record):
    """A notice already sent for a window: to a held sender (``audience`` ``sender``,
    ``subject`` their address) or to the operators (``operators``, ``subject`` the limit),
    so that each is sent at most once per window."""

    audience = peewee.CharField(max_length=16)
    agent = peewee.ForeignKeyField(Agent, null=True, on_delete="CASCADE")
    subject = peewee.CharField(max_length=320)
    window_start = peewee.DateTimeField()
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "limit_notice"
        indexes = ((("audience", "agent", "subject", "window_start"), True),)


class Circuit(Record):
    """The model endpoint's circuit breaker, shared by every process on the database:
    ``closed`` (runs go on), ``open`` (no runs are taken until ``open_until``) or
    ``half-open`` (one run tries the endpoint). ``failures`` counts failed calls in a row,
    ``opened`` the times it opened since it last closed; ``failing_since`` is when the
    failures began."""

    endpoint = peewee.CharField(max_length=400, unique=True)
    state = peewee.CharField(max_length=9, default=CLOSED)
    failures = peewee.IntegerField(default=0)
    opened = peewee.IntegerField(default=0)
    failing_since = peewee.DateTimeField(null=True)
    open_until = peewee.DateTimeField(null=True)
    last_error = peewee.TextField(null=True)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "circuit"
