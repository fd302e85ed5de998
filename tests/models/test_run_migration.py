"""Migration 7 keeps the runs migration 6 left and lets them be cancelled."""

import datetime

from protege import db
from protege.migrations import MIGRATIONS, VERSION_TABLE, _ensure_version_table
from protege.models import Run


def test_runs_stored_before_migration_7_survive_it_and_may_be_cancelled(tmp_path):
    database = db.connect(f"sqlite:///{tmp_path}/old.db")
    _ensure_version_table(database)
    for migration in MIGRATIONS[:6]:  # the schema as a protege of migration 6 left it
        migration.apply(database)
        database.execute_sql(
            f"INSERT INTO {VERSION_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, datetime.datetime.now(datetime.UTC)),
        )
    database.execute_sql(
        "INSERT INTO agent (name, address, instructions, created_at, updated_at) "
        "VALUES ('Scout', 'scout@thescoop.example', '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
    )
    database.execute_sql(
        "INSERT INTO responsibility (agent_id, name, prompt, created_at) "
        "VALUES (1, 'report', 'Report.', CURRENT_TIMESTAMP)"
    )
    for status in ("queued", "done"):
        database.execute_sql(
            "INSERT INTO run (agent_id, kind, responsibility_id, status, correlation_id, "
            f"created_at) VALUES (1, 'scheduled', 1, '{status}', '{status}', CURRENT_TIMESTAMP)"
        )
    assert db.migrate() == [
        "0007 run leases, pending deliveries",
        "0008 operators and the audit log",
        "0009 search by field, newest first",
        "0010 approval by email",
        "0011 sender authentication",
        "0015 archived agents, revocable sessions",
    ]
    assert [(r.status, r.lease_owner) for r in Run.select().order_by(Run.id)] == [
        ("queued", None),
        ("done", None),
    ]
    assert Run.request_cancel(1, datetime.datetime(2026, 11, 30)) == "queued"
    assert Run.get_by_id(1).status == "cancelled"
    assert database.execute_sql("PRAGMA integrity_check").fetchone() == ("ok",)
