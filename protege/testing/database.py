"""Test databases: a throwaway one per use, or one migrated per session and emptied per test."""

from __future__ import annotations

import contextlib
import graphlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs
import peewee

from protege import db
from protege.migrations import VERSION_TABLE

TEST_DATABASE_VARIABLE = "PROTEGE_TEST_DATABASE_URL"
SQLITE_FILE = "protege-test.db"


@attrs.frozen
class TestDatabase:
    """A database made for one test: its URL (usable by subprocesses) and the connection."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    url: str
    database: peewee.Database


@contextlib.contextmanager
def fresh_database(folder: Path, server_url: str | None = None) -> Iterator[TestDatabase]:
    """Bind protege to a new, migrated database, and throw it away afterwards.

    With ``server_url`` (a PostgreSQL URL) the database is a new schema on that server,
    dropped on exit; otherwise a SQLite file in ``folder``.
    """
    if server_url:
        schema, url = _new_schema(server_url)
    else:
        schema, url = None, _sqlite_url(folder / SQLITE_FILE)
    try:
        database = db.connect(url)
        db.migrate()
        yield TestDatabase(url=url, database=database)
    finally:
        _close_bound()
        if server_url and schema is not None:
            _drop_schema(server_url, schema)


class SessionDatabase:
    """One migrated database for a whole test session, handed to each test empty.

    Migrating is most of what a fresh test database costs (about half a second on
    PostgreSQL), so it is done once. On SQLite each test gets a copy of the migrated file in
    its own folder; on PostgreSQL each test gets the session's schema with every table
    emptied and every id sequence restarted. Either way a test sees what ``fresh_database``
    gives: the current schema, no rows, ids from 1. A test that changes the schema itself
    needs ``fresh_database`` (the ``protege_fresh_db`` marker), since on PostgreSQL the
    change would outlive it.
    """

    def __init__(self, folder: Path, server_url: str | None = None) -> None:
        self.server_url = server_url
        self.schema: str | None
        if server_url:
            self.schema, self.url = _new_schema(server_url)
        else:
            self.schema, self.url = None, _sqlite_url(folder / "protege-template.db")
            self.template = folder / "protege-template.db"
        bound = db.connect(self.url)
        db.migrate()
        self._empty: str | None = None
        self._cleaner: peewee.Database | None = None
        if self.schema is not None:
            self._empty = _emptying_statement(bound)
            self._cleaner = db.open_database(self.url)
            self._cleaner.connect()
            # A test that left a transaction holding rows would make the cleaning wait
            # forever; fail it loudly instead.
            self._cleaner.execute_sql("SET lock_timeout = '10s'")
        _close_bound()  # closing checkpoints the SQLite WAL, so the file alone is the template

    @contextlib.contextmanager
    def checkout(self, folder: Path) -> Iterator[TestDatabase]:
        """Bind protege to the session's database, empty, for one test."""
        if self._cleaner is None:
            path = folder / SQLITE_FILE
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.template, path)
            url = _sqlite_url(path)
        else:
            with self._cleaner.atomic():
                self._cleaner.execute_sql(self._empty)
            url = self.url
        try:
            yield TestDatabase(url=url, database=db.connect(url))
        finally:
            _close_bound()

    def close(self) -> None:
        """Drop the session's PostgreSQL schema (a SQLite template goes with its folder)."""
        if self._cleaner is not None and self.server_url and self.schema:
            self._cleaner.close()
            _drop_schema(self.server_url, self.schema)


def _emptying_statement(database: peewee.Database) -> str:
    """SQL that empties every table but the migrations' own and restarts the id sequences.

    DELETE on a few small tables is a hundred times faster than TRUNCATE, but must respect
    foreign keys: references that may be null (and no CHECK reads) are cleared first, which
    breaks cycles such as an outbound message's run and a run's message; then tables go
    children first. Should a cycle remain, TRUNCATE it is.
    """
    in_schema = "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
    tables = [
        name
        for (name,) in database.execute_sql(
            f"SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = {in_schema}"
        )
        if name != VERSION_TABLE
    ]
    parents: dict[str, set[str]] = {name: set() for name in tables}
    clear: list[str] = []
    for child, parent, columns, clearable in database.execute_sql(
        "SELECT child.relname, parent.relname, array_agg(a.attname::text), "
        "bool_and(NOT a.attnotnull AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
        "WHERE c.contype = 'c' AND c.conrelid = k.conrelid AND a.attnum = ANY (c.conkey))) "
        "FROM pg_constraint k "
        "JOIN pg_class child ON child.oid = k.conrelid "
        "JOIN pg_class parent ON parent.oid = k.confrelid "
        "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey) "
        f"WHERE k.contype = 'f' AND k.connamespace = {in_schema} "
        "GROUP BY k.oid, child.relname, parent.relname"
    ):
        if child not in parents:
            continue
        if clearable:
            assignments = ", ".join(f'"{column}" = NULL' for column in columns)
            clear.append(f'UPDATE "{child}" SET {assignments}')
        elif child != parent:
            parents[child].add(parent)
    sequences = [
        name
        for (name,) in database.execute_sql(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()"
        )
    ]
    try:
        order = list(graphlib.TopologicalSorter(parents).static_order())
    except graphlib.CycleError:
        listed = ", ".join(f'"{name}"' for name in tables)
        return f"TRUNCATE {listed} RESTART IDENTITY CASCADE"
    statements = [*clear, *(f'DELETE FROM "{name}"' for name in reversed(order))]
    if sequences:
        restarts = ", ".join(f"setval('\"{name}\"', 1, false)" for name in sequences)
        statements.append(f"SELECT {restarts}")
    return "; ".join(statements)


def _new_schema(server_url: str) -> tuple[str, str]:
    schema = f"protege_test_{uuid.uuid4().hex[:12]}"
    admin = db.open_database(server_url)
    admin.execute_sql(f'CREATE SCHEMA "{schema}"')
    admin.close()
    separator = "&" if "?" in server_url else "?"
    return schema, f"{server_url}{separator}options={quote(f'-csearch_path={schema}')}"


def _drop_schema(server_url: str, schema: str) -> None:
    admin = db.open_database(server_url)
    admin.execute_sql(f'DROP SCHEMA "{schema}" CASCADE')
    admin.close()


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _close_bound() -> None:
    if db.database.obj is not None and not db.database.is_closed():
        db.database.close()
