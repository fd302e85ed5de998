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
    Responsibility,
    Run,
    Toolkit,
)


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
