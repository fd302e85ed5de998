"""What every protege record shares: the database proxy, timestamps, and a JSON list column."""

from __future__ import annotations

import datetime
import functools
import json
from typing import TYPE_CHECKING, Any, Self

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

    @classmethod
    def columns(cls, table: str | None = None) -> str:
        """This record's columns for a SELECT list, in the order ``from_row`` reads them."""
        prefix = f"{table or cls._meta.table_name}."
        return ", ".join(prefix + field.column_name for field in cls._meta.sorted_fields)

    @classmethod
    def from_row(cls, values: Any) -> Any:
        """The record a row of ``columns()`` values describes, as peewee would load it
        (for the few hot paths that write their SQL by hand)."""
        data = {
            field.name: None if value is None else field.python_value(value)
            for field, value in zip(cls._meta.sorted_fields, values, strict=True)
        }
        instance = cls(__no_default__=1, **data)
        instance._dirty.clear()  # type: ignore[attr-defined]
        return instance

    @classmethod
    def insert_new(cls, **values: Any) -> Self:
        """Create a record as ``create`` does (defaults filled in, its id set), for the rows
        every run writes: the INSERT is built once per set of columns, not per row."""
        instance = cls(**values)
        data = instance.__data__
        primary: Any = cls._meta.primary_key  # a Field here: every record has an id
        fields = tuple(
            field
            for field in cls._meta.sorted_fields
            if field.name in data and (field is not primary or data[field.name] is not None)
        )
        sql = _insert_sql(
            cls._meta.table_name,
            tuple(field.column_name for field in fields),
            primary.column_name,
            database.param,
        )
        cursor = database.execute_sql(sql, [field.db_value(data[field.name]) for field in fields])
        setattr(instance, primary.name, cursor.fetchone()[0])
        instance._dirty.clear()  # type: ignore[attr-defined]
        return instance

    @classmethod
    def fetch(cls, condition: str, *params: Any) -> list[Self]:
        """The records matching ``condition``, a WHERE clause written by hand with ``{p}``
        for each parameter, in id order; for the lookups every run makes, whose SQL is
        then built once, not per call. ``condition`` is a constant of the code: values go
        in ``params`` only (they are bound, and the built SQL is kept per condition)."""
        sql = _select_sql(cls._meta.table_name, cls.columns(), condition, database.param)
        return [cls.from_row(row) for row in database.execute_sql(sql, params)]

    @classmethod
    def update_where(cls, values: dict[str, Any], condition: str, *params: Any) -> int:
        """Set ``values`` (field name to value) on the records matching ``condition``, a
        WHERE clause written by hand as for ``fetch``; how many rows changed. For the
        updates every run makes: the UPDATE is built once per set of fields and condition."""
        fields = tuple(cls._meta.fields[name] for name in values)
        sql = _update_sql(
            cls._meta.table_name,
            tuple(field.column_name for field in fields),
            condition,
            database.param,
        )
        data = [field.db_value(values[field.name]) for field in fields]
        return database.execute_sql(sql, [*data, *params]).rowcount


@functools.cache
def _update_sql(table: str, columns: tuple[str, ...], condition: str, param: str) -> str:
    assignments = ", ".join(f"{column} = {param}" for column in columns)
    return f"UPDATE {table} SET {assignments} WHERE {condition.format(p=param)}"


@functools.cache
def _select_sql(table: str, columns: str, condition: str, param: str) -> str:
    return f"SELECT {columns} FROM {table} WHERE {condition.format(p=param)} ORDER BY id"


@functools.cache  # keyed by names: peewee fields compare with == into SQL expressions
def _insert_sql(table: str, columns: tuple[str, ...], primary: str, param: str) -> str:
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join([param] * len(columns))}) RETURNING {primary}"
    )
