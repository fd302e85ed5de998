"""The database: SQLite by default, PostgreSQL by URL, behind one peewee proxy."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import peewee

from protege.config import load_config
from protege.dblock import exclusive_on
from protege.errors import ProtegeError
from protege.migrations import applied_versions, apply_pending, pending

database = peewee.DatabaseProxy()

# WAL with synchronous=NORMAL: never corrupt, and a commit costs no fsync (the last
# transactions may be lost on power failure, not on a crash of protege itself).
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
}


class DatabaseError(ProtegeError):
    """The database URL is unusable, the server unreachable, or the schema out of date."""


def open_database(url: str) -> peewee.Database:
    """A peewee database for ``url`` (``sqlite:///path`` or ``postgresql://...``), not yet bound."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        raw = unquote(parts.path)
        # sqlite:///relative.db has path "/relative.db"; sqlite:////abs.db has "//abs.db".
        path = raw[1:] if raw.startswith("/") else raw
        if path in ("", ":memory:"):
            return peewee.SqliteDatabase(":memory:", pragmas=SQLITE_PRAGMAS)
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return peewee.SqliteDatabase(str(Path(path).expanduser()), pragmas=SQLITE_PRAGMAS)
    if scheme in ("postgres", "postgresql"):
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            raise DatabaseError(
                "PostgreSQL needs the psycopg2 driver: pip install 'protege[postgres]'"
            ) from None
        settings: dict[str, Any] = {
            "user": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "host": parts.hostname,
            "port": parts.port,
        }
        settings.update(parse_qsl(parts.query))  # e.g. ?sslmode=require&options=...
        return peewee.PostgresqlDatabase(unquote(parts.path.lstrip("/")) or "postgres", **settings)
    raise DatabaseError(
        f"unsupported database URL {_redacted(url)!r}: use sqlite:///PATH or postgresql://..."
    )


def connect(url: str | None = None) -> peewee.Database:
    """Bind protege's records to the database at ``url`` (default: the configured one)."""
    if url is None:
        url = load_config().database_url
    db = open_database(url)
    try:
        db.connect(reuse_if_open=True)
    except peewee.OperationalError as error:
        message = " ".join(str(error).split())
        raise DatabaseError(f"cannot open the database {_redacted(url)}: {message}") from None
    if database.obj is not None and not database.obj.is_closed():
        database.obj.close()
    database.initialize(db)
    return db


def exclusive() -> contextlib.AbstractContextManager[None]:
    """A transaction that no other protege process runs at the same time.

    On PostgreSQL it holds an advisory lock, so deploys on several machines may run
    ``protege sync`` together; on SQLite it takes the write lock before reading.
    """
    return exclusive_on(database)


def migrate() -> list[str]:
    """Apply every pending schema migration; returns the names of those applied."""
    return apply_pending(database)


def require_current() -> None:
    """Raise ``DatabaseError`` unless every migration has been applied."""
    if not applied_versions(database):
        raise _no_database(database_url())
    waiting = pending(database)
    if waiting:
        raise DatabaseError(
            f"the database schema is out of date ({len(waiting)} migration(s) pending): "
            "run `protege migrate` or `protege sync`"
        )


def connect_existing(url: str | None = None) -> peewee.Database:
    """``connect``, but refusing (``DatabaseError``, saying to run ``protege sync``) where no
    database is yet, rather than creating an empty SQLite file."""
    if url is None:
        url = load_config().database_url
    if not exists(url):
        raise _no_database(url)
    return connect(url)


def _no_database(url: str) -> DatabaseError:
    return DatabaseError(
        f"there is no protege database here yet: run `protege sync` to create it "
        f"(at {_redacted(url)})"
    )


def database_url() -> str:
    """The URL of the database protege's records are bound to, as a message may show it."""
    bound = database.obj
    if isinstance(bound, peewee.SqliteDatabase):
        return f"sqlite:///{bound.database}"
    if isinstance(bound, peewee.PostgresqlDatabase):
        params = bound.connect_params
        host = params.get("host") or "localhost"
        return f"postgresql://{host}/{bound.database}"
    return "an unknown database"


def exists(url: str) -> bool:
    """Whether the database at ``url`` may already exist: False only for a SQLite file that
    is not there (connecting would create it)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        return True
    raw = unquote(parts.path)
    path = raw[1:] if raw.startswith("/") else raw
    return path in ("", ":memory:") or Path(path).expanduser().exists()


def redacted(url: str) -> str:
    """``url`` with any password in it starred out, as messages show it."""
    return _redacted(url)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url
