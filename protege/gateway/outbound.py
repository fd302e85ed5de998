"""Outbound mail: what ``context.deliver`` does. From is always the agent; each tool call
sends at most once; the message is stored in its thread before it leaves.
"""

from __future__ import annotations

import email.utils
import logging
import re
import smtplib
import ssl
import time
from collections.abc import Sequence
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from protege import blobs
from protege.access import routing_key
from protege.config import Config, MailSettings
from protege.db import database
from protege.errors import ProtegeError
from protege.gateway.inbound import LOOP_HEADER
from protege.harness.dispatch import current_tool_call
from protege.mail import new_message_id, thread_key
from protege.models import Agent, Blob, Message, MessageAttachment, Run
from protege.models.messages import FAILED, OUTBOUND, SENT

logger = logging.getLogger(__name__)


class DeliveryRefused(ProtegeError):
    """The mail cannot be sent as asked (no recipient, attachments over the limits...)."""


def deliver(
    *,
    agent: Agent,
    run: Run | None,
    config: Config,
    mail: dict[str, Any],
    attachments: Sequence[Blob | int] = (),
) -> dict[str, Any]:
    """Send ``mail`` as ``agent`` and return what happened.

    ``mail`` holds ``to``, ``cc``, ``bcc`` (lists of addresses), ``subject``, ``body`` and,
    for replies, ``in_reply_to``, ``references`` and ``loop``; any ``from`` is ignored.
    Asked again for the same run and tool call, it sends nothing and returns the first
    outcome.
    """
    call_id = current_tool_call.get()
    if run is not None and call_id is not None:
        earlier = Message.get_or_none((Message.run == run.id) & (Message.tool_call_id == call_id))
        if earlier is not None:
            return {**_outcome(earlier), "repeated": True}
    to, cc, bcc = (_clean(mail.get(field)) for field in ("to", "cc", "bcc"))
    if not (to or cc or bcc):
        raise DeliveryRefused("the mail has no recipient")
    files = _checked_attachments(attachments, config.mail)
    message_id = new_message_id(agent.address)
    references = list(mail.get("references") or [])
    in_reply_to = mail.get("in_reply_to")
    outgoing = _compose(agent, mail, to, cc, message_id, in_reply_to, references, files, config)
    with database.atomic():
        stored = Message.create(
            agent=agent,
            direction=OUTBOUND,
            status=SENT,
            sender=email.utils.formataddr((agent.name, agent.address)),
            to_addresses=to,
            cc_addresses=cc,
            bcc_addresses=bcc,
            subject=str(mail.get("subject") or ""),
            body_text=str(mail.get("body") or ""),
            message_id=message_id,
            in_reply_to=in_reply_to,
            reference_ids=references,
            thread_key=thread_key(message_id, in_reply_to, references),
            run=run.id if run is not None else None,
            tool_call_id=call_id,
        )
        for position, blob in enumerate(files):
            MessageAttachment.create(message=stored, blob=blob, position=position)
    error = _transport(outgoing, [*to, *cc, *bcc], config)
    if error is not None:
        stored.status, stored.delivery_error = FAILED, error
        stored.save(only=[Message.status, Message.delivery_error])
    return _outcome(stored)


def _outcome(message: Message) -> dict[str, Any]:
    outcome = {
        "status": message.status,
        "message_id": message.message_id,
        "to": message.to_addresses,
        "cc": message.cc_addresses,
        "bcc": message.bcc_addresses,
        "subject": message.subject,
    }
    if message.delivery_error:
        outcome["error"] = message.delivery_error
    return outcome


def _clean(addresses: Any) -> list[str]:
    if isinstance(addresses, str):
        addresses = [addresses]
    clean = []
    for address in addresses or []:
        if routing_key(str(address)) is None:
            raise DeliveryRefused(f"{address!r} is not an email address")
        clean.append(email.utils.getaddresses([str(address)])[0][1])
    return clean


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


def _compose(
    agent: Agent,
    mail: dict[str, Any],
    to: list[str],
    cc: list[str],
    message_id: str,
    in_reply_to: str | None,
    references: list[str],
    files: list[Blob],
    config: Config,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = email.utils.formataddr((agent.name, agent.address))
    if to:
        message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    message["Subject"] = " ".join(str(mail.get("subject") or "").split())
    message["Date"] = email.utils.formatdate(localtime=False)
    message["Message-ID"] = message_id
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    if references:
        message["References"] = " ".join(references)
    message[LOOP_HEADER] = str(int(mail.get("loop") or 0) + 1)
    message.set_content(str(mail.get("body") or ""))
    for blob in files:
        maintype, _, subtype = blob.content_type.partition("/")
        message.add_attachment(
            blobs.read(blob, config.data_dir),
            maintype=maintype or "application",
            subtype=subtype or "octet-stream",
            filename=blob.filename,
        )
    return message


def _transport(message: EmailMessage, recipients: list[str], config: Config) -> str | None:
    """Hand the message on; returns None when it left, else why it did not."""
    if config.mail.transport == "outbox":
        _write_to_outbox(message, Path(config.data_dir) / "outbox")
        return None
    return _send_by_smtp(message, recipients, config.mail)


def _write_to_outbox(message: EmailMessage, outbox: Path) -> Path:
    outbox.mkdir(parents=True, exist_ok=True)
    # The name sorts in sending order: the second, then nanoseconds within it.
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 1_000_000_000:09d}"
    name = re.sub(r"[^\w.@-]+", "_", message["Message-ID"].strip("<>"))
    path = outbox / f"{stamp}-{name}.eml"
    path.write_bytes(message.as_bytes())
    return path


def _send_by_smtp(
    message: EmailMessage, recipients: list[str], settings: MailSettings
) -> str | None:
    import os

    password = os.environ.get(settings.smtp_password_env)
    delay = 1.0
    for attempt in range(settings.smtp_retries + 1):
        try:
            with smtplib.SMTP(
                settings.smtp_host, settings.smtp_port, timeout=settings.smtp_timeout
            ) as smtp:
                if settings.smtp_starttls:
                    smtp.starttls(context=ssl.create_default_context())  # verify the server
                if settings.smtp_username:
                    smtp.login(settings.smtp_username, password or "")
                smtp.send_message(message, to_addrs=recipients)
            return None
        except smtplib.SMTPAuthenticationError as error:
            return f"SMTP refused the login of {settings.smtp_username}: {_text(error.smtp_error)}"
        except smtplib.SMTPResponseException as error:
            reason = f"SMTP {error.smtp_code}: {_text(error.smtp_error)}"
            if error.smtp_code >= 500:
                return reason  # permanent: retrying will not help
        except smtplib.SMTPRecipientsRefused as error:
            return f"SMTP refused the recipients: {', '.join(error.recipients)}"
        except (OSError, smtplib.SMTPException) as error:
            reason = f"{type(error).__name__}: {error}"
        if attempt < settings.smtp_retries:
            logger.warning("SMTP delivery failed (%s); retrying in %.0f s", reason, delay)
            time.sleep(delay)  # backoff between attempts at a remote server
            delay *= 2
    return f"gave up after {settings.smtp_retries + 1} attempts: {reason}"


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
