"""What every record shares: the hand-built INSERT, SELECT and UPDATE each run makes."""

import peewee
import pytest

from protege.models import Agent, Message, Run
from protege.models.blobs import Blob, MessageAttachment, attachments_of


def _fields(number: int) -> dict:
    mid = f"<m{number}@acme.example>"
    return dict(direction="inbound", sender="j@acme.example", message_id=mid, thread_key=mid)


def test_insert_new_stores_what_create_would(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    made = Message.insert_new(agent=agent, subject="Hi", body_text="x", **_fields(1))
    created = Message.create(agent=agent, subject="Hi", body_text="x", **_fields(1))
    assert made.id is not None
    assert made.id != created.id
    read, expected = Message.get_by_id(made.id), Message.get_by_id(created.id)
    differing = {
        name for name in Message._meta.fields if getattr(read, name) != getattr(expected, name)
    }
    assert differing == {"id", "created_at"}  # the rest, defaults too, alike
    assert read.created_at is not None
    assert read.to_addresses == []


def test_insert_new_keeps_the_objects_it_was_given(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    message = Message.insert_new(agent=agent, **_fields(1))
    run = Run.insert_new(agent=agent, kind="reply", message=message, correlation_id="c1")
    assert run.agent is agent
    assert run.message is message
    assert run.status == "queued"
    assert not run.dirty_fields
    assert Run.get_by_id(run.id).message_id == message.id


def test_insert_new_is_refused_by_the_schema_like_create(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    with pytest.raises(peewee.IntegrityError):  # a reply run needs its message
        Run.insert_new(agent=agent, kind="reply", correlation_id="c1")
    assert Run.select().count() == 0


def test_attachments_come_per_message_in_their_order(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    first, second, bare = (Message.create(agent=agent, **_fields(n)) for n in range(3))
    blobs = [
        Blob.create(sha256=f"{n:064x}", size=n, content_type="text/plain", filename=f"{n}.txt")
        for n in range(3)
    ]
    MessageAttachment.create(message=first, blob=blobs[2], position=1)
    MessageAttachment.create(message=first, blob=blobs[0], position=0)
    MessageAttachment.create(message=second, blob=blobs[1], position=0)
    found = attachments_of([first, second, bare])
    assert [[blob.filename for blob in found[m.id]] for m in (first, second, bare)] == [
        ["0.txt", "2.txt"],
        ["1.txt"],
        [],
    ]
    assert attachments_of([]) == {}


def test_insert_new_keeps_an_id_it_is_given(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    assert Message.insert_new(id=777, agent=agent, **_fields(1)).id == 777
    assert Message.get_by_id(777).message_id == "<m1@acme.example>"


def test_fetch_reads_the_records_a_condition_names_in_id_order(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    made = [Message.insert_new(agent=agent, subject=s, **_fields(n)) for n, s in enumerate("bab")]
    found = Message.fetch("agent_id = {p} AND subject = {p}", agent.id, "b")
    assert [m.id for m in found] == [made[0].id, made[2].id]
    assert found[0].to_addresses == []  # columns read back as peewee reads them
    assert found[0].agent_id == agent.id
    assert Message.fetch("subject = {p}", "'; DROP TABLE message; --") == []
    assert Message.select().count() == 3


def test_update_where_sets_what_update_would_on_the_records_its_condition_names(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    first, second, third = (Message.insert_new(agent=agent, **_fields(n)) for n in range(3))
    values = {"status": "sent", "pending_recipients": ["a@acme.example"], "delivery_attempts": 2}
    changed = Message.update_where(values, "id = {p} OR id = {p}", first.id, third.id)
    assert changed == 2
    by_hand = [Message.get_by_id(m.id) for m in (first, third)]
    Message.update(**values).where(Message.id == second.id).execute()
    by_peewee = Message.get_by_id(second.id)
    for message in by_hand:
        assert (message.status, message.pending_recipients, message.delivery_attempts) == (
            by_peewee.status,
            by_peewee.pending_recipients,
            by_peewee.delivery_attempts,
        )
    assert Message.update_where({"status": "failed"}, "id = {p}", -1) == 0
