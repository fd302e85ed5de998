"""Migration 12 keeps what was stored: each message's participants are recorded, grants stay
scoped to the sender, and files get tokens while keeping the numbers earlier runs hold."""

import pytest

from protege import db
from protege.mail import visible_blob
from protege.migrations import VERSION_TABLE
from protege.models import Agent, AgentToolkit, Blob, Message, MessageParticipant, Toolkit
from protege.testing import make_context


@pytest.mark.protege_fresh_db  # takes the schema back to migration 11
def test_stored_mail_and_files_are_carried_over(protege_db, protege_app):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["search_emails"]))
    database = db.database
    for statement in (
        "DROP TABLE message_participant",
        "ALTER TABLE agent_toolkit DROP COLUMN whole_archive",
        "DROP INDEX blob_token",
        "ALTER TABLE blob DROP COLUMN token",
        "ALTER TABLE blob DROP COLUMN numbered",
        f"DELETE FROM {VERSION_TABLE} WHERE version = 12",
    ):
        database.execute_sql(statement)
    p = database.param
    database.execute_sql(
        "INSERT INTO message (agent_id, direction, sender, to_addresses, cc_addresses, "
        f"message_id, thread_key, created_at) VALUES ({p}, 'inbound', {p}, {p}, {p}, "
        "'<a@acme.com>', '<a@acme.com>', CURRENT_TIMESTAMP)",
        (
            agent.id,
            "Jane <Jane+Orders@ACME.com>",
            '["sundae@thescoop.example", "not an address"]',
            '["Mara <mara@thescoop.com>"]',
        ),
    )
    database.execute_sql(  # more than one batch of the migration's
        "INSERT INTO message (agent_id, direction, sender, to_addresses, message_id, "
        "thread_key, created_at) SELECT agent_id, direction, 'sam@example.org', "
        "'[\"sundae@thescoop.example\"]', message_id, thread_key, created_at FROM message"
    )
    for _ in range(11):
        database.execute_sql(
            "INSERT INTO message (agent_id, direction, sender, to_addresses, message_id, "
            "thread_key, created_at) SELECT agent_id, direction, sender, to_addresses, "
            f"message_id, thread_key, created_at FROM message WHERE sender = {p}",
            ("sam@example.org",),
        )
    for name in ("soup.jpg", "receipt.pdf"):
        database.execute_sql(
            "INSERT INTO blob (sha256, size, content_type, filename, created_at) "
            f"VALUES ('00', 2, 'text/plain', {p}, CURRENT_TIMESTAMP)",
            (name,),
        )
    database.execute_sql(
        "INSERT INTO message_attachment (message_id, blob_id, position) "
        "SELECT message.id, blob.id, 0 FROM message, blob "
        f"WHERE blob.filename = {p} AND message.sender LIKE {p}",
        ("soup.jpg", "Jane%"),
    )

    assert db.migrate() == ["0012 mail scoped to its participants"]

    janes = MessageParticipant.select().join(Message).where(Message.sender.startswith("Jane"))
    participants = sorted(row.address for row in janes)
    assert participants == ["jane@acme.com", "mara@thescoop.com", "sundae@thescoop.example"]
    assert Message.select().where(Message.sender == "sam@example.org").count() == 2048
    assert MessageParticipant.select().count() == 3 + 2 * 2048
    assert [grant.whole_archive for grant in AgentToolkit.select()] == [False]
    soup, receipt = Blob.select().order_by(Blob.id)
    assert [soup.numbered, receipt.numbered] == [True, True]
    assert len({soup.token, receipt.token}) == 2
    assert all(len(token) >= 24 for token in (soup.token, receipt.token))
    # The number an earlier run wrote down still names the file, for the mail's own sender.
    jane = make_context(agent, sender="jane@acme.com", config=protege_app.config)
    eve = make_context(agent, sender="eve@evil.example", config=protege_app.config)
    assert visible_blob(agent, soup.id, jane.mail_scope("read_attachment")) == soup
    assert visible_blob(agent, soup.token, jane.mail_scope("read_attachment")) == soup
    assert visible_blob(agent, soup.id, eve.mail_scope("read_attachment")) is None
