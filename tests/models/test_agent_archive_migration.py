"""Migration 15 keeps the agents and operators earlier migrations left: none archived, and
every operator's sessions still standing."""

import datetime

from protege import db
from protege.migrations import MIGRATIONS, VERSION_TABLE, _ensure_version_table
from protege.models import Agent, Operator


def test_agents_and_operators_stored_before_migration_15_survive_it(tmp_path):
    database = db.connect(f"sqlite:///{tmp_path}/old.db")
    _ensure_version_table(database)
    for migration in [m for m in MIGRATIONS if m.version < 15]:
        migration.apply(database)
        database.execute_sql(
            f"INSERT INTO {VERSION_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, datetime.datetime.now(datetime.UTC)),
        )
    database.execute_sql(
        "INSERT INTO agent (name, address, instructions, created_at, updated_at) "
        "VALUES ('Scout', 'scout@thescoop.example', 'Look.', CURRENT_TIMESTAMP, "
        "CURRENT_TIMESTAMP)"
    )
    database.execute_sql(
        "INSERT INTO operator (name, password_hash, created_at) "
        "VALUES ('mara', 'hash', CURRENT_TIMESTAMP)"
    )
    assert "0015 archived agents, revocable sessions" in db.migrate()
    scout = Agent.named("Scout")
    assert (scout.archived, scout.instructions) == (False, "Look.")
    assert [a.name for a in Agent.active()] == ["Scout"]
    assert Operator.get(Operator.name == "mara").session_generation == 0
    scout.archive()
    assert list(Agent.active()) == []
    assert database.execute_sql("PRAGMA integrity_check").fetchone() == ("ok",)
