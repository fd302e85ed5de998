"""Migration 4 keeps what migration 3 stored: a message's single Reply-To becomes its list."""

import pytest

from protege import db
from protege.migrations import VERSION_TABLE
from protege.models import Agent, Message


@pytest.mark.protege_fresh_db  # takes the schema back to migration 3
def test_a_stored_reply_to_becomes_the_first_of_the_list(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    database = db.database
    # Back to the message table as migration 3 left it.
    for statement in (
        "ALTER TABLE message DROP COLUMN reply_to_addresses",
        "ALTER TABLE message DROP COLUMN refused_recipients",
        "ALTER TABLE message ADD COLUMN reply_to VARCHAR(998)",
        f"DELETE FROM {VERSION_TABLE} WHERE version = 4",
    ):
        database.execute_sql(statement)
    p = database.param
    for message_id, reply_to in (
        ("<a@acme.com>", 'Orders "Desk" <orders@acme.com>'),
        ("<b@acme.com>", None),
    ):
        database.execute_sql(
            "INSERT INTO message (agent_id, direction, sender, message_id, thread_key, "
            f"created_at, reply_to) VALUES ({p}, 'inbound', 'jane@acme.com', {p}, {p}, "
            f"CURRENT_TIMESTAMP, {p})",
            (agent.id, message_id, message_id, reply_to),
        )
    assert db.migrate() == ["0004 mail: reply-to lists, refused recipients"]
    kept = {m.message_id: m.reply_to_addresses for m in Message.select()}
    assert kept == {"<a@acme.com>": ['Orders "Desk" <orders@acme.com>'], "<b@acme.com>": []}
    assert [m.refused_recipients for m in Message.select()] == [[], []]
