"""Mail as protege keeps it: every message an agent received or sent, in its thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import peewee

from protege.db import database
from protege.models.agents import Agent
from protege.models.base import JSONListField, Record, utcnow

INBOUND = "inbound"
OUTBOUND = "outbound"
ACCEPTED = "accepted"  # inbound, a run was queued
REFUSED = "refused"  # inbound, the agent's access rules refused the sender
IGNORED = "ignored"  # inbound, an auto-reply or a loop: stored, no run
ANSWER = "answer"  # inbound, an approver's answer to an approval request: no run of its own
PENDING = "pending"  # outbound, stored and waiting for the delivery loop
SENT = "sent"  # outbound, the transport took it
FAILED = "failed"  # outbound, the transport gave up
SYNTHETIC_ID = "synthetic Message-ID"  # flag: protege made up the Message-ID


class Message(Record):
    """One email, inbound or outbound, of one agent.

    ``thread_key`` groups a conversation: the first ``References`` entry, else
    ``In-Reply-To``, else the message's own ``Message-ID``. Inbound content came from outside
    and is always shown to a model inside untrusted fences.

    ``reply_to_addresses`` are the bare addresses of an inbound Reply-To (all of them);
    ``refused_recipients`` of an outbound message are those the relay would not take, each
    ``{"address", "code", "reason"}``. ``flags`` may hold ``SYNTHETIC_ID``: the message came
    without a Message-ID and protege made one up, which never goes out in a reply.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        agent_id: Any
        run_id: Any
        raw_blob_id: Any
        attachment_links: Any
        runs: Any
        sent: Any

    agent = peewee.ForeignKeyField(Agent, backref="messages", on_delete="CASCADE")
    direction = peewee.CharField(max_length=8)
    sender = peewee.CharField(max_length=998)
    to_addresses = JSONListField(default=list)
    cc_addresses = JSONListField(default=list)
    subject = peewee.TextField(default="")
    body_text = peewee.TextField(default="")
    message_id = peewee.CharField(max_length=998)
    in_reply_to = peewee.CharField(max_length=998, null=True)
    reference_ids = JSONListField(default=list)
    thread_key = peewee.CharField(max_length=998)
    created_at = peewee.DateTimeField(default=utcnow)
    status = peewee.CharField(max_length=8, default=ACCEPTED)
    flags = JSONListField(default=list)
    bcc_addresses = JSONListField(default=list)
    raw_blob = peewee.DeferredForeignKey("Blob", null=True, column_name="raw_blob_id")
    run = peewee.DeferredForeignKey("Run", null=True, column_name="run_id", backref="sent")
    tool_call_id = peewee.CharField(max_length=200, null=True)
    delivery_error = peewee.TextField(null=True)
    reply_to_addresses = JSONListField(default=list)
    refused_recipients = JSONListField(default=list)
    # Outbound delivery: who still waits for the mail, when it is tried next, how often it
    # was tried, and until when a delivery loop holds it.
    pending_recipients = JSONListField(default=list)
    next_attempt_at = peewee.DateTimeField(null=True)
    delivery_attempts = peewee.IntegerField(default=0)
    delivery_lease_expires_at = peewee.DateTimeField(null=True)

    @property
    def attachments(self) -> list:
        """The blobs attached to this message, in order."""
        links = self.attachment_links  # the backref of MessageAttachment, defined with Blob
        return [link.blob for link in links.order_by(links.model.position)]

    def earlier_in_thread(self, limit: int) -> list[Message]:
        """The inbound messages of this one's thread that came before it, oldest first, at
        most the ``limit`` newest."""
        # Asked on every reply run: plain SQL, as building it with peewee costs more.
        p = database.param
        sql = (
            f"SELECT * FROM message WHERE agent_id = {p} AND thread_key = {p} "
            f"AND direction = 'inbound' AND id < {p} ORDER BY id DESC LIMIT {p}"
        )
        return list(Message.raw(sql, self.agent_id, self.thread_key, self.id, limit))[::-1]

    @staticmethod
    def matching(agent_id: int, words: list[str], limit: int) -> list[Message]:
        """The agent's messages (refused ones left out) holding every one of ``words``,
        newest first, at most ``limit``."""
        # Full-text search is FTS5 on SQLite and a tsvector on PostgreSQL, neither of which
        # peewee's query builder speaks: plain SQL, one statement per database.
        p = database.param
        if isinstance(database.obj, peewee.PostgresqlDatabase):
            sql = (
                f"SELECT * FROM message WHERE agent_id = {p} AND status <> 'refused' "
                f"AND search_vector @@ plainto_tsquery('english', {p}) "
                f"ORDER BY created_at DESC, id DESC LIMIT {p}"
            )
            params: tuple[Any, ...] = (agent_id, " ".join(words), limit)
        else:
            phrase = " ".join('"' + word.replace('"', '""') + '"' for word in words)
            sql = (
                "SELECT message.* FROM message JOIN message_search "
                "ON message_search.rowid = message.id "
                f"WHERE message_search MATCH {p} AND message.agent_id = {p} "
                "AND message.status <> 'refused' "
                f"ORDER BY message.created_at DESC, message.id DESC LIMIT {p}"
            )
            params = (phrase, agent_id, limit)
        return list(Message.raw(sql, *params))

    @property
    def inbound(self) -> bool:
        """Whether the agent received this message (rather than sent it)."""
        return self.direction == INBOUND
