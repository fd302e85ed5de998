"""Who took part in each message: what decides which mail a run's tools may show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import peewee

from protege.models.base import Record
from protege.models.messages import Message


class MessageParticipant(Record):
    """One person a message was from, to or copied to, by routing key: what says whose
    mail it is when a run's tools show mail only to those who took part in it."""

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        message_id: Any

    message = peewee.ForeignKeyField(Message, backref="participant_rows", on_delete="CASCADE")
    address = peewee.CharField(max_length=320)

    class Meta:
        table_name = "message_participant"
