"""Outbound mail: what ``context.queue_mail`` does. From is always the agent; each tool
call queues at most one mail; the message is checked, then stored in its thread as pending,
with the exact bytes to send; the delivery loop (``protege.delivery``) sends it through the
transport.
"""

from __future__ import annotations

import email.utils
from collections.abc import Sequence
from typing import Any

from protege import blobs
from protege.config import Config, MailSettings
from protege.db import database
from protege.gateway.compose import (
    DeliveryRefused,
    Outgoing,
    body_text,
    clean_id,
    header_text,
    now,
    references,
    rendered,
)
from protege.mail import clean_address, new_message_id, thread_key
from protege.models import Agent, Blob, Message, MessageAttachment, Run
from protege.models.base import utcnow
from protege.models.messages import OUTBOUND, PENDING

# The Auto-Submitted values protege's own mail may carry (RFC 3834), or none.
AUTO_SUBMITTED = (None, "auto-replied", "auto-generated")

__all__ = ["DeliveryRefused", "describe", "queue_mail"]


def queue_mail(
    *,
    agent: Agent,
    run: Run | None,
    config: Config,
    mail: dict[str, Any],
    attachments: Sequence[Blob | int] = (),
    message_id: str | None = None,
    reply_to: Sequence[str] = (),
    tool_call_id: str | None = None,
    auto_submitted: str | None = None,
) -> dict[str, Any]:
    """Queue ``mail`` to be sent as ``agent`` and return what became of it (``queued``).

    ``mail`` holds ``to``, ``cc``, ``bcc`` (lists of addresses), ``subject``, ``body`` and,
    for replies, ``in_reply_to``, ``references`` and ``loop``; any ``from`` is ignored.
    Every header value is sanitised, and the mail is refused (``DeliveryRefused``, nothing
    stored, nothing sent) when it has no recipient, more than ``max_recipients``, or would
    not come out exactly as meant. Asked again for the same run and ``tool_call_id`` (the
    model's id of the call that queues it), it queues nothing and returns the first
    outcome. The rendered bytes are stored with the message, so a mail sent again after a
    crash is the same mail, Message-ID and all.

    ``message_id`` and ``reply_to`` are protege's own (an approval request's token travels
    in them); tools cannot set them through ``mail``. So is ``auto_submitted``, the
    ``Auto-Submitted`` header of protege's automatic mail (``auto-replied`` or
    ``auto-generated``, RFC 3834).
    """
    if auto_submitted not in AUTO_SUBMITTED:
        raise DeliveryRefused(f"Auto-Submitted {auto_submitted!r} is not one protege writes")
    if run is not None and tool_call_id is not None:
        found = Message.fetch("run_id = {p} AND tool_call_id = {p}", run.id, tool_call_id)
        for earlier in found:
            return {**describe(earlier), "repeated": True}
    to, cc, bcc = (_clean(mail.get(field)) for field in ("to", "cc", "bcc"))
    _check_recipients([*to, *cc, *bcc], config.mail)
    files = _checked_attachments(attachments, config.mail)
    outgoing = Outgoing(
        sender_name=header_text(agent.name),
        sender=agent.address,
        to=tuple(to),
        cc=tuple(cc),
        subject=header_text(mail.get("subject")),
        date=now(),
        message_id=message_id or new_message_id(agent.address),
        in_reply_to=clean_id(mail.get("in_reply_to")),
        references=references(mail.get("references") or []),
        loop=_loop(mail.get("loop")) + 1,
        body=body_text(mail.get("body")),
        attachments=tuple(
            (header_text(b.filename), b.content_type, blobs.read(b, config)) for b in files
        ),
        reply_to=tuple(_clean(list(reply_to))),
        auto_submitted=auto_submitted,
    )
    outgoing, raw = rendered(outgoing)
    recipients = [*to, *cc, *bcc]
    with blobs.removed_on_failure(), database.atomic():
        raw_blob = blobs.store(  # in the shared store: any machine's delivery loop sends it
            raw, filename="message.eml", content_type="message/rfc822", config=config
        )
        stored = Message.insert_new(
            agent=agent,
            direction=OUTBOUND,
            status=PENDING,
            sender=email.utils.formataddr((outgoing.sender_name, agent.address)),
            to_addresses=to,
            cc_addresses=cc,
            bcc_addresses=bcc,
            subject=outgoing.subject,
            body_text=outgoing.body,
            message_id=outgoing.message_id,
            in_reply_to=outgoing.in_reply_to,
            reference_ids=list(outgoing.references),
            thread_key=_thread(run, outgoing),
            run=run.id if run is not None else None,
            tool_call_id=tool_call_id,
            raw_blob=raw_blob,
            pending_recipients=list(dict.fromkeys(recipients)),
            next_attempt_at=utcnow(),
        )
        for position, blob in enumerate(files):
            MessageAttachment.create(message=stored, blob=blob, position=position)
    return describe(stored)


def _thread(run: Run | None, outgoing: Outgoing) -> str:
    """A reply stays in the thread of the message it answers, whatever its References
    say: those came from outside, and would file the reply in a thread of their naming."""
    answered = run.message if run is not None and run.message_id is not None else None
    if answered is not None and (outgoing.in_reply_to or outgoing.references):
        return str(answered.thread_key)
    return thread_key(outgoing.message_id, outgoing.in_reply_to, outgoing.references)


def describe(message: Message) -> dict[str, Any]:
    """What became of an outbound ``message`` so far, as ``context.queue_mail`` reports it."""
    outcome = {
        "status": "queued" if message.status == PENDING else message.status,
        "message_id": message.message_id,
        "to": message.to_addresses,
        "cc": message.cc_addresses,
        "bcc": message.bcc_addresses,
        "subject": message.subject,
    }
    if message.refused_recipients:
        outcome["refused"] = message.refused_recipients
    if message.delivery_error:
        outcome["error"] = message.delivery_error
    return outcome


def _clean(addresses: Any) -> list[str]:
    if isinstance(addresses, str):
        addresses = [addresses]
    clean = []
    for address in addresses or []:
        bare = clean_address(str(address))
        if bare is None:
            raise DeliveryRefused(f"{address!r} is not an email address")
        clean.append(bare)
    return clean


def _check_recipients(recipients: list[str], limits: MailSettings) -> None:
    if not recipients:
        raise DeliveryRefused("the mail has no recipient")
    # Each distinct mailbox is a recipient: tags and case make a different RCPT each.
    people = {address.lower() for address in recipients}
    if len(people) > limits.max_recipients:
        raise DeliveryRefused(
            f"the mail has {len(people)} recipients; at most {limits.max_recipients} "
            "may receive one mail"
        )


def _loop(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _checked_attachments(attachments: Sequence[Blob | int], limits: MailSettings) -> list[Blob]:
    files = []
    for item in attachments:
        blob = item if isinstance(item, Blob) else Blob.get_or_none(Blob.id == item)
        if blob is None:
            raise DeliveryRefused(f"there is no file {item}")
        files.append(blob)
    if len(files) > limits.max_attachments:
        raise DeliveryRefused(f"at most {limits.max_attachments} attachments may be sent")
    too_big = [b for b in files if b.size > limits.max_attachment_bytes]
    if too_big:
        raise DeliveryRefused(
            f"{too_big[0].filename} is {too_big[0].size} bytes; "
            f"the limit is {limits.max_attachment_bytes}"
        )
    return files
