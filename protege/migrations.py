"""Versioned schema migrations, applied in order by ``protege migrate`` and ``protege sync``.

Each migration is frozen once released: a later change to the schema is a new migration,
never an edit to an old one. DDL is written out (not derived from the models) for that
reason; ``tests/models/test_schema.py`` checks that models and tables agree.
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
from collections.abc import Callable

import attrs
import peewee

from protege.addresses import participant_keys
from protege.dblock import exclusive_on

VERSION_TABLE = "protege_schema_version"


@attrs.frozen
class Migration:
    """One step of the schema's history."""

    version: int
    name: str
    apply: Callable[[peewee.Database | peewee.DatabaseProxy], None]


def _dialect(db: peewee.Database | peewee.DatabaseProxy) -> dict[str, str]:
    if isinstance(getattr(db, "obj", db), peewee.PostgresqlDatabase):
        return {"pk": "SERIAL PRIMARY KEY", "ts": "TIMESTAMP"}
    return {"pk": "INTEGER PRIMARY KEY AUTOINCREMENT", "ts": "TIMESTAMP"}


# Statements end with ";" at the end of a line followed by the next statement's keyword, so
# the ";" inside a trigger's BEGIN ... END does not split it.
_STATEMENT_END = re.compile(r";\s*\n(?=\s*(?:CREATE|ALTER|DROP|INSERT|UPDATE)\b)")


def _run(db: peewee.Database | peewee.DatabaseProxy, statements: str) -> None:
    for statement in _STATEMENT_END.split(statements.format(**_dialect(db))):
        if statement.strip():
            db.execute_sql(statement)


def _0001_agents_and_toolkits(db: peewee.Database | peewee.DatabaseProxy) -> None:
    _run(
        db,
        """
        CREATE TABLE agent (
            id {pk},
            name VARCHAR(200) NOT NULL UNIQUE,
            address VARCHAR(320) NOT NULL UNIQUE,
            instructions TEXT NOT NULL DEFAULT '',
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL
        );
        CREATE TABLE agent_access_rule (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            kind VARCHAR(5) NOT NULL CHECK (kind IN ('allow', 'deny')),
            pattern VARCHAR(320) NOT NULL
        );
        CREATE INDEX agent_access_rule_agent_id ON agent_access_rule (agent_id);
        CREATE TABLE toolkit (
            id {pk},
            name VARCHAR(200) NOT NULL UNIQUE,
            description TEXT NOT NULL DEFAULT '',
            member_tool_ids TEXT NOT NULL DEFAULT '[]',
            system_key VARCHAR(32) UNIQUE,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL
        );
        CREATE TABLE agent_toolkit (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            toolkit_id INTEGER NOT NULL REFERENCES toolkit (id) ON DELETE CASCADE,
            allow_proactive BOOLEAN NOT NULL DEFAULT FALSE,
            created_at {ts} NOT NULL,
            UNIQUE (agent_id, toolkit_id)
        );
        CREATE INDEX agent_toolkit_toolkit_id ON agent_toolkit (toolkit_id);
        CREATE TABLE agent_toolkit_rule (
            id {pk},
            grant_id INTEGER NOT NULL REFERENCES agent_toolkit (id) ON DELETE CASCADE,
            kind VARCHAR(5) NOT NULL CHECK (kind IN ('allow', 'deny')),
            pattern VARCHAR(320) NOT NULL
        );
        CREATE INDEX agent_toolkit_rule_grant_id ON agent_toolkit_rule (grant_id, kind);
        CREATE INDEX agent_toolkit_rule_pattern ON agent_toolkit_rule (pattern)
        """,
    )


def _0002_messages_and_runs(db: peewee.Database | peewee.DatabaseProxy) -> None:
    _run(
        db,
        """
        CREATE TABLE message (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            direction VARCHAR(8) NOT NULL CHECK (direction IN ('inbound', 'outbound')),
            sender VARCHAR(998) NOT NULL,
            to_addresses TEXT NOT NULL DEFAULT '[]',
            cc_addresses TEXT NOT NULL DEFAULT '[]',
            subject TEXT NOT NULL DEFAULT '',
            body_text TEXT NOT NULL DEFAULT '',
            message_id VARCHAR(998) NOT NULL,
            in_reply_to VARCHAR(998),
            reference_ids TEXT NOT NULL DEFAULT '[]',
            thread_key VARCHAR(998) NOT NULL,
            created_at {ts} NOT NULL
        );
        CREATE INDEX message_agent_thread ON message (agent_id, thread_key);
        CREATE INDEX message_message_id ON message (message_id);
        CREATE TABLE responsibility (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            name VARCHAR(200) NOT NULL,
            prompt TEXT NOT NULL,
            schedule VARCHAR(200),
            created_at {ts} NOT NULL,
            UNIQUE (agent_id, name)
        );
        CREATE TABLE run (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            kind VARCHAR(9) NOT NULL CHECK (kind IN ('reply', 'scheduled')),
            message_id INTEGER REFERENCES message (id) ON DELETE CASCADE,
            responsibility_id INTEGER REFERENCES responsibility (id) ON DELETE CASCADE,
            status VARCHAR(8) NOT NULL
                CHECK (status IN ('queued', 'running', 'done', 'failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            correlation_id VARCHAR(64) NOT NULL UNIQUE,
            error TEXT,
            created_at {ts} NOT NULL,
            started_at {ts},
            finished_at {ts},
            CHECK ((message_id IS NULL) <> (responsibility_id IS NULL))
        );
        CREATE INDEX run_status ON run (status, id);
        CREATE INDEX run_message_id ON run (message_id);
        CREATE TABLE event (
            id {pk},
            run_id INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            kind VARCHAR(32) NOT NULL,
            payload TEXT NOT NULL,
            created_at {ts} NOT NULL,
            UNIQUE (run_id, seq)
        )
        """,
    )


def _0003_mail(db: peewee.Database | peewee.DatabaseProxy) -> None:
    _run(
        db,
        """
        CREATE TABLE blob (
            id {pk},
            sha256 CHAR(64) NOT NULL,
            size INTEGER NOT NULL,
            content_type VARCHAR(255) NOT NULL,
            filename VARCHAR(255) NOT NULL,
            agent_id INTEGER REFERENCES agent (id) ON DELETE SET NULL,
            created_at {ts} NOT NULL
        );
        CREATE INDEX blob_sha256 ON blob (sha256);
        ALTER TABLE message ADD COLUMN status VARCHAR(8) NOT NULL DEFAULT 'accepted';
        ALTER TABLE message ADD COLUMN flags TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE message ADD COLUMN reply_to VARCHAR(998);
        ALTER TABLE message ADD COLUMN bcc_addresses TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE message ADD COLUMN raw_blob_id INTEGER REFERENCES blob (id);
        ALTER TABLE message ADD COLUMN run_id INTEGER REFERENCES run (id) ON DELETE SET NULL;
        ALTER TABLE message ADD COLUMN tool_call_id VARCHAR(200);
        ALTER TABLE message ADD COLUMN delivery_error TEXT;
        CREATE UNIQUE INDEX message_sent_by_call ON message (run_id, tool_call_id);
        CREATE TABLE message_attachment (
            id {pk},
            message_id INTEGER NOT NULL REFERENCES message (id) ON DELETE CASCADE,
            blob_id INTEGER NOT NULL REFERENCES blob (id),
            position INTEGER NOT NULL,
            UNIQUE (message_id, position)
        );
        CREATE INDEX message_attachment_blob_id ON message_attachment (blob_id)
        """,
    )
    # Addresses are indexed whole and, with @ and . as spaces, as words: "jane" finds
    # jane@acme.com on PostgreSQL as FTS5's tokenizer makes it do on SQLite.
    if isinstance(getattr(db, "obj", db), peewee.PostgresqlDatabase):
        _run(
            db,
            """
            ALTER TABLE message ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
                to_tsvector('english', sender || ' ' || to_addresses || ' ' || cc_addresses
                    || ' ' || translate(sender || ' ' || to_addresses || ' ' || cc_addresses,
                                        '@.', '  ')
                    || ' ' || subject || ' ' || body_text)
            ) STORED;
            CREATE INDEX message_search ON message USING GIN (search_vector)
            """,
        )
    else:
        _run(
            db,
            """
            CREATE VIRTUAL TABLE message_search USING fts5(
                participants, subject, body, tokenize = 'porter unicode61'
            );
            CREATE TRIGGER message_search_insert AFTER INSERT ON message BEGIN
                INSERT INTO message_search (rowid, participants, subject, body) VALUES (
                    new.id, new.sender || ' ' || new.to_addresses || ' ' || new.cc_addresses,
                    new.subject, new.body_text);
            END;
            CREATE TRIGGER message_search_delete AFTER DELETE ON message BEGIN
                DELETE FROM message_search WHERE rowid = old.id;
            END
            """,
        )


def _0004_reply_to_lists_and_refusals(db: peewee.Database | peewee.DatabaseProxy) -> None:
    _run(
        db,
        """
        ALTER TABLE message ADD COLUMN reply_to_addresses TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE message ADD COLUMN refused_recipients TEXT NOT NULL DEFAULT '[]'
        """,
    )
    kept = db.execute_sql("SELECT id, reply_to FROM message WHERE reply_to IS NOT NULL")
    for row_id, reply_to in list(kept):
        db.execute_sql(
            f"UPDATE message SET reply_to_addresses = {db.param} WHERE id = {db.param}",
            (json.dumps([reply_to]), row_id),
        )
    _run(db, "ALTER TABLE message DROP COLUMN reply_to")


SEARCHED_BODY_CHARACTERS = 100_000


def _0005_bounded_search_text(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # PostgreSQL refuses a tsvector over 1 MB, and with it the whole message: index a
    # bounded prefix of each text instead. SQLite's FTS5 has no such limit.
    if not isinstance(getattr(db, "obj", db), peewee.PostgresqlDatabase):
        return
    n = SEARCHED_BODY_CHARACTERS
    _run(
        db,
        f"""
        DROP INDEX message_search;
        ALTER TABLE message DROP COLUMN search_vector;
        ALTER TABLE message ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
            to_tsvector('english', left(sender || ' ' || to_addresses || ' ' || cc_addresses
                || ' ' || translate(sender || ' ' || to_addresses || ' ' || cc_addresses,
                                    '@.', '  '), {n})
                || ' ' || left(subject, {n // 10}) || ' ' || left(body_text, {n}))
        ) STORED;
        CREATE INDEX message_search ON message USING GIN (search_vector)
        """,
    )


def _0006_responsibilities_on_a_schedule(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # A run queued for a due time records it; the unique key lets only one run stand for
    # each due time, however many schedulers race for it.
    _run(
        db,
        """
        ALTER TABLE responsibility ADD COLUMN timezone VARCHAR(64) NOT NULL DEFAULT 'UTC';
        ALTER TABLE responsibility ADD COLUMN enabled BOOLEAN NOT NULL DEFAULT TRUE;
        ALTER TABLE responsibility ADD COLUMN scheduled_from {ts};
        ALTER TABLE responsibility ADD COLUMN updated_at {ts};
        ALTER TABLE run ADD COLUMN due_at {ts};
        ALTER TABLE run ADD COLUMN settled_at {ts};
        CREATE UNIQUE INDEX run_responsibility_due ON run (responsibility_id, due_at)
        """,
    )
    # Responsibilities written before schedules were read start counting from now: nothing
    # runs for due times that passed while no scheduler existed.
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    db.execute_sql(
        f"UPDATE responsibility SET scheduled_from = {db.param}, updated_at = created_at", (now,)
    )


# The statuses each migration let run.status hold: 7 added leases and approvals, 17 holds.
_STATUSES_2 = ("queued", "running", "done", "failed")
_STATUSES_7 = (*_STATUSES_2, "cancelled", "waiting")
RUN_STATUSES = (*_STATUSES_7, "held")


def _status_check(statuses: tuple[str, ...]) -> str:
    return "CHECK (status IN (" + ", ".join(f"'{s}'" for s in statuses) + "))"


def _allow_run_statuses(
    db: peewee.Database | peewee.DatabaseProxy, before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """Let ``run.status`` hold every status of ``after`` (it held those of ``before``)."""
    wider = _status_check(after)
    if isinstance(getattr(db, "obj", db), peewee.PostgresqlDatabase):
        _run(
            db,
            f"""
            ALTER TABLE run ALTER COLUMN status TYPE VARCHAR(16);
            ALTER TABLE run DROP CONSTRAINT run_status_check;
            ALTER TABLE run ADD CONSTRAINT run_status_check {wider}
            """,
        )
        return
    # SQLite cannot alter a CHECK constraint. Widening one changes nothing stored (every row
    # meets the wider check), which is the case SQLite documents as safe to make by editing
    # the schema text itself: https://sqlite.org/lang_altertable.html#otheralter
    (table,) = db.execute_sql("SELECT sql FROM sqlite_master WHERE name = 'run'").fetchone()
    narrower = _status_check(before)
    if narrower not in table:
        raise RuntimeError("the run table's status check is not the one migrations wrote")
    (version,) = db.execute_sql("PRAGMA schema_version").fetchone()
    db.execute_sql("PRAGMA writable_schema = ON")
    try:
        db.execute_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'run'",
            (table.replace(narrower, wider),),
        )
        db.execute_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        db.execute_sql("PRAGMA writable_schema = OFF")


def _0007_leases_and_pending_deliveries(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # A running run is held by a lease its worker renews; a run whose lease ran out is
    # taken over, and an operator may cancel it. Mail a run sends waits as pending until
    # the transport has it.
    _allow_run_statuses(db, _STATUSES_2, _STATUSES_7)
    _run(
        db,
        """
        ALTER TABLE run ADD COLUMN lease_owner VARCHAR(64);
        ALTER TABLE run ADD COLUMN lease_expires_at {ts};
        ALTER TABLE run ADD COLUMN cancel_requested_at {ts};
        CREATE INDEX run_lease ON run (status, lease_expires_at);
        ALTER TABLE message ADD COLUMN delivery_attempts INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE message ADD COLUMN next_attempt_at {ts};
        ALTER TABLE message ADD COLUMN pending_recipients TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE message ADD COLUMN delivery_lease_expires_at {ts};
        CREATE INDEX message_pending ON message (status, next_attempt_at)
        """,
    )


def _0008_operators_and_audit(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Operators sign in to the dashboard; the audit log records every change to access made
    # by an operator or from the command line. Both live in the core so that `protege
    # audit` shows the command line's changes beside the dashboard's.
    _run(
        db,
        """
        CREATE TABLE operator (
            id {pk},
            name VARCHAR(200) NOT NULL UNIQUE,
            password_hash VARCHAR(500) NOT NULL,
            created_at {ts} NOT NULL
        );
        CREATE TABLE audit_entry (
            id {pk},
            at {ts} NOT NULL,
            actor VARCHAR(300) NOT NULL,
            action VARCHAR(200) NOT NULL,
            subject_kind VARCHAR(32) NOT NULL,
            subject VARCHAR(500) NOT NULL,
            before TEXT,
            after TEXT
        );
        CREATE INDEX audit_entry_at ON audit_entry (at)
        """,
    )


def _0009_search_by_field_newest_first(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Search filters by sender, recipients and subject, so each is indexed on its own (an
    # FTS5 column on SQLite, a weight on PostgreSQL: A sender, B recipients, C subject, D
    # body). The b-tree on (agent, date) lets the newest matches be read in order and the
    # reading stop at the limit, instead of every match being fetched and sorted. On
    # SQLite the agent is a token of its own ("agent17" in column agent), so the full-text
    # index itself skips other agents' mail rather than the search reading past it.
    if isinstance(getattr(db, "obj", db), peewee.PostgresqlDatabase):
        n = SEARCHED_BODY_CHARACTERS
        recipients = "to_addresses || ' ' || cc_addresses || ' ' || bcc_addresses"

        def addresses(text: str) -> str:
            # Each address whole (jane@acme.com), its domain whole (acme.com) and every part
            # (jane, acme, com): whichever of these a query word is, it is one lexeme here.
            return (
                f"{text} || ' ' || translate({text}, '@', ' ') "
                f"|| ' ' || translate({text}, '@.', '  ')"
            )

        _run(
            db,
            f"""
            DROP INDEX message_search;
            ALTER TABLE message DROP COLUMN search_vector;
            ALTER TABLE message ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('english', left({addresses("sender")}, {n})), 'A')
                || setweight(to_tsvector('english', left({addresses(recipients)}, {n})), 'B')
                || setweight(to_tsvector('english', left(subject, {n // 10})), 'C')
                || to_tsvector('english', left(body_text, {n}))
            ) STORED;
            CREATE INDEX message_search ON message USING GIN (search_vector);
            CREATE INDEX message_agent_created ON message (agent_id, created_at, id)
            """,
        )
        return
    _run(
        db,
        """
        DROP TRIGGER message_search_insert;
        DROP TRIGGER message_search_delete;
        DROP TABLE message_search;
        CREATE VIRTUAL TABLE message_search USING fts5(
            agent, sender, recipients, subject, body, tokenize = 'porter unicode61'
        );
        CREATE TRIGGER message_search_insert AFTER INSERT ON message BEGIN
            INSERT INTO message_search (rowid, agent, sender, recipients, subject, body) VALUES (
                new.id, 'agent' || new.agent_id, new.sender,
                new.to_addresses || ' ' || new.cc_addresses || ' ' || new.bcc_addresses,
                new.subject, new.body_text);
        END;
        CREATE TRIGGER message_search_delete AFTER DELETE ON message BEGIN
            DELETE FROM message_search WHERE rowid = old.id;
        END;
        INSERT INTO message_search (rowid, agent, sender, recipients, subject, body)
            SELECT id, 'agent' || agent_id, sender,
                to_addresses || ' ' || cc_addresses || ' ' || bcc_addresses,
                subject, body_text FROM message;
        CREATE INDEX message_agent_created ON message (agent_id, created_at, id)
        """,
    )


def _0010_approvals(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # A grant may make its tools wait for an approver's yes; each waiting call is one
    # approval, matched to the answer by a secret token.
    _run(
        db,
        """
        ALTER TABLE agent_toolkit ADD COLUMN approval_by TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE agent_toolkit ADD COLUMN approval_to TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE agent_toolkit ADD COLUMN approval_timeout INTEGER NOT NULL DEFAULT 259200;
        ALTER TABLE agent_toolkit ADD COLUMN self_approval BOOLEAN NOT NULL DEFAULT TRUE;
        CREATE TABLE approval (
            id {pk},
            token VARCHAR(64) NOT NULL UNIQUE,
            run_id INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
            call_id VARCHAR(200) NOT NULL,
            tool VARCHAR(64) NOT NULL,
            arguments TEXT NOT NULL,
            approvers TEXT NOT NULL DEFAULT '[]',
            notified TEXT NOT NULL DEFAULT '[]',
            requested_by VARCHAR(320),
            status VARCHAR(16) NOT NULL DEFAULT 'pending',
            reason TEXT,
            answered_by VARCHAR(320),
            created_at {ts} NOT NULL,
            expires_at {ts} NOT NULL,
            answered_at {ts},
            self_approval BOOLEAN NOT NULL DEFAULT TRUE,
            settled BOOLEAN NOT NULL DEFAULT FALSE
        );
        CREATE UNIQUE INDEX approval_run_call ON approval (run_id, call_id);
        CREATE INDEX approval_status ON approval (status, expires_at)
        """,
    )


def _0011_sender_authentication(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Mail stored before protege verified senders proves nobody (authentication NULL).
    _run(
        db,
        """
        ALTER TABLE message ADD COLUMN authentication TEXT;
        ALTER TABLE message ADD COLUMN sender_authenticated BOOLEAN NOT NULL DEFAULT FALSE
        """,
    )


def _0012_mail_scoped_to_its_participants(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Tools show a sender only the mail they took part in: each message's participants
    # (From, To, Cc) by routing key, found by index either way round. A grant may open the
    # whole archive instead. Files get an unguessable token; the files stored before it
    # keep answering to their number too, which earlier runs and approvals may hold.
    _run(
        db,
        """
        CREATE TABLE message_participant (
            id {pk},
            message_id INTEGER NOT NULL REFERENCES message (id) ON DELETE CASCADE,
            address VARCHAR(320) NOT NULL
        );
        CREATE UNIQUE INDEX message_participant_message
            ON message_participant (message_id, address);
        CREATE INDEX message_participant_address ON message_participant (address, message_id);
        ALTER TABLE agent_toolkit ADD COLUMN whole_archive BOOLEAN NOT NULL DEFAULT FALSE;
        ALTER TABLE blob ADD COLUMN token VARCHAR(64);
        ALTER TABLE blob ADD COLUMN numbered BOOLEAN NOT NULL DEFAULT FALSE;
        UPDATE blob SET numbered = TRUE
        """,
    )
    p = db.param
    last = 0
    while True:  # a thousand messages at a time, so a large archive never sits in memory
        rows = db.execute_sql(
            "SELECT id, sender, to_addresses, cc_addresses FROM message "
            f"WHERE id > {p} ORDER BY id LIMIT 1000",
            (last,),
        ).fetchall()
        if not rows:
            break
        found = [
            (message_id, address)
            for message_id, sender, to, cc in rows
            for address in participant_keys(sender, json.loads(to or "[]"), json.loads(cc or "[]"))
        ]
        for start in range(0, len(found), 500):
            chunk = found[start : start + 500]
            db.execute_sql(
                "INSERT INTO message_participant (message_id, address) VALUES "
                + ", ".join([f"({p}, {p})"] * len(chunk)),
                [value for row in chunk for value in row],
            )
        last = rows[-1][0]
    for (blob_id,) in db.execute_sql("SELECT id FROM blob").fetchall():
        db.execute_sql(
            f"UPDATE blob SET token = {p} WHERE id = {p}", (secrets.token_urlsafe(18), blob_id)
        )
    db.execute_sql("CREATE UNIQUE INDEX blob_token ON blob (token)")


def _0013_used_tokens(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Tokens of signed webhook requests already taken (Mailgun's), kept only while a replay
    # would still be fresh: every process serving the installation refuses a second arrival.
    _run(
        db,
        """
        CREATE TABLE used_token (
            id {pk},
            issuer VARCHAR(32) NOT NULL,
            token VARCHAR(200) NOT NULL,
            expires_at {ts} NOT NULL
        );
        CREATE UNIQUE INDEX used_token_issuer_token ON used_token (issuer, token);
        CREATE INDEX used_token_expires_at ON used_token (expires_at)
        """,
    )


def _0015_archived_agents_and_revocable_sessions(
    db: peewee.Database | peewee.DatabaseProxy,
) -> None:
    # An archived agent keeps its mail and runs but is hidden and receives nothing. An
    # operator's sessions hold the generation they were made in: raising it (logging out)
    # ends every session made before, wherever its cookie still is.
    _run(
        db,
        """
        ALTER TABLE agent ADD COLUMN archived_at {ts};
        ALTER TABLE operator ADD COLUMN session_generation INTEGER NOT NULL DEFAULT 0
        """,
    )


def _0016_approvals_required_per_agent(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # An operator may make one tool wait for approval on one agent whatever grants it.
    _run(
        db,
        """
        CREATE TABLE agent_tool_approval (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            tool_id VARCHAR(64) NOT NULL,
            approval_by TEXT NOT NULL DEFAULT '[]',
            approval_to TEXT NOT NULL DEFAULT '[]',
            approval_timeout INTEGER NOT NULL DEFAULT 259200,
            self_approval BOOLEAN NOT NULL DEFAULT TRUE,
            created_at {ts} NOT NULL
        );
        CREATE UNIQUE INDEX agent_tool_approval_agent_id_tool_id
            ON agent_tool_approval (agent_id, tool_id)
        """,
    )


def _0017_limits(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # Guardrails. A run counts against its sender's and agent's windows from when it was
    # admitted (queued, or released from being held); workers take queued runs in turns, so
    # one sender's backlog waits behind everyone else's next mail. Tokens and money spent
    # are added up per agent, day and model as answers come, so a limit is one small read.
    # A sender's held runs are found through an index of held runs alone: each new mail of
    # a flood looks them up, and a scan of them all would make the flood quadratic.
    _allow_run_statuses(db, _STATUSES_7, RUN_STATUSES)
    _run(
        db,
        """
        ALTER TABLE run ADD COLUMN sender_key VARCHAR(320);
        ALTER TABLE run ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE run ADD COLUMN admitted_at {ts};
        ALTER TABLE run ADD COLUMN held_until {ts};
        ALTER TABLE run ADD COLUMN held_reason TEXT;
        ALTER TABLE run ADD COLUMN released_by VARCHAR(200);
        ALTER TABLE run ADD COLUMN lane VARCHAR(320);
        UPDATE run SET admitted_at = created_at;
        CREATE INDEX run_turn ON run (status, turn, id);
        CREATE INDEX run_sender_admitted ON run (agent_id, sender_key, admitted_at);
        CREATE INDEX run_agent_admitted ON run (agent_id, admitted_at);
        CREATE INDEX run_queued_lane ON run (status, lane, turn);
        CREATE INDEX run_held_sender ON run (agent_id, sender_key, held_until)
            WHERE status = 'held';
        CREATE TABLE usage_day (
            id {pk},
            agent_id INTEGER NOT NULL REFERENCES agent (id) ON DELETE CASCADE,
            day VARCHAR(10) NOT NULL,
            model VARCHAR(200) NOT NULL,
            responses INTEGER NOT NULL DEFAULT 0,
            prompt_tokens BIGINT NOT NULL DEFAULT 0,
            completion_tokens BIGINT NOT NULL DEFAULT 0,
            cost_micros BIGINT NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX usage_day_agent_day_model ON usage_day (agent_id, day, model);
        CREATE INDEX usage_day_day ON usage_day (day);
        CREATE TABLE limit_notice (
            id {pk},
            audience VARCHAR(16) NOT NULL,
            agent_id INTEGER REFERENCES agent (id) ON DELETE CASCADE,
            subject VARCHAR(320) NOT NULL,
            window_start {ts} NOT NULL,
            created_at {ts} NOT NULL
        );
        CREATE UNIQUE INDEX limit_notice_once
            ON limit_notice (audience, agent_id, subject, window_start);
        CREATE TABLE circuit (
            id {pk},
            endpoint VARCHAR(400) NOT NULL UNIQUE,
            state VARCHAR(9) NOT NULL DEFAULT 'closed',
            failures INTEGER NOT NULL DEFAULT 0,
            opened INTEGER NOT NULL DEFAULT 0,
            failing_since {ts},
            open_until {ts},
            last_error TEXT,
            updated_at {ts} NOT NULL
        )
        """,
    )


def _0018_tool_listings(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # What a plugin listed of tools that live outside the process (an MCP server's), at the
    # last sync: every process offers what was recorded, so serving never waits on, nor
    # changes with, a server being up. One row per plugin and key, rewritten by each sync.
    _run(
        db,
        """
        CREATE TABLE tool_listing (
            id {pk},
            distribution VARCHAR(200) NOT NULL,
            key VARCHAR(200) NOT NULL,
            data TEXT NOT NULL,
            recorded_at {ts} NOT NULL
        );
        CREATE UNIQUE INDEX tool_listing_distribution_key ON tool_listing (distribution, key)
        """,
    )


def _0019_mailbox_checkpoints(db: peewee.Database | peewee.DatabaseProxy) -> None:
    # One row per [mail.imap.NAME] mailbox: where reading it has got to (UIDVALIDITY and the
    # last UID stored, moved forward in the transaction that stores the mail), how far its
    # done-marking has caught up (and the mail passed over since, never to be marked), and
    # which serve process reads it (a lease, renewed while it lives). BIGINT: UIDs and
    # UIDVALIDITY are unsigned 32-bit numbers.
    _run(
        db,
        """
        CREATE TABLE mailbox_checkpoint (
            id {pk},
            name VARCHAR(64) NOT NULL,
            source VARCHAR(600) NOT NULL,
            uidvalidity BIGINT,
            last_uid BIGINT NOT NULL DEFAULT 0,
            marked_uid BIGINT NOT NULL DEFAULT 0,
            passed_over TEXT,
            begun_at {ts},
            last_arrived_at {ts},
            taken INTEGER NOT NULL DEFAULT 0,
            waiting INTEGER NOT NULL DEFAULT 0,
            oldest_waiting_at {ts},
            checked_at {ts},
            holder VARCHAR(200),
            lease_expires_at {ts},
            last_error TEXT,
            updated_at {ts} NOT NULL
        );
        CREATE UNIQUE INDEX mailbox_checkpoint_name ON mailbox_checkpoint (name)
        """,
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "agents and toolkits", _0001_agents_and_toolkits),
    Migration(2, "messages and runs", _0002_messages_and_runs),
    Migration(3, "mail: blobs, attachments, search", _0003_mail),
    Migration(4, "mail: reply-to lists, refused recipients", _0004_reply_to_lists_and_refusals),
    Migration(5, "search indexes a bounded prefix of long mail", _0005_bounded_search_text),
    Migration(6, "responsibilities on a schedule", _0006_responsibilities_on_a_schedule),
    Migration(7, "run leases, pending deliveries", _0007_leases_and_pending_deliveries),
    Migration(8, "operators and the audit log", _0008_operators_and_audit),
    Migration(9, "search by field, newest first", _0009_search_by_field_newest_first),
    Migration(10, "approval by email", _0010_approvals),
    Migration(11, "sender authentication", _0011_sender_authentication),
    Migration(12, "mail scoped to its participants", _0012_mail_scoped_to_its_participants),
    Migration(13, "used tokens of signed webhooks", _0013_used_tokens),
    Migration(
        15, "archived agents, revocable sessions", _0015_archived_agents_and_revocable_sessions
    ),
    Migration(16, "approvals required per agent", _0016_approvals_required_per_agent),
    Migration(17, "limits, held runs, fair turns, usage, circuit", _0017_limits),
    Migration(18, "tool listings recorded at sync", _0018_tool_listings),
    Migration(19, "IMAP mailbox checkpoints and leases", _0019_mailbox_checkpoints),
)


def _ensure_version_table(db: peewee.Database | peewee.DatabaseProxy) -> None:
    db.execute_sql(
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
        "version INTEGER PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )


def applied_versions(db: peewee.Database | peewee.DatabaseProxy) -> set[int]:
    """The versions recorded as applied (empty for a database protege never touched)."""
    if VERSION_TABLE not in db.get_tables():
        return set()
    return {row[0] for row in db.execute_sql(f"SELECT version FROM {VERSION_TABLE}")}


def pending(db: peewee.Database | peewee.DatabaseProxy) -> list[Migration]:
    """The migrations not yet applied, in order."""
    done = applied_versions(db)
    return [m for m in MIGRATIONS if m.version not in done]


def apply_pending(db: peewee.Database | peewee.DatabaseProxy) -> list[str]:
    """Apply each pending migration in its own transaction; returns their names.

    Safe to run from several processes at once: each migration is re-checked inside
    ``exclusive_on(db)``, which lets one process at a time in.
    """
    _ensure_version_table(db)
    applied = []
    for migration in pending(db):
        with exclusive_on(db):
            if migration.version in applied_versions(db):
                continue  # another process applied it while we waited
            migration.apply(db)
            db.execute_sql(
                f"INSERT INTO {VERSION_TABLE} (version, name, applied_at) "
                f"VALUES ({db.param}, {db.param}, {db.param})",
                (migration.version, migration.name, datetime.datetime.now(datetime.UTC)),
            )
        applied.append(f"{migration.version:04d} {migration.name}")
    return applied
