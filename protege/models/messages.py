"""Mail as protege keeps it: every message an agent received or sent, in its thread."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any, Self

import attrs
import peewee

from protege.addresses import participant_keys
from protege.authentication import Verdict
from protege.config import AuthenticationSettings
from protege.context import WHOLE_ARCHIVE, MailScope
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
# Flag: the From is one of the installation's own agents. Such mail (an agent's own words
# come back, or a forgery of them) proves nobody: it opens no gate, approves nothing, and
# its tools see no mail but itself, whatever DKIM or the mode says.
FROM_AN_AGENT = "from an agent of this installation: it proves no sender"


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
    # Inbound: the sender verdict (``protege.authentication.Verdict`` as JSON), and whether
    # it proved the sender's domain. Mail with no verdict proves nobody.
    authentication = peewee.TextField(null=True)
    sender_authenticated = peewee.BooleanField(default=False)

    @classmethod
    def insert_new(cls, **values: Any) -> Self:
        """Store a new message and who took part in it (its From, To and Cc), by which the
        mail a run's tools may show its sender is found."""
        message = super().insert_new(**values)
        found = message.participants
        if found:
            rows = ", ".join([f"({database.param}, {database.param})"] * len(found))
            database.execute_sql(
                f"INSERT INTO message_participant (message_id, address) VALUES {rows}",
                [value for address in found for value in (message.id, address)],
            )
        return message

    @property
    def participants(self) -> list[str]:
        """The routing keys of the people this message was from, to and copied to."""
        return participant_keys(self.sender, self.to_addresses or [], self.cc_addresses or [])

    @property
    def verdict(self) -> Verdict:
        """What the gateway found of this mail's sender (unauthenticated when nothing was
        recorded)."""
        return Verdict.from_json(self.authentication)

    def proves_sender(self, settings: AuthenticationSettings) -> bool:
        """Whether allow rules and approvers may take this mail's sender at its word: it
        was authenticated, or ``settings`` do not enforce authentication; never for mail
        from one of the installation's own agents (``FROM_AN_AGENT``), whatever proves it."""
        if FROM_AN_AGENT in (self.flags or ()):
            return False
        return bool(self.sender_authenticated) or not settings.enforced

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
    def matching(agent_id: int, criteria: SearchCriteria, limit: int) -> list[Message]:
        """The agent's messages (refused ones left out) that meet ``criteria``, newest first,
        at most ``limit``.

        Built so the cost follows ``limit`` rather than the number of matches: the newest
        candidates are read in order and the reading stops once ``limit`` of them qualify.
        """
        if isinstance(database.obj, peewee.PostgresqlDatabase):
            return _postgresql_matching(agent_id, criteria, limit)
        sql, params = _sqlite_search(agent_id, criteria, limit)
        return list(Message.raw(sql, *params))

    @property
    def inbound(self) -> bool:
        """Whether the agent received this message (rather than sent it)."""
        return self.direction == INBOUND


@attrs.frozen
class SearchCriteria:
    """What a mail search asks for; every part given must hold.

    ``words`` may be anywhere (participants, subject, body); ``sender_words``,
    ``recipient_words`` and ``subject_words`` only in the sender, the recipients (To, Cc,
    Bcc) and the subject. A word is matched as the run of tokens it spells ("jane@acme.com"
    is jane, acme, com in a row), never read as query syntax. ``after`` is inclusive and
    ``before`` exclusive, both naive UTC like ``Message.created_at``. ``scope`` keeps out
    the mail a run's sender did not take part in (the whole archive by default).
    """

    words: tuple[str, ...] = ()
    sender_words: tuple[str, ...] = ()
    recipient_words: tuple[str, ...] = ()
    subject_words: tuple[str, ...] = ()
    direction: str | None = None
    after: datetime.datetime | None = None
    before: datetime.datetime | None = None
    has_attachment: bool | None = None
    scope: MailScope = WHOLE_ARCHIVE

    def fields(self) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
        """Each searched field (None for any) with the words it must hold; fields without
        words are left out."""
        return tuple(
            (field, words)
            for field, words in (
                (None, self.words),
                ("sender", self.sender_words),
                ("recipients", self.recipient_words),
                ("subject", self.subject_words),
            )
            if words
        )


# Full-text search is FTS5 on SQLite and a tsvector on PostgreSQL, neither of which
# peewee's query builder speaks: plain SQL, one builder per database.
_PG_WEIGHTS = {"sender": "A", "recipients": "B", "subject": "C"}
# A tsquery's text quotes each lexeme ('it''s'); tagging each quoted lexeme with a weight
# restricts it to one field without ever parsing the user's text as tsquery syntax.
_PG_LEXEME = "'''((?:[^'']|'''')*)'''"


def _row_filters(
    criteria: SearchCriteria, p: str, *, agent_by_index: bool = True
) -> tuple[list[str], list[Any]]:
    # agent_id + 0 is the same test, which no index can answer.
    agent = "message.agent_id" if agent_by_index else "message.agent_id + 0"
    clauses = [f"{agent} = {p}", "message.status <> 'refused'"]
    params: list[Any] = []
    if criteria.direction is not None:
        clauses.append(f"message.direction = {p}")
        params.append(criteria.direction)
    if criteria.after is not None:
        clauses.append(f"message.created_at >= {p}")
        params.append(criteria.after)
    if criteria.before is not None:
        clauses.append(f"message.created_at < {p}")
        params.append(criteria.before)
    if criteria.has_attachment is not None:
        exists = "EXISTS (SELECT 1 FROM message_attachment a WHERE a.message_id = message.id)"
        clauses.append(exists if criteria.has_attachment else f"NOT {exists}")
    scope = criteria.scope
    if not scope.whole_archive:
        if scope.participant is not None:
            clauses.append(
                f"message.id IN (SELECT message_id FROM message_participant WHERE address = {p})"
            )
            params.append(scope.participant)
        else:  # nobody proven: the run's own message alone
            clauses.append(f"message.id = {p}")
            params.append(scope.message_id if scope.message_id is not None else 0)
    return clauses, params


def _sqlite_search(
    agent_id: int, criteria: SearchCriteria, limit: int
) -> tuple[str, tuple[Any, ...]]:
    p = database.param
    clauses, params = _row_filters(criteria, p)
    fields = criteria.fields()
    if not fields:
        sql = (
            f"SELECT * FROM message WHERE {' AND '.join(clauses)} "
            f"ORDER BY created_at DESC, id DESC LIMIT {p}"
        )
        return sql, (agent_id, *params, limit)
    # Each word is an FTS5 string (in double quotes, inner ones doubled), which the
    # tokenizer turns into a phrase: no operator, column name or bracket in it is read as one.
    # A word for any field is looked for in the text columns only, never in agent's.
    match = " AND ".join(
        [f'agent : "agent{int(agent_id)}"']
        + [
            f"{field or _TEXT_COLUMNS} : " + '"' + word.replace('"', '""') + '"'
            for field, words in fields
            for word in words
        ]
    )
    # Rowids grow with time and FTS5 yields them newest first, lazily: reading stops at
    # the limit however many messages match. CROSS JOIN keeps the full-text index the
    # outer loop, where a date range would tempt SQLite to read the range and sort.
    bounds, bound_params = _rowid_bounds(agent_id, criteria, p)
    sql = (
        "SELECT message.* FROM message_search "
        "CROSS JOIN message ON message.id = message_search.rowid "
        f"WHERE message_search MATCH {p}{bounds} AND {' AND '.join(clauses)} "
        f"ORDER BY message_search.rowid DESC LIMIT {p}"
    )
    return sql, (match, *bound_params, agent_id, *params, limit)


_TEXT_COLUMNS = "{sender recipients subject body}"


# How far back protege's clock may ever step between two messages being stored: the rowid
# bounds below hold as long as it never does more.
CLOCK_SLACK = datetime.timedelta(days=1)
_NO_ROWID = 2**63 - 1


def _rowid_bounds(agent_id: int, criteria: SearchCriteria, p: str) -> tuple[str, list[Any]]:
    # The date range as a range of rowids, so FTS5 starts its newest-first reading at the
    # range's end instead of reading every newer match first. A message stored after
    # another is never dated more than CLOCK_SLACK before it, so any message dated before
    # ``before`` has a smaller id than the first one dated CLOCK_SLACK after it, and any
    # dated from ``after`` on a larger id than the last one dated CLOCK_SLACK before it.
    # Both are found by the (agent, date) index; the dates themselves are still checked.
    bounds, params = "", []
    after = _shifted(criteria.after, -CLOCK_SLACK)
    before = _shifted(criteria.before, CLOCK_SLACK)
    if after is not None:
        bounds += (
            " AND message_search.rowid > COALESCE((SELECT id FROM message "
            f"WHERE agent_id = {p} AND created_at < {p} "
            "ORDER BY created_at DESC, id DESC LIMIT 1), 0)"
        )
        params += [agent_id, after]
    if before is not None:
        bounds += (
            " AND message_search.rowid < COALESCE((SELECT id FROM message "
            f"WHERE agent_id = {p} AND created_at >= {p} "
            f"ORDER BY created_at, id LIMIT 1), {_NO_ROWID})"
        )
        params += [agent_id, before]
    return bounds, params


def _shifted(moment: datetime.datetime | None, delta: datetime.timedelta) -> Any:
    # None (no bound) when there is no date, or the slack goes past the calendar's ends.
    try:
        return None if moment is None else moment + delta
    except OverflowError:
        return None


def _pg_word(p: str, word: str, weight: str | None) -> str:
    # Addresses are indexed whole, by domain and by part (migration 9), so a word is
    # looked up as the parser reads it: "jane@acme.com" and "acme.com" are one lexeme each.
    tsquery = f"phraseto_tsquery('english', {p})"
    if weight is not None:
        tsquery = (
            f"regexp_replace(({tsquery})::text, {_PG_LEXEME}, '''\\1'':{weight}', 'g')::tsquery"
        )
    return f"({tsquery})"


# How many of an agent's newest messages PostgreSQL reads, newest first, for the words of
# a search that are common in the whole table: with the default limit of 10, words in at
# least 1 of 200 of the agent's messages are found there.
PG_RECENT_WINDOW = 2000
# Words the planner expects in fewer messages than this (all agents together) are looked
# up in the full-text index straight away.
PG_RARE_MATCHES = 5000


def _postgresql_matching(agent_id: int, criteria: SearchCriteria, limit: int) -> list[Message]:
    # The planner judges how common a word is from the whole table, not from one agent's
    # mail, so left to itself it may read an agent's whole mailbox backwards for a word
    # that only other agents use (2.2 s at a million messages). Instead: words rare in the
    # whole table go to the full-text index, whose cost follows their matches; common ones
    # are first looked for in the agent's newest messages by the (agent, date) index, and
    # only if too few are there does the full-text index fetch and sort their matches.
    if not criteria.fields():
        sql, params = _postgresql_search(agent_id, criteria, limit)
        return list(Message.raw(sql, *params))
    words_sql, words_params = _postgresql_search(agent_id, criteria, limit, step="words")
    if _pg_expected_matches(criteria) < PG_RARE_MATCHES:
        return list(Message.raw(words_sql, *words_params))
    sql, params = _postgresql_search(agent_id, criteria, limit, step="recent")
    found = list(Message.raw(sql, *params))
    if len(found) == limit:
        return found
    # Common words, rare in this agent's mail: fetching their matches by the full-text
    # index costs less than reading the whole table, whatever the planner estimates.
    with database.atomic() as scope:
        database.execute_sql("SET LOCAL enable_seqscan = off")
        found = list(Message.raw(words_sql, *words_params))
        scope.rollback()  # takes the setting back with it, inside a caller's transaction too
    return found


def _pg_expected_matches(criteria: SearchCriteria) -> float:
    """How many messages of all agents the planner expects to hold the words."""
    parts, params = _pg_words(database.param, criteria)
    sql = f"EXPLAIN (FORMAT JSON) SELECT 1 FROM message WHERE search_vector @@ ({parts})"
    (plan,) = database.execute_sql(sql, params).fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


def _pg_words(p: str, criteria: SearchCriteria) -> tuple[str, list[Any]]:
    parts, params = [], []
    for field, words in criteria.fields():
        for word in words:
            parts.append(_pg_word(p, word, _PG_WEIGHTS[field] if field else None))
            params.append(word)
    return " && ".join(parts), params


def _postgresql_search(
    agent_id: int, criteria: SearchCriteria, limit: int, step: str | None = None
) -> tuple[str, tuple[Any, ...]]:
    """The search as one statement: by default as the planner likes; ``step="recent"``
    looks only at the agent's PG_RECENT_WINDOW newest messages; ``step="words"`` keeps the
    (agent, date) index out, so only the full-text index can find the rows."""
    p = database.param
    clauses, params = _row_filters(criteria, p, agent_by_index=step != "words")
    order = f"ORDER BY created_at DESC, id DESC LIMIT {p}"
    if not criteria.fields():  # no words: the (agent, date) index alone
        sql = f"SELECT * FROM message WHERE {' AND '.join(clauses)} {order}"
        return sql, (agent_id, *params, limit)
    parts, text_params = _pg_words(p, criteria)
    matches = f"message.search_vector @@ ({parts})"
    if step == "recent":
        sql = (
            f"SELECT * FROM (SELECT * FROM message WHERE {' AND '.join(clauses)} {order}) "
            f"AS message WHERE {matches} {order}"
        )
        return sql, (agent_id, *params, PG_RECENT_WINDOW, *text_params, limit)
    sql = f"SELECT * FROM message WHERE {' AND '.join([*clauses, matches])} {order}"
    return sql, (agent_id, *params, *text_params, limit)
