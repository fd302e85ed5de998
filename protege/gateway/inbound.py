"""Inbound mail: parse it, find its agents, check who sent it, store it, queue the run.

Everything that reaches an agent is kept. Mail that does not parse cleanly is stored and
flagged; auto-replies and loops are stored but start no run; a sender the agent's access
rules refuse is stored as refused. Only mail over the limits, or for no agent at all, is
turned away unstored, with a reason.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import peewee

from protege import blobs
from protege.access import routing_key
from protege.authentication import Resolver, Verdict, authenticate, unverified
from protege.config import Config
from protege.db import database
from protege.errors import ProtegeError
from protege.gateway.approvals import answer_by_mail
from protege.gateway.inspection import OwnInspectors, inspect
from protege.gateway.parse import (
    LOOP_HEADER,
    MailRejected,
    ParsedMail,
    check_header_block,
    parse,
)
from protege.limits.admission import admission, lock_admissions
from protege.limits.notices import tell_of_hold
from protege.limits.senders import sender_key
from protege.limits.windows import naive_utc
from protege.mail import SYNTHETIC_ID, new_message_id, redact_tokens, thread_for
from protege.models import Agent, Message, MessageAttachment, Run
from protege.models.base import utcnow
from protege.models.messages import ACCEPTED, ANSWER, FROM_AN_AGENT, IGNORED, INBOUND, REFUSED
from protege.queue import queue_reply

__all__ = ["LOOP_HEADER", "Delivered", "MailRejected", "StorageUnavailable", "agent_for", "ingest"]

logger = logging.getLogger(__name__)
# Errors a later attempt can get past (the database is down or busy); anything else is
# about this message, and a retry would meet it again.
TRANSIENT_ERRORS = (peewee.OperationalError, peewee.InterfaceError, OSError)


class StorageUnavailable(ProtegeError):
    """The message could not be stored for now; the sender should try again later."""


@attrs.frozen
class Delivered:
    """What became of an inbound message for one agent."""

    agent: Agent
    message: Message
    run: Run | None
    status: str  # accepted, refused, ignored, or answer (to an approval request)
    reason: str


def agent_for(address: str) -> Agent | None:
    """The agent whose address has the same routing key as ``address``, if any; an archived
    agent is no agent here, so its mail is refused as mail for nobody."""
    key = routing_key(address)
    if key is None:
        return None
    local, _, domain = key.partition("@")
    candidates = Agent.fetch(
        "LOWER(address) LIKE {p} ESCAPE '!' AND LOWER(address) LIKE {p} ESCAPE '!' "
        "AND archived_at IS NULL",
        _like(local.lower()) + "%",
        "%@" + _like(domain.lower()),
    )
    return next((agent for agent in candidates if routing_key(agent.address) == key), None)


def _like(text: str) -> str:
    """``text`` as a LIKE pattern matching only itself (escape character ``!``)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def ingest(
    raw: bytes,
    *,
    config: Config,
    recipients: Sequence[str] | None = None,
    envelope_sender: str | None = None,
    client_ip: str | None = None,
    helo: str | None = None,
    resolver: Resolver | None = None,
    verdict: Verdict | None = None,
    app: Any = None,
    clock: Callable[[], datetime.datetime] = utcnow,
    provider_authserv_ids: Sequence[str] | None = None,
) -> list[Delivered]:
    """Store ``raw`` for each agent among ``recipients`` and queue their runs.

    ``recipients`` are the SMTP envelope's; without them (a file handed to ``protege
    receive``) the To, Cc and Delivered-To headers say who it is for. The sender verdict is
    computed once (``protege.authentication``) from the mail and the SMTP session
    (``client_ip``, ``helo``, ``envelope_sender``), through ``resolver`` (one built from
    ``[mail.authentication]`` when None), unless ``verdict`` is given. Each stored mail is
    then inspected by the ``inspect_inbound`` plugins of ``app`` (the installation; without
    one, by protege's own inspectors only), which may flag it or hold it. Mail read from a
    provider's mailbox passes ``provider_authserv_ids`` (see ``verify_sender``). Raises
    ``MailRejected`` for mail over the limits or for no known agent (then nothing is
    stored), and ``StorageUnavailable`` only when the database or disk failed in a way a
    later attempt can get past.
    """
    activated = getattr(app, "activated", None)  # an installation: its own database
    with contextlib.nullcontext() if activated is None else activated():
        return _ingest(
            raw,
            config,
            recipients,
            envelope_sender,
            client_ip,
            helo,
            resolver,
            verdict,
            app,
            naive_utc(clock()),
            provider_authserv_ids,
        )


def _ingest(
    raw: bytes,
    config: Config,
    recipients: Sequence[str] | None,
    envelope_sender: str | None,
    client_ip: str | None,
    helo: str | None,
    resolver: Resolver | None,
    verdict: Verdict | None,
    app: Any,
    now: datetime.datetime,
    provider_authserv_ids: Sequence[str] | None = None,
) -> list[Delivered]:
    limits = config.mail
    if len(raw) > limits.max_message_bytes:
        raise MailRejected(
            f"message is {len(raw)} bytes; the limit is {limits.max_message_bytes}", 552
        )
    check_header_block(raw, limits)
    parsed = parse(raw, limits, envelope_sender)
    addressed = list(recipients) if recipients is not None else _header_recipients(raw, parsed)
    agents = _agents_for(addressed)
    if not agents:
        raise MailRejected("no agent has any of the recipient addresses", 550)
    if verdict is None:
        verdict = verify_sender(
            raw,
            config,
            client_ip=client_ip,
            helo=helo,
            mail_from=envelope_sender,
            resolver=resolver,
            provider_authserv_ids=provider_authserv_ids,
        )
    verdict = _for_sender(verdict, parsed.sender)
    if parsed.sender and agent_for(parsed.sender) is not None:
        verdict = unverified(FROM_AN_AGENT, verdict.from_domain)
    inspectors = OwnInspectors.of(config) if app is None else app
    try:
        return _store(raw, parsed, agents, config, addressed, verdict, inspectors, now)
    except TRANSIENT_ERRORS as error:
        raise StorageUnavailable(f"{type(error).__name__}: {error}") from error
    except Exception as error:  # something in this mail the database would not take
        logger.exception("inbound mail could not be stored as parsed; keeping it unparsed")
        flag = f"malformed: could not be stored as parsed ({type(error).__name__})"
        fallback = ParsedMail.unread(
            [flag], "the mail could not be read into a message: nobody to answer"
        )
        try:
            return _store(
                raw,
                fallback,
                agents,
                config,
                (),
                unverified("the mail could not be read"),
                inspectors,
                now,
            )
        except Exception as again:
            raise StorageUnavailable(f"{type(again).__name__}: {again}") from again


def _store(
    raw: bytes,
    parsed: ParsedMail,
    agents: list[Agent],
    config: Config,
    recipients: Sequence[str],
    verdict: Verdict,
    inspectors: Any,
    now: datetime.datetime,
) -> list[Delivered]:
    with blobs.removed_on_failure(), database.atomic():
        copies = _earlier_copies(raw, parsed, agents)
        fresh = [agent for agent in agents if agent.id not in copies]
        if not fresh:
            return [_again(agent, copies[agent.id]) for agent in agents]
        lock_admissions([agent.id for agent in fresh])  # in one order: see its docstring
        raw_blob = blobs.store(
            raw, filename="message.eml", content_type="message/rfc822", config=config
        )
        stored = [
            blobs.store(a.data, filename=a.filename, content_type=a.content_type, config=config)
            for a in parsed.attachments
        ]
        return [
            _again(agent, copies[agent.id])
            if agent.id in copies
            else _deliver_to(
                agent, parsed, raw_blob, stored, config, recipients, verdict, inspectors, now
            )
            for agent in agents
        ]


def _earlier_copies(raw: bytes, parsed: ParsedMail, agents: list[Agent]) -> dict[int, Message]:
    """The messages, by agent, that are this very mail taken before: the same Message-ID
    and the same bytes (a sending server that lost our 250 delivers again)."""
    if parsed.message_id is None:
        return {}
    digest = hashlib.sha256(raw).hexdigest()
    wanted = {agent.id for agent in agents}
    copies: dict[int, Message] = {}
    for message in Message.fetch(_EARLIER_COPY, parsed.message_id, digest):  # oldest first
        if message.agent_id in wanted:
            copies.setdefault(message.agent_id, message)
    return copies


# Asked of every inbound mail: SQL written once (a query built by peewee for each mail was
# a quarter of what storing a mail cost).
_EARLIER_COPY = (
    "direction = 'inbound' AND message_id = {p} "
    "AND raw_blob_id IN (SELECT id FROM blob WHERE sha256 = {p})"
)


def _again(agent: Agent, earlier: Message) -> Delivered:
    """What a mail delivered again is for ``agent``: its first copy, and no new run."""
    reason = f"the same mail as message {earlier.id}, delivered again: taken once"
    return Delivered(agent, earlier, None, IGNORED, reason)


def verify_sender(
    raw: bytes,
    config: Config,
    *,
    client_ip: str | None = None,
    helo: str | None = None,
    mail_from: str | None = None,
    resolver: Resolver | None = None,
    provider_authserv_ids: Sequence[str] | None = None,
) -> Verdict:
    """The sender verdict on ``raw`` as ``[mail.authentication]`` asks for it (nothing is
    checked when its mode is ``off``). ``provider_authserv_ids`` is for mail read from a
    provider's mailbox (IMAP): the provider received it, and its topmost
    ``Authentication-Results`` carrying one of these ids is read as a trusted relay's."""
    settings = config.mail.authentication
    if settings.mode == "off":
        return unverified("sender authentication is off ([mail.authentication] mode)")
    return authenticate(
        raw,
        client_ip=client_ip,
        helo=helo,
        mail_from=mail_from,
        resolver=resolver if resolver is not None else settings.resolver(),
        trusted_relays=settings.trusted_relays,
        trusted_authserv_ids=settings.trusted_authserv_ids,
        trusted_arc_sealers=settings.trusted_arc_sealers,
        provider_authserv_ids=provider_authserv_ids,
    )


def _for_sender(verdict: Verdict, sender: str) -> Verdict:
    """``verdict``, unless it speaks for a mailbox other than the sender the gateway read:
    the two readings of From must agree, to the address, before anything is admitted."""
    if not verdict.authenticated:
        return verdict
    key = routing_key(sender)
    if key is not None and verdict.address == key:
        return verdict
    return unverified(
        f"the verdict is for {verdict.address or 'no sender'}, not the sender the gateway read",
        verdict.from_domain,
    )


def _deliver_to(
    agent: Agent,
    parsed: ParsedMail,
    raw_blob,
    stored,
    config: Config,
    recipients: Sequence[str],
    verdict: Verdict,
    inspectors: Any,
    now: datetime.datetime,
) -> Delivered:
    flags = list(parsed.flags)
    answer = None
    message_id = parsed.message_id
    if message_id is None:
        message_id = new_message_id(agent.address)
        flags.append(SYNTHETIC_ID)
    settings = config.mail.authentication
    from_an_agent = verdict.reason == FROM_AN_AGENT
    if from_an_agent:
        flags.append(FROM_AN_AGENT)
    proven = (verdict.authenticated or not settings.enforced) and not from_an_agent
    decision = agent.admits(parsed.sender, authenticated=proven) if parsed.sender else None
    if decision is not None and not decision.admitted:
        status = REFUSED
        reason = f"{agent.name} does not accept mail from this sender: {decision.reason}"
        flags.append(f"refused by access rules: {decision.reason}")
    elif parsed.ignore_reason is not None:
        status, reason = IGNORED, parsed.ignore_reason
    else:
        status, reason = ACCEPTED, "accepted"
    message = Message.insert_new(
        agent=agent,
        direction=INBOUND,
        status=status,
        sender=parsed.sender,
        # An answer to an approval carries its token: it decides below (from the parsed
        # mail), and is kept nowhere a model or a listing could read it.
        to_addresses=[redact_tokens(a) for a in parsed.to],
        cc_addresses=[redact_tokens(a) for a in parsed.cc],
        reply_to_addresses=[redact_tokens(a) for a in parsed.reply_to],
        subject=parsed.subject,
        body_text=parsed.body,
        message_id=message_id,
        in_reply_to=redact_tokens(parsed.in_reply_to) if parsed.in_reply_to else None,
        reference_ids=[redact_tokens(r) for r in parsed.references],
        thread_key=thread_for(
            agent,
            redact_tokens(message_id),
            redact_tokens(parsed.in_reply_to) if parsed.in_reply_to else None,
            [redact_tokens(r) for r in parsed.references],
            sender=parsed.sender,
            proven=proven,
        ),
        flags=list(flags),
        raw_blob=raw_blob,
        authentication=json.dumps(verdict.as_json()),
        sender_authenticated=verdict.authenticated,
    )
    for position, blob in enumerate(stored):
        MessageAttachment.create(message=message, blob=blob, position=position)
    # Stored; now the inspectors (sender authentication's decision among them) may flag the
    # mail or hold it, before it may decide an approval or start a run.
    stored_as = (status, list(flags))
    inspection = inspect(inspectors, message, agent, verdict)
    flags += inspection.flags
    if status == ACCEPTED and inspection.held:
        status, reason = IGNORED, inspection.reason
    elif status == ACCEPTED:
        answer = answer_by_mail(agent, parsed, recipients, config, proven)
        if answer is not None:
            # An answer to an approval request: it decides the approval, or changes nothing.
            status, reason = (ANSWER if answer.decided else IGNORED), answer.reason
            flags.append(f"approval answer: {answer.reason}")
    if (status, flags) != stored_as:
        Message.update(status=status, flags=flags).where(Message.id == message.id).execute()
        message.status, message.flags = status, flags
    run = None
    if status == ACCEPTED:
        key = sender_key(message, config.mail.authentication)
        hold = admission(agent.id, agent.name, key, now, config.limits)
        run = queue_reply(message, hold=hold, now=now, authentication=config.mail.authentication)
        if hold is not None:
            reason = f"accepted and held: {hold.reason}"
            tell_of_hold(inspectors, agent, message, hold, now, config)
    if answer is not None and answer.run is not None:
        run = answer.run  # the waiting run the answer put back in the queue
    return Delivered(agent, message, run, status, reason)


_ADDRESSED = re.compile(
    rb"^(?:to|cc|delivered-to):[ \t]*((?:.*)(?:\r?\n[ \t].*)*)", re.MULTILINE | re.IGNORECASE
)


def _header_recipients(raw: bytes, parsed: ParsedMail) -> list[str]:
    """Who a mail with no envelope (a file) is for: its To, Cc and Delivered-To headers,
    read from the raw header block as well as from the parsed mail, so that a mail the
    parser could not read still reaches its agent (stored and flagged, never dropped)."""
    import email.utils

    header_block = re.split(rb"\r?\n\r?\n", raw, maxsplit=1)[0]
    values = [
        " ".join(m.decode("utf-8", "replace").split()) for m in _ADDRESSED.findall(header_block)
    ]
    found = [address for _, address in email.utils.getaddresses(values) if "@" in address]
    return list(dict.fromkeys([*parsed.to, *parsed.cc, *found]))


def _agents_for(addresses: Iterable[str]) -> list[Agent]:
    agents: dict[int, Agent] = {}
    for address in addresses:
        agent = agent_for(address)
        if agent is not None:
            agents.setdefault(agent.id, agent)
    return list(agents.values())
