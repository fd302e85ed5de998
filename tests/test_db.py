import sqlite3
import threading

import peewee
import pytest

from protege import db
from protege.migrations import MIGRATIONS, applied_versions
from protege.models import (
    Agent,
    AgentAccessRule,
    AgentToolkit,
    AgentToolkitRule,
    AuditEntry,
    Blob,
    Event,
    Message,
    MessageAttachment,
    Operator,
    RequiredApproval,
    Responsibility,
    Run,
    Toolkit,
    UsedToken,
)
from protege.models.limits import Circuit, LimitNotice, UsageDay
from protege.models.listings import ToolListing


def test_sqlite_url_creates_its_folder_and_uses_wal_and_foreign_keys(tmp_path):
    database = db.open_database(f"sqlite:///{tmp_path}/deep/er/protege.db")
    database.connect()
    assert (tmp_path / "deep" / "er").is_dir()
    assert database.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert database.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
    database.close()


def test_unsupported_url_is_a_clear_error():
    with pytest.raises(
        db.DatabaseError, match="unsupported database URL 'mysql://u:\\*\\*\\*@h/d'"
    ):
        db.open_database("mysql://u:secret@h/d")


def test_unreachable_postgres_is_a_clear_error():
    with pytest.raises(db.DatabaseError, match="cannot open the database"):
        db.connect("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_migrate_is_recorded_and_idempotent(protege_db):
    assert applied_versions(db.database) == {m.version for m in MIGRATIONS}
    assert db.migrate() == []
    db.require_current()


def test_an_unmigrated_database_is_refused_with_what_to_run(tmp_path):
    db.connect(f"sqlite:///{tmp_path}/fresh.db")
    with pytest.raises(db.DatabaseError, match="no protege database here yet: run `protege sync`"):
        db.require_current()
    assert db.migrate() == [
        "0001 agents and toolkits",
        "0002 messages and runs",
        "0003 mail: blobs, attachments, search",
        "0004 mail: reply-to lists, refused recipients",
        "0005 search indexes a bounded prefix of long mail",
        "0006 responsibilities on a schedule",
        "0007 run leases, pending deliveries",
        "0008 operators and the audit log",
        "0009 search by field, newest first",
        "0010 approval by email",
        "0011 sender authentication",
        "0012 mail scoped to its participants",
        "0013 used tokens of signed webhooks",
        "0015 archived agents, revocable sessions",
        "0016 approvals required per agent",
        "0017 limits, held runs, fair turns, usage, circuit",
        "0018 tool listings recorded at sync",
        "0019 IMAP mailbox checkpoints and leases",
    ]
    db.require_current()
    # A database one migration behind is told what to run, and how many are waiting.
    from protege.migrations import MIGRATIONS, VERSION_TABLE

    last = MIGRATIONS[-1].version
    db.database.execute_sql(f"DELETE FROM {VERSION_TABLE} WHERE version = {last}")
    with pytest.raises(db.DatabaseError, match=r"\(1 migration\(s\) pending\): run `protege"):
        db.require_current()
    db.database.close()


@pytest.mark.parametrize(
    "model",
    [
        Agent,
        AgentAccessRule,
        Toolkit,
        AgentToolkit,
        AgentToolkitRule,
        Message,
        Responsibility,
        Run,
        Event,
        Blob,
        MessageAttachment,
        Operator,
        AuditEntry,
        UsedToken,
        RequiredApproval,
        UsageDay,
        LimitNotice,
        Circuit,
        ToolListing,
    ],
)
def test_models_match_the_migrated_tables(protege_db, model):
    columns = {c.name for c in db.database.get_columns(model._meta.table_name)}
    columns.discard("search_vector")  # PostgreSQL's full-text column, kept by the database
    assert columns == {f.column_name for f in model._meta.sorted_fields}


def test_foreign_keys_cascade_in_the_database_itself(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    toolkit = Toolkit.create(name="Finance")
    agent.grant(toolkit).add_rule("allow", "*@thescoop.com")
    Agent.delete().where(Agent.id == agent.id).execute()  # bypasses peewee's recursion
    assert AgentToolkit.select().count() == 0
    assert AgentToolkitRule.select().count() == 0


def test_duplicate_grant_is_refused_by_the_database_too(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    toolkit = Toolkit.create(name="Finance")
    AgentToolkit.create(agent=agent, toolkit=toolkit)
    with pytest.raises(peewee.IntegrityError), db.database.atomic():
        AgentToolkit.create(agent=agent, toolkit=toolkit)


def _in_thread(work):
    """What ``work`` returns, run in a thread of its own (as a tool call runs)."""
    found = []
    thread = threading.Thread(target=lambda: found.append(work()))
    thread.start()
    thread.join()
    return found[0]


def _on_postgres() -> bool:
    return isinstance(db.database.obj, peewee.PostgresqlDatabase)


def test_a_transaction_left_open_is_rolled_back_when_its_thread_puts_the_connection_down(
    protege_db,
):
    def leave_open():
        db.database.atomic().__enter__()  # never left: a tool's bug
        Toolkit.create(name="Left open", member_tool_ids=[])
        db.put_down_connection()
        return db.database.in_transaction()

    assert _in_thread(leave_open) is False  # the thread starts clean
    assert not Toolkit.select().where(Toolkit.name == "Left open").exists()
    Toolkit.create(name="Written after", member_tool_ids=[])  # no lock was left behind
    assert Toolkit.select().where(Toolkit.name == "Written after").exists()


def test_a_connection_put_down_is_taken_up_by_the_next_thread_on_postgresql_only(protege_db):
    def first():
        connection = db.database.connection()
        db.database.execute_sql("SELECT 1")
        db.put_down_connection()
        return connection

    def second():
        db.take_up_connection()
        connection = db.database.connection()
        db.put_down_connection()
        return connection

    put_down = _in_thread(first)
    taken_up = _in_thread(second)
    if _on_postgres():  # opening one starts a server process: it is kept
        assert taken_up is put_down
        assert not put_down.closed
    else:  # sqlite3's connections belong to the thread that opened them: closed
        assert taken_up is not put_down
        with pytest.raises(sqlite3.ProgrammingError):
            put_down.execute("SELECT 1")


def test_only_a_few_idle_connections_are_kept(protege_db, monkeypatch):
    monkeypatch.setattr(db, "SHELF_LIMIT", 2)
    db.close_idle_connections()  # earlier tests' threads may have left some
    opened = threading.Barrier(5)
    connections = []

    def open_then_put_down():
        connections.append(db.database.connection())
        opened.wait(10)  # all five open at once, then all put down
        db.put_down_connection()

    threads = [threading.Thread(target=open_then_put_down) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    still_open = sum(1 for c in connections if not _closed(c))
    assert still_open == (2 if _on_postgres() else 0)
    db.close_idle_connections()
    assert not any(not _closed(c) for c in connections)


def test_a_connection_idle_too_long_is_closed_not_taken_up(protege_db, monkeypatch):
    put_down = _in_thread(lambda: (db.database.connection(), db.put_down_connection())[0])
    monkeypatch.setattr(db, "SHELF_SECONDS", 0.0)  # every idle one is too old now
    taken_up = _in_thread(
        lambda: (db.take_up_connection(), db.database.connection(), db.database.close())[1]
    )
    assert taken_up is not put_down
    assert _closed(put_down)


def _closed(connection) -> bool:
    if isinstance(connection, sqlite3.Connection):
        try:
            connection.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            return True
        return False
    return bool(connection.closed)


def test_sqlite_transactions_that_read_then_write_wait_for_each_other(tmp_path):
    """Eight threads each add one to a counter 25 times, reading it and writing it back in
    one transaction (as an approval request, a lease or a delivery does): none is refused
    with "database is locked", and no addition is lost."""
    import threading

    from protege.db import open_database

    database = open_database(f"sqlite:///{tmp_path / 'counter.db'}")
    database.execute_sql("CREATE TABLE counter (n INTEGER NOT NULL)")
    database.execute_sql("INSERT INTO counter (n) VALUES (0)")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def add() -> None:
        start.wait()
        try:
            for _ in range(25):
                with database.atomic():
                    (n,) = database.execute_sql("SELECT n FROM counter").fetchone()
                    database.execute_sql("UPDATE counter SET n = ?", (n + 1,))
        except BaseException as error:
            errors.append(error)
        finally:
            database.close()

    workers = [threading.Thread(target=add) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert database.execute_sql("SELECT n FROM counter").fetchone() == (200,)


def test_a_new_sqlite_database_and_its_folder_are_its_owners_only(tmp_path):
    import stat

    from protege.db import open_database

    folder = tmp_path / "data"
    database = open_database(f"sqlite:///{folder / 'protege.db'}")
    database.execute_sql("CREATE TABLE t (n INTEGER)")
    database.close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "protege.db").stat().st_mode) == 0o600


def test_a_postgresql_server_that_never_answers_cannot_hang_a_command():
    # A server that accepts and says nothing is given up on after connect_timeout.
    bound = db.open_database("postgresql://postgres@127.0.0.1:5432/test")
    assert bound.connect_params["connect_timeout"] == db.CONNECT_SECONDS
    chosen = db.open_database("postgresql://postgres@127.0.0.1:5432/test?connect_timeout=3")
    assert chosen.connect_params["connect_timeout"] == "3"
