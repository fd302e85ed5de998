"""Operators (people who sign in to the dashboard) and the audit log of changes to access."""

from __future__ import annotations

import json
from typing import Any

import peewee

from protege.models.base import Record, utcnow


class Operator(Record):
    """A person who may sign in to the dashboard. ``password_hash`` is a memory-hard KDF's
    output (the dashboard writes and checks it); the password itself is never stored."""

    name = peewee.CharField(max_length=200, unique=True)
    password_hash = peewee.CharField(max_length=500)
    created_at = peewee.DateTimeField(default=utcnow)
    # Raised to end every session made before (logging out): a session holds the value it
    # was made with.
    session_generation = peewee.IntegerField(default=0)


class AuditEntry(Record):
    """One change to who may use what: who made it, when, and the subject before and after
    (``None`` before a creation and after a deletion). Appended, never changed."""

    at = peewee.DateTimeField(default=utcnow)
    actor = peewee.CharField(max_length=300)
    action = peewee.CharField(max_length=200)
    subject_kind = peewee.CharField(max_length=32)
    subject = peewee.CharField(max_length=500)
    before_json = peewee.TextField(null=True, column_name="before")
    after_json = peewee.TextField(null=True, column_name="after")

    class Meta:
        table_name = "audit_entry"

    @property
    def before(self) -> Any:
        """The subject as it was (``None`` if it did not exist)."""
        return None if self.before_json is None else json.loads(self.before_json)

    @property
    def after(self) -> Any:
        """The subject as it became (``None`` if it was deleted)."""
        return None if self.after_json is None else json.loads(self.after_json)
