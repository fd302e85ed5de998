"""Migration 9 indexes the mail stored before it: sender, recipients and subject each
searchable on their own, and the newest-first index in place."""

import peewee
import pytest

from protege import db
from protege.mail import search
from protege.migrations import VERSION_TABLE
from protege.models import Agent

# The search index as migrations 3 and 5 left it, enough for migration 9 to replace.
_BEFORE = {
    "sqlite": [
        "DROP TRIGGER message_search_insert",
        "DROP TRIGGER message_search_delete",
        "DROP TABLE message_search",
        "DROP INDEX message_agent_created",
        "CREATE VIRTUAL TABLE message_search USING fts5(participants, subject, body)",
        "CREATE TRIGGER message_search_insert AFTER INSERT ON message BEGIN SELECT 1; END",
        "CREATE TRIGGER message_search_delete AFTER DELETE ON message BEGIN SELECT 1; END",
    ],
    "postgresql": [
        "DROP INDEX message_agent_created",
        "DROP INDEX message_search",
        "ALTER TABLE message DROP COLUMN search_vector",
        "ALTER TABLE message ADD COLUMN search_vector tsvector",
        "CREATE INDEX message_search ON message USING GIN (search_vector)",
    ],
}


@pytest.mark.protege_fresh_db  # takes the schema back to migration 6
def test_mail_stored_before_is_found_by_field(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    database = db.database
    kind = "postgresql" if isinstance(database.obj, peewee.PostgresqlDatabase) else "sqlite"
    for statement in [*_BEFORE[kind], f"DELETE FROM {VERSION_TABLE} WHERE version = 9"]:
        database.execute_sql(statement)
    p = database.param
    database.execute_sql(
        "INSERT INTO message (agent_id, direction, sender, to_addresses, cc_addresses, subject, "
        "body_text, message_id, thread_key, created_at) VALUES "
        f"({p}, 'inbound', 'jane@acme.com', '[\"sundae@thescoop.example\"]', "
        f"'[\"mara@thescoop.com\"]', 'Melted sorbet', 'mango soup', '<a@acme.com>', "
        f"'<a@acme.com>', CURRENT_TIMESTAMP)",
        (agent.id,),
    )
    other = Agent.create(name="Scout", address="scout@thescoop.example")
    database.execute_sql(
        "INSERT INTO message (agent_id, direction, sender, subject, body_text, message_id, "
        f"thread_key, created_at) VALUES ({p}, 'inbound', 'jane@acme.com', 'Secret', "
        "'mango plans', '<b@acme.com>', '<b@acme.com>', CURRENT_TIMESTAMP)",
        (other.id,),
    )
    assert db.migrate() == ["0009 search by field, newest first"]
    assert [m.subject for m in search(other, "mango")] == ["Secret"]
    assert [m.subject for m in search(agent, "mango")] == ["Melted sorbet"]
    assert [m.subject for m in search(agent, sender="jane@acme.com")] == ["Melted sorbet"]
    assert [m.subject for m in search(agent, recipient="mara")] == ["Melted sorbet"]
    assert [m.subject for m in search(agent, subject="sorbet")] == ["Melted sorbet"]
    assert search(agent, subject="mango") == []
    assert search(agent, sender="mara") == []
