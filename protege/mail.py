"""Message helpers for host apps and plugins (public API): threading and recording mail."""

from __future__ import annotations

import datetime
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import peewee

from protege.addresses import InvalidAddress, parse_mailbox, routing_key
from protege.authentication import Verdict
from protege.context import WHOLE_ARCHIVE, MailScope
from protege.db import database
from protege.models import (
    Agent,
    Blob,
    Message,
    MessageAttachment,
    MessageParticipant,
    SearchCriteria,
)
from protege.models.blobs import attachments_of
from protege.models.messages import INBOUND, OUTBOUND, REFUSED, SYNTHETIC_ID

# Where an approval's secret token travels: the reply address of its request
# (agent+approve-TOKEN@domain) and the request's Message-ID (<approval.TOKEN@domain>).
APPROVE_TAG = "approve-"
MESSAGE_ID_PREFIX = "approval."
_TOKENS = re.compile(
    rf"(?<=\+{re.escape(APPROVE_TAG)})[0-9a-fA-F]{{40}}|(?<={re.escape(MESSAGE_ID_PREFIX)})[0-9a-fA-F]{{40}}"
)
REDACTED_TOKEN = "[token]"


def redact_tokens(text: str) -> str:
    """``text`` with every approval token in it replaced: a token lets its holder answer
    the approval, so none is stored where a model, a result or a listing could show it."""
    return _TOKENS.sub(REDACTED_TOKEN, text) if text else text


__all__ = [
    "MAX_SEARCH_RESULTS",
    "SYNTHETIC_ID",
    "attachments_of",
    "clean_address",
    "new_message_id",
    "record_inbound",
    "redact_tokens",
    "reply_headers",
    "routing_key",
    "search",
    "search_date",
    "thread_for",
    "thread_key",
    "visible_blob",
]


def new_message_id(address: str) -> str:
    """A fresh, globally unique Message-ID on the domain of ``address``."""
    domain = address.rsplit("@", 1)[-1] or "protege.invalid"
    return f"<{uuid.uuid4().hex}@{domain}>"


def clean_address(address: str) -> str | None:
    """The bare address in ``address`` (``Jane <jane@acme.com>`` or ``jane@acme.com``) if it
    is exactly one mailbox protege may write to, else None (see ``parse_mailbox``)."""
    try:
        mailbox = parse_mailbox(str(address or ""))
    except InvalidAddress:
        return None
    return mailbox.address if routing_key(mailbox.address) is not None else None


def thread_key(message_id: str, in_reply_to: str | None, references: Sequence[str]) -> str:
    """The key a message is threaded by: its first reference, else what it replies to, else
    itself. Message-IDs keep their case."""
    if references:
        return references[0]
    return in_reply_to or message_id


def thread_for(
    agent: Agent,
    message_id: str,
    in_reply_to: str | None,
    references: Sequence[str],
    *,
    sender: str | None,
    proven: bool,
) -> str:
    """The thread a new inbound message of ``agent``'s joins.

    Its headers name a thread (``thread_key``), but anyone can write them: a message joins
    one of the agent's threads only when its ``sender``, ``proven`` by the sender verdict,
    took part in that thread (was From, To or Cc of a message in it that was not refused),
    since whoever joins a thread has the agent see its history. Failing the thread its
    first reference names, it may join the thread of the message it answers; failing
    both, it starts a thread of its own. An unproven sender takes part in nothing.
    """
    named = thread_key(message_id, in_reply_to, references)
    if not _thread_exists(agent, named):
        return named
    participant = routing_key(sender) if proven else None
    if participant is not None:
        candidates = [named]
        parent = (
            Message.fetch("agent_id = {p} AND message_id = {p}", agent.id, in_reply_to)
            if in_reply_to
            else []
        )
        candidates += [m.thread_key for m in parent[-1:] if m.thread_key != named]
        for candidate in candidates:
            if _takes_part(agent, candidate, participant):
                return candidate
    if message_id != named and not _thread_exists(agent, message_id):
        return message_id
    return f"<thread.{uuid.uuid4().hex}@protege.invalid>"  # its own id is another's thread


def _thread_exists(agent: Agent, key: str) -> bool:
    p = database.param
    sql = f"SELECT 1 FROM message WHERE agent_id = {p} AND thread_key = {p} LIMIT 1"
    return database.execute_sql(sql, (agent.id, key)).fetchone() is not None


def _takes_part(agent: Agent, key: str, participant: str) -> bool:
    p = database.param
    sql = (
        "SELECT 1 FROM message JOIN message_participant ON message_participant.message_id "
        f"= message.id WHERE message.agent_id = {p} AND message.thread_key = {p} "
        f"AND message.status <> 'refused' AND message_participant.address = {p} LIMIT 1"
    )
    return database.execute_sql(sql, (agent.id, key, participant)).fetchone() is not None


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
    reply_to: str | Sequence[str] | None = None,
    flags: Sequence[str] = (),
    verdict: Verdict | None = None,
) -> Message:
    """Store an inbound message for ``agent``, threaded by its headers (for scripts and
    tests; mail that really arrives goes through the gateway). ``reply_to`` is one address
    or several.

    The script or test storing it is speaking for ``sender``, so by default the sender
    counts as authenticated (method ``operator``); pass ``verdict`` to store another (an
    unauthenticated one, to see what a forger would get). It joins the thread its headers
    name only as ``thread_for`` allows.
    """
    if verdict is None:
        verdict = Verdict.operator(sender, "recorded by a script or test, not received by mail")
    message_id = message_id or new_message_id(sender)
    if isinstance(reply_to, str):
        reply_to = [reply_to]
    return Message.insert_new(
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
        thread_key=thread_for(
            agent,
            message_id,
            in_reply_to,
            references,
            sender=sender,
            proven=verdict.authenticated,
        ),
        reply_to_addresses=list(reply_to or []),
        flags=list(flags),
        authentication=json.dumps(verdict.as_json()),
        sender_authenticated=verdict.authenticated,
    )


def reply_headers(message: Message) -> dict[str, Any]:
    """The threading headers of a reply to ``message``, as RFC 5322 section 3.6.4 says.

    In-Reply-To is its Message-ID; References are its References, else its In-Reply-To,
    followed by its Message-ID. A Message-ID protege made up (the message had none) is
    nobody else's and never appears.
    """
    own = None if SYNTHETIC_ID in (message.flags or []) else message.message_id
    earlier = list(message.reference_ids) or ([message.in_reply_to] if message.in_reply_to else [])
    return {"in_reply_to": own, "references": [*earlier, *([own] if own else [])]}


MAX_SEARCH_RESULTS = 50
_WORD = re.compile(r"[\w@.+'-]+", re.UNICODE)


def search(
    agent: Agent,
    query: str = "",
    limit: int = 10,
    *,
    sender: str = "",
    recipient: str = "",
    subject: str = "",
    direction: str | None = None,
    after: datetime.datetime | None = None,
    before: datetime.datetime | None = None,
    has_attachment: bool | None = None,
    scope: MailScope = WHOLE_ARCHIVE,
) -> list[Message]:
    """The agent's own messages meeting every criterion given, newest first.

    ``query`` words may be in the participants' addresses, the subject or the body;
    ``sender``, ``recipient`` (To, Cc or Bcc) and ``subject`` words only there. Words are
    only ever words: quotes, operators and brackets in them are not query syntax. A text
    criterion given without any word in it matches nothing. ``direction`` is ``"inbound"``
    or ``"outbound"``; ``after`` (inclusive) and ``before`` (exclusive) are naive UTC or
    aware datetimes. Uses the database's full-text index (FTS5 on SQLite, tsvector on
    PostgreSQL). Mail the agent refused is left out, and so is mail ``scope`` does not
    show (a tool passes ``context.mail_scope(self.id)``).
    """
    if direction not in (None, INBOUND, OUTBOUND):
        raise ValueError(f"direction must be {INBOUND!r} or {OUTBOUND!r}, not {direction!r}")
    limit = max(1, min(int(limit), MAX_SEARCH_RESULTS))
    texts = (query, sender, recipient, subject)
    words = [_words(text) for text in texts]
    if any(text and not found for text, found in zip(texts, words, strict=True)):
        return []
    criteria = SearchCriteria(
        words=words[0],
        sender_words=words[1],
        recipient_words=words[2],
        subject_words=words[3],
        direction=direction,
        after=_naive_utc(after),
        before=_naive_utc(before),
        has_attachment=has_attachment,
        scope=scope,
    )
    return Message.matching(agent.id, criteria, limit)


def search_date(text: str) -> datetime.datetime:
    """A date (``2026-03-01``) or date and time (``2026-03-01T09:30``, with or without an
    offset) as naive UTC, for ``search``'s ``after`` and ``before``. A time without an
    offset is UTC. ``ValueError`` with a readable message for anything else."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise ValueError(
            f"{text!r} is not a date (2026-03-01) or date and time (2026-03-01T09:30:00Z)"
        ) from None
    try:
        return _naive_utc(moment)  # type: ignore[return-value]
    except OverflowError:  # 9999-12-31T23:00-05:00 is in the year 10000 in UTC
        raise ValueError(f"{text!r} is outside the dates a search can use") from None


def _naive_utc(moment: datetime.datetime | None) -> datetime.datetime | None:
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(datetime.UTC).replace(tzinfo=None)


def _words(text: str) -> tuple[str, ...]:
    # Only runs holding a letter or digit: the rest ("-", "'", "...") index as nothing.
    return tuple(word for word in _WORD.findall(text or "") if any(c.isalnum() for c in word))


def visible_blob(
    agent: Agent, reference: str | int, scope: MailScope = WHOLE_ARCHIVE
) -> Blob | None:
    """The file ``reference`` (its token, or the number of a file stored before tokens
    were) names, if ``agent`` may use it within ``scope``, else None.

    A file the agent created may be used by its token. A file that came with mail may be
    used when that mail is the agent's, its access rules did not refuse it, and ``scope``
    shows it (a tool passes ``context.mail_scope(self.id)``: the mail the run's sender
    took part in, unless a grant opened the whole archive). A number is no secret, so a
    file named by one is used only through mail ``scope`` shows."""
    blob = Blob.named(reference)
    if blob is None:
        return None
    by_token = str(reference).strip() == blob.token
    if blob.agent_id == agent.id and (by_token or scope.whole_archive):
        return blob
    attached = (
        MessageAttachment.select()
        .join(Message)
        .where(
            (MessageAttachment.blob == blob.id)
            & (Message.agent == agent.id)
            & (Message.status != REFUSED)
            & _shown(scope)
        )
        .exists()
    )
    return blob if attached else None


def _shown(scope: MailScope) -> Any:
    """The condition on ``Message`` that keeps to the mail ``scope`` shows."""
    if scope.whole_archive:
        return peewee.SQL("1 = 1")
    if scope.participant is None:
        return Message.id == (scope.message_id or 0)
    took_part = MessageParticipant.select(MessageParticipant.message).where(
        MessageParticipant.address == scope.participant
    )
    return Message.id.in_(took_part)
