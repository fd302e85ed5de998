"""What a tool call leaves on a PostgreSQL connection is gone before the connection is
handed to the next tool call (protege's own writes on that thread included: ``deliver``
renews the lease and inserts the outgoing mail on the tool thread's connection)."""

import asyncio
import threading

import peewee
import psycopg2
import pytest

from protege import db
from protege.models import Toolkit
from tests.looping import until

pytestmark = pytest.mark.skipif(
    "not __import__('os').environ.get('PROTEGE_TEST_DATABASE_URL')",
    reason="PostgreSQL only (SQLite connections are closed); make test-postgres runs it",
)


def _in_thread(work):
    found = []

    def body():
        try:
            found.append(work())
        finally:
            db.put_down_connection()  # as _DaemonThreads._serve does after every call

    def serve():
        db.take_up_connection()
        body()

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join()
    return found[0] if found else None


@pytest.fixture
def shelf(protege_db):
    db.close_idle_connections()
    yield
    db.close_idle_connections()


def _pid():
    return db.database.execute_sql("SELECT pg_backend_pid()").fetchone()[0]


def test_same_connection_is_handed_on(shelf):
    assert _in_thread(_pid) == _in_thread(_pid)


def test_a_temp_table_a_tool_left_is_gone_for_the_next_call(shelf):
    """A temp table named like one of protege's shadows it (pg_temp comes first in the
    search_path) for every later call that gets the connection."""

    def tool_with_a_scratch_table():
        db.database.execute_sql("CREATE TEMP TABLE toolkit (LIKE toolkit INCLUDING ALL)")

    def next_call():
        Toolkit.create(name="written by the next call", member_tool_ids=[])

    _in_thread(tool_with_a_scratch_table)
    _in_thread(next_call)
    # The main thread (its own connection) does not see the row: it went into the temp table.
    assert Toolkit.select().where(Toolkit.name == "written by the next call").exists(), (
        "the next call's write went into the previous call's temp table"
    )


def test_a_session_advisory_lock_a_tool_left_is_released(shelf):
    """Before: closing the connection released it. Now the shelved connection keeps it."""

    def tool_that_fails_before_unlocking():
        db.database.execute_sql("SELECT pg_advisory_lock(424242)")

    _in_thread(tool_that_fails_before_unlocking)
    (got,) = db.database.execute_sql("SELECT pg_try_advisory_lock(424242)").fetchone()
    if got:
        db.database.execute_sql("SELECT pg_advisory_unlock(424242)")
    assert got, "a lock a finished tool call took is still held by the shelved connection"


def test_a_session_setting_a_tool_left_is_reset(shelf):
    def tool():
        db.database.execute_sql("SET default_transaction_read_only = on")

    def next_call():
        try:
            Toolkit.create(name="next", member_tool_ids=[])
        except peewee.DatabaseError as error:
            return str(error)
        return None

    _in_thread(tool)
    assert _in_thread(next_call) is None


def test_a_connection_a_tool_took_out_of_autocommit_is_not_handed_on(shelf):
    """psycopg2-level session state: the next call's writes open an implicit transaction
    that put_down_connection rolls back: silently lost."""

    def tool():
        db.database.connection().autocommit = False

    def next_call():
        Toolkit.create(name="next-autocommit", member_tool_ids=[])

    _in_thread(tool)
    _in_thread(next_call)
    assert Toolkit.select().where(Toolkit.name == "next-autocommit").exists()


def test_a_connection_the_server_ended_is_not_handed_on(shelf):
    """A PostgreSQL restart, failover, idle_session_timeout or pg_terminate_backend while
    the connection sits on the shelf: the next tool call gets a dead connection."""
    pid = _in_thread(_pid)
    db.database.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
    import time

    time.sleep(0.2)

    def next_call():
        try:
            return _pid()
        except (peewee.OperationalError, peewee.InterfaceError, psycopg2.Error) as error:
            return f"failed: {error}"

    got = _in_thread(next_call)
    assert not str(got).startswith("failed"), got


def test_connections_idle_too_long_are_closed_when_another_is_put_down(shelf, monkeypatch):
    """SHELF_SECONDS is enforced lazily: with no later tool call, an idle connection (and
    whatever it holds) stays open for ever."""
    pid = _in_thread(_pid)
    monkeypatch.setattr(db, "SHELF_SECONDS", 0.0)
    # no tool call follows; a put_down by another thread does not evict either
    other = threading.Thread(target=lambda: (db.database.connection(), db.put_down_connection()))
    other.start()
    other.join()

    def gone() -> bool:
        (alive,) = db.database.execute_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        return alive == 0

    # The server's backend leaves pg_stat_activity a moment after the client closed its
    # socket: looked at until it has, or a connection left open fails the test.
    asyncio.run(until(gone, seconds=10))


def test_a_connection_is_never_held_by_two_threads_at_once(shelf):
    """Many tool threads taking up and putting down at once: each shelved connection goes
    to one thread at a time."""
    holders: dict[int, int] = {}
    lock = threading.Lock()
    clashes = []

    def worker():
        for _ in range(30):
            db.take_up_connection()
            connection = db.database.connection()
            with lock:
                if id(connection) in holders:
                    clashes.append(id(connection))
                holders[id(connection)] = threading.get_ident()
            db.database.execute_sql("SELECT 1")
            with lock:
                holders.pop(id(connection), None)
            db.put_down_connection()

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not clashes


def test_connections_of_a_database_bound_before_are_not_handed_on(shelf, protege_db):
    old = db.database.obj
    put_down = _in_thread(lambda: db.database.connection())
    replacement = peewee.PostgresqlDatabase(
        old.database, **{k: v for k, v in old.connect_params.items()}
    )
    db.database.initialize(replacement)
    try:
        taken = _in_thread(lambda: db.database.connection())
        assert taken is not put_down  # each database keeps its own idle connections
        assert not put_down.closed
        db.close_idle_connections(old)
        assert put_down.closed
    finally:
        db.database.initialize(old)
        replacement.close()


def test_a_listen_a_tool_left_collects_nothing_more(shelf):
    """psycopg2 appends every notification to connection.notifies (a plain list): a LISTEN
    a tool left makes every later holder of the connection collect them, unbounded."""

    def tool():
        db.database.execute_sql("LISTEN review_channel")

    _in_thread(tool)
    for _ in range(200):
        db.database.execute_sql("NOTIFY review_channel, 'x'")

    def next_call():
        db.database.execute_sql("SELECT 1")
        return len(db.database.connection().notifies)

    assert _in_thread(next_call) == 0
