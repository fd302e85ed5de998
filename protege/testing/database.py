"""Throwaway databases for tests: a SQLite file, or a PostgreSQL schema dropped afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs
import peewee

from protege import db

TEST_DATABASE_VARIABLE = "PROTEGE_TEST_DATABASE_URL"


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
        schema = f"protege_test_{uuid.uuid4().hex[:12]}"
        admin = db.open_database(server_url)
        admin.execute_sql(f'CREATE SCHEMA "{schema}"')
        separator = "&" if "?" in server_url else "?"
        url = f"{server_url}{separator}options={quote(f'-csearch_path={schema}')}"
    else:
        admin, schema = None, None
        url = f"sqlite:///{folder / 'protege-test.db'}"
    try:
        database = db.connect(url)
        db.migrate()
        yield TestDatabase(url=url, database=database)
    finally:
        if not db.database.is_closed():
            db.database.close()
        if admin is not None:
            admin.execute_sql(f'DROP SCHEMA "{schema}" CASCADE')
            admin.close()
