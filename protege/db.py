"""The database: SQLite by default, PostgreSQL by URL, behind one peewee proxy that each
application's work routes to its own database (``protege.dbroute``)."""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
import weakref
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import peewee

from protege.config import load_config
from protege.dblock import exclusive_on
from protege.dbroute import RoutedDatabase
from protege.errors import ProtegeError
from protege.migrations import applied_versions, apply_pending, pending

database = RoutedDatabase()

# WAL with synchronous=NORMAL: never corrupt, and a commit costs no fsync (the last
# transactions may be lost on power failure, not on a crash of protege itself).
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
}
# Transactions take the write lock when they begin. A deferred one that reads and then
# writes cannot wait for another writer (its snapshot would be stale): SQLite answers
# "database is locked" at once, which failed runs that asked for approval together.
SQLITE_LOCK = "IMMEDIATE"


class _Tracked:
    """Once ``track()`` is called (an installation's own database), keeps each connection
    it opens with the thread that opened it, so that ``close_all`` closes them all
    (peewee's ``close`` closes the calling thread's alone) and an installation closing
    leaves none behind in its pools' threads. The connections of threads that ended are
    closed as new ones are opened: kept here, they would outlive their thread."""

    _tracked: dict[int, tuple[weakref.ref[threading.Thread], Any]] | None = None

    def track(self) -> None:
        """Keep the connections opened from now on, for ``close_all``."""
        with _tracking_lock:
            if self._tracked is None:
                self._tracked = {}

    def _connect(self) -> Any:
        connection = super()._connect()  # type: ignore[misc]
        ended = []
        with _tracking_lock:
            tracked = self._tracked
            if tracked is not None:
                for key, (thread, held) in list(tracked.items()):
                    alive = thread()
                    if alive is None or not alive.is_alive():
                        ended.append(held)
                        del tracked[key]
                tracked[id(connection)] = (weakref.ref(threading.current_thread()), connection)
        _close(ended)
        return connection

    def _close(self, connection: Any) -> None:
        self.forget(connection)
        super()._close(connection)  # type: ignore[misc]

    def forget(self, connection: Any) -> None:
        """``connection`` was closed by hand: no longer one to close."""
        with _tracking_lock:
            if self._tracked is not None:
                self._tracked.pop(id(connection), None)

    def close_all(self) -> None:
        """Close every connection this database opened since ``track()``, in every thread."""
        with _tracking_lock:
            connections = [held for _, held in (self._tracked or {}).values()]
            if self._tracked is not None:
                self._tracked.clear()
        with contextlib.suppress(Exception):
            cast(peewee.Database, self).close()  # this thread's, as peewee knows it
        _close(connections)


_tracking_lock = threading.Lock()


def forget(db: peewee.Database, connection: Any) -> None:
    """``connection`` of ``db`` was closed by hand: no longer one to close."""
    if isinstance(db, _Tracked):
        db.forget(connection)


class _SqliteDatabase(_Tracked, peewee.SqliteDatabase):
    """peewee's SQLite database, its transactions begun with ``SQLITE_LOCK``. Its
    connections may be closed from another thread (each is still used by one at a time)."""

    def begin(self, lock_type: str | None = None) -> Any:
        return super().begin(lock_type or SQLITE_LOCK)


class DatabaseError(ProtegeError):
    """The database URL is unusable, the server unreachable, or the schema out of date."""


class _PostgresqlDatabase(_Tracked, peewee.PostgresqlDatabase):
    """peewee's PostgreSQL database, replacing a connection the server ended.

    A restart, a failover, ``pg_terminate_backend`` or ``idle_session_timeout`` ends a
    connection under a thread that holds it; psycopg2 marks it closed at the first query
    that fails. The next piece of work of that thread (with no transaction open on it)
    gets a new connection instead of failing for ever.
    """

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        if not self.is_closed() and self.transaction_depth() == 0:
            state: Any = cast(Any, self)._state  # peewee's per-thread connection state
            if getattr(state.conn, "closed", 0):
                state.reset()  # nothing to close: the server did
        return super().cursor(*args, **kwargs)


def connection_broken() -> bool:
    """Whether this thread's connection is one the server ended (a restart, a failover,
    ``pg_terminate_backend``): work that failed on it did nothing, and may be tried again
    on a new one."""
    obj = database.obj
    if obj is None or obj.is_closed():
        return False
    state: Any = cast(Any, obj)._state
    return bool(getattr(state.conn, "closed", 0))


def _private_file(path: Path) -> None:
    """Make the database file, readable by its owner only (it holds everyone's mail and
    the approvals' tokens), in a folder made for its owner only when it is new."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # SQLite makes its journal files with the database file's permissions.
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


CONNECT_SECONDS = 15  # PostgreSQL's connect_timeout, unless the URL's query sets one


def open_database(url: str) -> peewee.Database:
    """A peewee database for ``url`` (``sqlite:///path`` or ``postgresql://...``), not yet bound."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        raw = unquote(parts.path)
        # sqlite:///relative.db has path "/relative.db"; sqlite:////abs.db has "//abs.db".
        path = raw[1:] if raw.startswith("/") else raw
        if path in ("", ":memory:"):
            return _SqliteDatabase(":memory:", pragmas=SQLITE_PRAGMAS, check_same_thread=False)
        _private_file(Path(path).expanduser())
        return _SqliteDatabase(
            str(Path(path).expanduser()), pragmas=SQLITE_PRAGMAS, check_same_thread=False
        )
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
            # A server that accepts and never answers must not hang a command for good.
            "connect_timeout": CONNECT_SECONDS,
        }
        settings.update(parse_qsl(parts.query))  # e.g. ?sslmode=require&options=...
        return _PostgresqlDatabase(unquote(parts.path.lstrip("/")) or "postgres", **settings)
    raise DatabaseError(
        f"unsupported database URL {_redacted(url)!r}: use sqlite:///PATH or postgresql://..."
    )


def connect(url: str | None = None) -> peewee.Database:
    """Bind protege's records, for the whole process, to the database at ``url`` (default:
    the configured one), closing the one bound before: for scripts, the command line and
    tests. An application (``open_installation``) opens a database of its own instead."""
    if url is None:
        url = load_config().database_url
    db = open_connected(url)
    before = database.process_database
    if before is not None:
        # Only this thread's and the idle ones: an installation opened on it (connect=False)
        # may still be at work on it in other threads.
        close_idle_connections(before)
        if not before.is_closed():
            before.close()
    database.initialize(db)
    return db


def open_connected(url: str, *, tracked: bool = False) -> peewee.Database:
    """A database for ``url``, its first connection opened (so a bad URL or an unreachable
    server is told at once), bound to nothing; ``tracked``: keeping the connections every
    thread opens on it, for ``close_everywhere``."""
    db = open_database(url)
    if tracked:
        track_connections(db)
    try:
        db.connect(reuse_if_open=True)
    except peewee.OperationalError as error:
        message = " ".join(str(error).split())
        raise DatabaseError(f"cannot open the database {_redacted(url)}: {message}") from None
    return db


# Connections a thread finished with, kept for the next thread that needs one: opening a
# PostgreSQL connection starts a server process, which costs more than most tool calls.
SHELF_LIMIT = 8  # idle connections kept per process
SHELF_SECONDS = 60.0  # a connection idle longer is closed, not handed on


class _Shelf:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[peewee.Database, Any, float]] = []

    def take(self, db: peewee.Database) -> Any:
        with self._lock:
            stale = self._evict(db)
            found = self._idle.pop()[1] if self._idle else None
        if found is not None and not _alive(found):  # the server ended it while it sat
            stale.append(found)
            found = None
        _close(stale)
        return found

    def empty(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        _close([connection for _, connection, _ in idle])

    def put(self, db: peewee.Database, connection: Any) -> bool:
        with self._lock:
            stale = self._evict(db)
            kept = len(self._idle) < SHELF_LIMIT
            if kept:
                self._idle.append((db, connection, time.monotonic()))
        _close(stale)
        return kept

    def _evict(self, db: peewee.Database) -> list[Any]:
        """Take out (to be closed) the connections idle too long; with the lock held."""
        now = time.monotonic()
        fresh = [e for e in self._idle if e[0] is db and now - e[2] < SHELF_SECONDS]
        stale = [e[1] for e in self._idle if e[0] is not db or now - e[2] >= SHELF_SECONDS]
        self._idle = fresh
        return stale


def _close(connections: list[Any]) -> None:
    for connection in connections:
        with contextlib.suppress(Exception):
            connection.close()


# One shelf for each database (two applications in one process have one each).
_shelves: weakref.WeakKeyDictionary[peewee.Database, _Shelf] = weakref.WeakKeyDictionary()
_shelves_lock = threading.Lock()


def _shelf(db: peewee.Database) -> _Shelf:
    with _shelves_lock:
        shelf = _shelves.get(db)
        if shelf is None:
            shelf = _shelves[db] = _Shelf()
        return shelf


def take_up_connection() -> None:
    """Give this thread a connection another thread finished with (``put_down_connection``),
    if one is idle, rather than having it open its own at its first query."""
    db = database.obj
    state = getattr(db, "_state", None)  # peewee's per-thread connection state
    if db is None or state is None or getattr(state, "conn", None) is not None:
        return
    connection = _shelf(db).take(db)
    if connection is not None:
        state.set_connection(connection)


def put_down_connection() -> None:
    """End this thread's use of its connection, whatever the code that ran on it left: any
    transaction still open is rolled back, so it holds no lock. On PostgreSQL the session
    is reset and the connection kept for the next thread (a few per process); otherwise,
    or when it cannot be made clean, it is closed. The thread starts clean."""
    db = database.obj
    state = getattr(db, "_state", None)
    connection = getattr(state, "conn", None)
    if db is None or state is None or connection is None:
        return
    state.reset()
    if (
        isinstance(db, peewee.PostgresqlDatabase)
        and _clean(connection)
        and _shelf(db).put(db, connection)
    ):
        return
    with contextlib.suppress(Exception):
        connection.rollback()  # SQLite: a transaction left open held the write lock
    with contextlib.suppress(Exception):
        connection.close()
    forget(db, connection)


def track_connections(db: peewee.Database) -> None:
    """Have ``db`` keep the connections it opens, so that ``close_everywhere`` closes them."""
    if isinstance(db, _Tracked):
        db.track()


def close_everywhere(db: peewee.Database) -> None:
    """Close every connection ``db`` opened, in every thread (what closing an application
    must do: peewee closes only the calling thread's)."""
    close_all = getattr(db, "close_all", None)
    if close_all is not None:
        close_all()
    else:
        db.close()


def close_idle_connections(db: peewee.Database | None = None) -> None:
    """Close the connections put down and not taken up again (a process or an application
    shutting down): of ``db``, or of the database in use here."""
    db = database.obj if db is None else db
    if db is not None:
        _shelf(db).empty()


def _clean(connection: Any) -> bool:
    """Make a psycopg2 ``connection`` as a new one would be; whether that worked. A
    transaction left open is rolled back (peewee runs psycopg2 in autocommit mode, where
    ``rollback()`` does nothing, so it is sent as a statement), then the session reset."""
    try:
        if connection.closed or not connection.autocommit:  # psycopg2 state peewee relies on
            return False
        if connection.get_transaction_status() != 0:  # not TRANSACTION_STATUS_IDLE
            with connection.cursor() as cursor:
                cursor.execute("ROLLBACK")
        if connection.get_transaction_status() != 0:
            return False
        # What the call left in the session: settings (SET, SET ROLE), temp tables,
        # session advisory locks, LISTEN, prepared statements, cursors WITH HOLD.
        with connection.cursor() as cursor:
            cursor.execute("DISCARD ALL")
        del connection.notifies[:]
        return connection.get_transaction_status() == 0
    except Exception:
        return False


def _alive(connection: Any) -> bool:
    """Whether an idle psycopg2 ``connection`` still looks open: the server sends nothing
    to an idle session (after DISCARD ALL, no notifications), so anything to read is the
    end of the session (a restart, pg_terminate_backend, idle_session_timeout)."""
    try:
        if connection.closed:
            return False
        with selectors.DefaultSelector() as selector:  # no FD_SETSIZE limit, unlike select()
            selector.register(connection.fileno(), selectors.EVENT_READ)
            return not selector.select(0)
    except Exception:  # a connection that cannot even be looked at is not handed on
        return False


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
