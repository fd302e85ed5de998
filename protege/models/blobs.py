"""Stored files: attachments of mail, and files agents create. The bytes live on disk."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import peewee

from protege.db import database
from protege.models.agents import Agent
from protege.models.base import Record, utcnow
from protege.models.messages import Message


def new_token() -> str:
    """A fresh reference to a stored file: random, so that no one can guess another's."""
    return secrets.token_urlsafe(18)


class Blob(Record):
    """One stored file: its name and type, and the content-addressed bytes on disk.

    ``agent`` is set for files an agent created itself (``create_file``). Tools and models
    name a file by its ``token``, which cannot be guessed; ``numbered`` files, stored
    before tokens were, also answer to their id, which earlier runs may have written down.
    """

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        agent_id: Any
        attached_to: Any

    sha256 = peewee.CharField(max_length=64)
    size = peewee.IntegerField()
    content_type = peewee.CharField(max_length=255)
    filename = peewee.CharField(max_length=255)
    agent = peewee.ForeignKeyField(Agent, null=True, backref="blobs", on_delete="SET NULL")
    created_at = peewee.DateTimeField(default=utcnow)
    token = peewee.CharField(max_length=64, unique=True, default=new_token)
    numbered = peewee.BooleanField(default=False)

    @classmethod
    def named(cls, reference: str | int) -> Blob | None:
        """The file ``reference`` names: its token, or the id of a file stored before
        tokens were (a number, or a string of digits); None when it names none."""
        text = str(reference).strip()
        if not isinstance(reference, bool) and text:
            found = cls.get_or_none(cls.token == text)
            if found is not None:
                return found
            if text.isascii() and text.isdigit() and len(text) < 19:
                return cls.get_or_none((cls.id == int(text)) & cls.numbered)
        return None


class MessageAttachment(Record):
    """A blob attached to a message, in the order it was attached."""

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        message_id: Any
        blob_id: Any

    message = peewee.ForeignKeyField(Message, backref="attachment_links", on_delete="CASCADE")
    blob = peewee.ForeignKeyField(Blob, backref="attached_to")
    position = peewee.IntegerField()

    class Meta:
        table_name = "message_attachment"
        indexes = ((("message", "position"), True),)


def attachments_of(messages: Sequence[Message]) -> dict[int, list[Blob]]:
    """The attachments of each message, by message id, in order: one query for them all."""
    found: dict[int, list[Blob]] = {message.id: [] for message in messages}
    if not found:
        return found
    # Plain SQL: asked on every run, and building it with peewee cost more than running it.
    sql = _attachments_sql(database.param, len(found))
    for row in database.execute_sql(sql, list(found)):
        found[row[0]].append(Blob.from_row(row[1:]))
    return found


@functools.cache
def _attachments_sql(param: str, messages: int) -> str:
    return (
        f"SELECT message_attachment.message_id, {Blob.columns()} FROM message_attachment "
        "JOIN blob ON blob.id = message_attachment.blob_id "
        f"WHERE message_attachment.message_id IN ({', '.join([param] * messages)}) "
        "ORDER BY message_attachment.message_id, message_attachment.position"
    )
