"""Inbound mail: parse it, find its agents, check who sent it, store it, queue the run.

Everything that reaches an agent is kept. Mail that does not parse cleanly is stored and
flagged; auto-replies and loops are stored but start no run; a sender the agent's access
rules refuse is stored as refused. Only mail over the limits, or for no agent at all, is
turned away unstored, with a reason.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Iterable, Sequence
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from html.parser import HTMLParser

import attrs

from protege import blobs
from protege.access import routing_key
from protege.config import Config, MailSettings
from protege.db import database
from protege.errors import ProtegeError
from protege.harness import queue_reply
from protege.mail import new_message_id, thread_key
from protege.models import Agent, Message, MessageAttachment, Run
from protege.models.messages import ACCEPTED, IGNORED, INBOUND, REFUSED

LOOP_HEADER = "X-Protege-Loop"
_MESSAGE_ID = re.compile(r"<[^<>\s]+>")
BULK_PRECEDENCE = {"bulk", "junk", "list"}


class MailRejected(ProtegeError):
    """Mail turned away before anything was stored; ``code`` is the SMTP reply code."""

    def __init__(self, reason: str, code: int = 550) -> None:
        super().__init__(reason)
        self.code = code


@attrs.frozen
class Delivered:
    """What became of an inbound message for one agent."""

    agent: Agent
    message: Message
    run: Run | None
    status: str  # accepted, refused or ignored
    reason: str


@attrs.frozen
class _Attachment:
    filename: str | None
    content_type: str
    data: bytes


@attrs.frozen
class _Parsed:
    sender: str
    to: list[str]
    cc: list[str]
    reply_to: str | None
    subject: str
    body: str
    message_id: str
    in_reply_to: str | None
    references: list[str]
    attachments: list[_Attachment]
    flags: list[str]
    ignore_reason: str | None


def agent_for(address: str) -> Agent | None:
    """The agent whose address has the same routing key as ``address``, if any."""
    key = routing_key(address)
    if key is None:
        return None
    local, _, domain = key.partition("@")
    candidates = (
        Agent.select()
        .where(Agent.address.startswith(local))
        .where(Agent.address.endswith(f"@{domain}"))
    )
    return next((agent for agent in candidates if routing_key(agent.address) == key), None)


def ingest(
    raw: bytes,
    *,
    config: Config,
    recipients: Sequence[str] | None = None,
    envelope_sender: str | None = None,
) -> list[Delivered]:
    """Store ``raw`` for each agent among ``recipients`` and queue their runs.

    ``recipients`` are the SMTP envelope's; without them (a file handed to ``protege
    receive``) the To, Cc and Delivered-To headers say who it is for. Raises
    ``MailRejected`` for mail over the limits or for no known agent: then nothing is stored.
    """
    limits = config.mail
    if len(raw) > limits.max_message_bytes:
        raise MailRejected(
            f"message is {len(raw)} bytes; the limit is {limits.max_message_bytes}", 552
        )
    parsed = parse(raw, limits, envelope_sender)
    agents = _agents_for(recipients if recipients is not None else _header_recipients(raw, parsed))
    if not agents:
        raise MailRejected("no agent has any of the recipient addresses", 550)
    delivered = []
    with database.atomic():
        raw_blob = blobs.store(
            raw, filename="message.eml", content_type="message/rfc822", data_dir=config.data_dir
        )
        stored = [
            blobs.store(
                a.data, filename=a.filename, content_type=a.content_type, data_dir=config.data_dir
            )
            for a in parsed.attachments
        ]
        for agent in agents:
            delivered.append(_deliver_to(agent, parsed, raw_blob, stored))
    return delivered


def _deliver_to(agent: Agent, parsed: _Parsed, raw_blob, stored) -> Delivered:
    decision = agent.admits(parsed.sender)
    if not decision.admitted:
        status, reason = (
            REFUSED,
            f"{agent.name} does not accept mail from this sender: {decision.reason}",
        )
    elif parsed.ignore_reason is not None:
        status, reason = IGNORED, parsed.ignore_reason
    else:
        status, reason = ACCEPTED, "accepted"
    message = Message.create(
        agent=agent,
        direction=INBOUND,
        status=status,
        sender=parsed.sender,
        to_addresses=parsed.to,
        cc_addresses=parsed.cc,
        reply_to_addresses=[parsed.reply_to] if parsed.reply_to else [],
        subject=parsed.subject,
        body_text=parsed.body,
        message_id=parsed.message_id,
        in_reply_to=parsed.in_reply_to,
        reference_ids=parsed.references,
        thread_key=thread_key(parsed.message_id, parsed.in_reply_to, parsed.references),
        flags=parsed.flags,
        raw_blob=raw_blob,
    )
    for position, blob in enumerate(stored):
        MessageAttachment.create(message=message, blob=blob, position=position)
    run = queue_reply(message) if status == ACCEPTED else None
    return Delivered(agent, message, run, status, reason)


def parse(raw: bytes, limits: MailSettings, envelope_sender: str | None = None) -> _Parsed:
    """Read an email into what protege stores; problems become flags, not errors.

    Raises ``MailRejected`` only for attachments over the limits.
    """
    flags: list[str] = []
    try:
        message = BytesParser(policy=policy.default).parsebytes(raw)
    except Exception as error:  # the parser is lenient; this is a last resort
        return _unparsed(raw, envelope_sender, f"malformed: cannot parse ({error})")
    defects = _defects(message)
    if defects:
        flags.append("malformed: " + ", ".join(sorted(defects)))

    def header(name: str) -> str:
        try:
            return str(message.get(name, "") or "")
        except Exception as error:
            flags.append(f"malformed: header {name} ({type(error).__name__})")
            return ""

    senders = email.utils.getaddresses([header("From")])
    sender = email.utils.formataddr(senders[0]) if senders and senders[0][1] else ""
    sender = _storable(sender, flags)
    if not sender:
        sender = envelope_sender or ""
        flags.append("malformed: no From address")
    message_id = _first_id(header("Message-ID"))
    if message_id is None:
        message_id = new_message_id(routing_key(sender) or "sender@protege.invalid")
        flags.append("synthetic Message-ID")
    body, body_flags = _body_text(message)
    flags += body_flags
    attachments = _attachments(message, limits)
    return _Parsed(
        sender=sender,
        to=_addresses(header("To")),
        cc=_addresses(header("Cc")),
        reply_to=(_addresses(header("Reply-To")) or [None])[0],
        subject=_storable(" ".join(header("Subject").split()), flags),
        body=_storable(body, flags),
        message_id=message_id,
        in_reply_to=_first_id(header("In-Reply-To")),
        references=_MESSAGE_ID.findall(header("References")),
        attachments=attachments,
        flags=flags,
        ignore_reason=_ignore_reason(header, limits, flags),
    )


def _ignore_reason(header, limits: MailSettings, flags: list[str]) -> str | None:
    auto = header("Auto-Submitted").strip().lower()
    if auto and auto.split(";")[0].strip() != "no":
        flags.append(f"auto-submitted: {auto}")
        return f"auto-submitted mail ({auto}) starts no run"
    precedence = header("Precedence").strip().lower()
    if precedence in BULK_PRECEDENCE:
        flags.append(f"precedence: {precedence}")
        return f"{precedence} mail starts no run"
    loop = header(LOOP_HEADER).strip()
    if loop:
        count = int(loop) if loop.isdigit() else limits.loop_limit
        flags.append(f"loop: {count}")
        if count >= limits.loop_limit:
            return f"mail that went round {count} times between agents starts no run"
    return None


def _storable(text: str, flags: list[str]) -> str:
    # PostgreSQL text cannot hold NUL; keep everything else as it came.
    if "\x00" in text:
        flags.append("malformed: NUL characters replaced")
        return text.replace("\x00", "\ufffd")
    return text


def _unparsed(raw: bytes, envelope_sender: str | None, flag: str) -> _Parsed:
    flags = [flag, "synthetic Message-ID"]
    return _Parsed(
        sender=envelope_sender or "",
        to=[],
        cc=[],
        reply_to=None,
        subject="",
        body=_storable(raw.decode("utf-8", errors="replace"), flags),
        message_id=new_message_id("unparsed@protege.invalid"),
        in_reply_to=None,
        references=[],
        attachments=[],
        flags=flags,
        ignore_reason=None,
    )


def _defects(message: EmailMessage) -> set[str]:
    found = set()
    for part in message.walk():
        found.update(type(defect).__name__ for defect in part.defects)
    return found


def _addresses(value: str) -> list[str]:
    return [addr for _, addr in email.utils.getaddresses([value]) if addr and "@" in addr]


def _first_id(value: str) -> str | None:
    match = _MESSAGE_ID.search(value or "")
    return match.group(0) if match else None


def _body_text(message: EmailMessage) -> tuple[str, list[str]]:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
        if part is None:
            return "", []
        text = part.get_content()
    except Exception as error:
        payload = message.get_payload(decode=True) or b""
        text = payload.decode("utf-8", errors="replace") if isinstance(payload, bytes) else ""
        return text, [f"malformed: body ({type(error).__name__})"]
    if part.get_content_type() == "text/html":
        return _html_to_text(text), []
    return text, []


def _attachments(message: EmailMessage, limits: MailSettings) -> list[_Attachment]:
    found = []
    for part in message.iter_attachments():
        data = part.get_payload(decode=True)
        if data is None:  # an attached message/rfc822: keep it as bytes
            data = part.as_bytes()
        found.append(_Attachment(part.get_filename(), part.get_content_type(), data))
        if len(found) > limits.max_attachments:
            raise MailRejected(f"message has more than {limits.max_attachments} attachments", 552)
        if len(data) > limits.max_attachment_bytes:
            raise MailRejected(
                f"attachment {part.get_filename() or len(found)} is {len(data)} bytes; "
                f"the limit is {limits.max_attachment_bytes}",
                552,
            )
    return found


def _header_recipients(raw: bytes, parsed: _Parsed) -> list[str]:
    delivered_to = re.findall(rb"^Delivered-To:\s*(.+)$", raw, re.MULTILINE | re.IGNORECASE)
    return [*parsed.to, *parsed.cc, *(d.decode(errors="replace").strip() for d in delivered_to)]


def _agents_for(addresses: Iterable[str]) -> list[Agent]:
    agents: dict[int, Agent] = {}
    for address in addresses:
        agent = agent_for(address)
        if agent is not None:
            agents.setdefault(agent.id, agent)
    return list(agents.values())


class _TextOf(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("br", "p", "div", "li", "tr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_to_text(html: str) -> str:
    parser = _TextOf()
    parser.feed(html)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
