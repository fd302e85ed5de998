"""What every protege record shares: the database proxy, timestamps, and a JSON list column."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

import peewee

from protege.db import database


def utcnow() -> datetime.datetime:
    """The current UTC time, naive, as protege stores it."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class JSONListField(peewee.TextField):
    """A list stored as JSON text, so it reads the same on SQLite and PostgreSQL."""

    def db_value(self, value: Any) -> str:
        return json.dumps(list(value or []))

    def python_value(self, value: Any) -> list[Any]:
        return [] if value is None else json.loads(value)


class Record(peewee.Model):
    """Base of protege's records."""

    if TYPE_CHECKING:  # the primary key peewee adds
        id: Any

    class Meta:
        database = database
        legacy_table_names = False
