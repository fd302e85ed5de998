"""Message helpers for host apps and plugins (public API): threading and recording mail."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from protege.models import Agent, Message
from protege.models.messages import INBOUND


def new_message_id(address: str) -> str:
    """A fresh, globally unique Message-ID on the domain of ``address``."""
    domain = address.rsplit("@", 1)[-1] or "protege.invalid"
    return f"<{uuid.uuid4().hex}@{domain}>"


def thread_key(message_id: str, in_reply_to: str | None, references: Sequence[str]) -> str:
    """The key a message is threaded by: its first reference, else what it replies to, else
    itself. Message-IDs keep their case."""
    if references:
        return references[0]
    return in_reply_to or message_id


def record_inbound(
    agent: Agent,
    *,
    sender: str,
    body: str,
    subject: str = "",
    to: Sequence[str] | None = None,
    cc: Sequence[str] = (),
    message_id: str | None = None,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
) -> Message:
    """Store an inbound message for ``agent``, threaded by its headers."""
    message_id = message_id or new_message_id(sender)
    return Message.create(
        agent=agent,
        direction=INBOUND,
        sender=sender,
        to_addresses=list(to) if to is not None else [agent.address],
        cc_addresses=list(cc),
        subject=subject,
        body_text=body,
        message_id=message_id,
        in_reply_to=in_reply_to,
        reference_ids=list(references),
        thread_key=thread_key(message_id, in_reply_to, references),
    )


def reply_headers(message: Message) -> dict[str, object]:
    """The threading headers of a reply to ``message``: In-Reply-To and References."""
    return {
        "in_reply_to": message.message_id,
        "references": [*message.reference_ids, message.message_id],
    }
