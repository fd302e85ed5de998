"""Each IMAP mailbox's checkpoint and lease, in the database.

Exactly one serve process reads a mailbox: the one holding its lease. The lease is taken
only when free or run out, renewed by its holder, and renewed again by every step that moves
the checkpoint. Moving the checkpoint requires still being the holder: a process whose lease
ran out may go on until another takes it over (a slow fetch is no reason to fetch again),
but once another has, it cannot move the checkpoint, so the mail it was storing is rolled
back with it and stored once, by the new holder.
"""

from __future__ import annotations

import datetime
import os
import socket
import uuid
from typing import Any

from protege.db import database
from protege.errors import ProtegeError
from protege.models.base import utcnow
from protege.models.mailboxes import MailboxCheckpoint


class LeaseLost(ProtegeError):
    """Another process holds this mailbox now: what this one was doing is not recorded."""


def holder_name() -> str:
    """A name for one reader, unique among processes and machines (shown by ``status``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def source_of(username: str, host: str, port: int, folder: str) -> str:
    """What a checkpoint is for: the account and folder (a different one begins again)."""
    return f"{username}@{host}:{port}/{folder}"[:600]


def ensure(name: str, source: str) -> MailboxCheckpoint:
    """Mailbox ``name``'s checkpoint, made empty if it has none; begun again (with a
    warning by the caller) when it was for another ``source``."""
    p = database.param
    now = utcnow()
    database.execute_sql(
        f"INSERT INTO mailbox_checkpoint (name, source, last_uid, marked_uid, taken, waiting, "
        f"updated_at) VALUES ({p}, {p}, 0, 0, 0, 0, {p}) ON CONFLICT (name) DO NOTHING",
        (name, source, now),
    )
    return MailboxCheckpoint.get(MailboxCheckpoint.name == name)


def take_lease(name: str, holder: str, seconds: float) -> bool:
    """Whether ``holder`` holds mailbox ``name``'s lease now (taken or renewed)."""
    now = utcnow()
    until = now + datetime.timedelta(seconds=seconds)
    taken = MailboxCheckpoint.update_where(
        {"holder": holder, "lease_expires_at": until},
        "name = {p} AND (holder IS NULL OR holder = {p} OR lease_expires_at < {p})",
        name,
        holder,
        MailboxCheckpoint.lease_expires_at.db_value(now),
    )
    return bool(taken)


def release(name: str, holder: str) -> None:
    """Let mailbox ``name`` go, if ``holder`` still holds it: another process may take it
    at once."""
    MailboxCheckpoint.update_where(
        {"holder": None, "lease_expires_at": None}, "name = {p} AND holder = {p}", name, holder
    )


def _held(name: str, holder: str, seconds: float, changes: dict) -> None:
    """Apply ``changes`` (renewing the lease) if ``holder`` still holds ``name``; else
    ``LeaseLost``, which rolls back the transaction it is part of."""
    now = utcnow()
    changes = {
        **changes,
        "lease_expires_at": now + datetime.timedelta(seconds=seconds),
        "updated_at": now,
    }
    done = MailboxCheckpoint.update_where(changes, "name = {p} AND holder = {p}", name, holder)
    if not done:
        raise LeaseLost(f"mailbox {name} is read by another process now")


def begin(
    name: str,
    holder: str,
    seconds: float,
    *,
    source: str,
    uidvalidity: int,
    last_uid: int,
    first: bool = False,
    begun_at: datetime.datetime | None = None,
) -> None:
    """Set where reading begins: mail above ``last_uid`` of ``uidvalidity`` is taken.
    ``first`` for the first time: ``begun_at`` is then the arrival before which no mail is
    this reader's (None: none is too old)."""
    changes: dict[str, Any] = {
        "source": source,
        "uidvalidity": uidvalidity,
        "last_uid": last_uid,
        "marked_uid": last_uid,
        "passed_over": None,
        "waiting": 0,
        "oldest_waiting_at": None,
    }
    if first:
        changes["begun_at"] = begun_at
    _held(name, holder, seconds, changes)


def advance(
    name: str,
    holder: str,
    seconds: float,
    uid: int,
    arrived_at: datetime.datetime | None,
    *,
    stored: bool,
) -> None:
    """Mail up to ``uid`` is stored (or, with ``stored`` false, was passed over for good):
    in the transaction that stored it, so that the two commit together."""
    p = database.param
    now = utcnow()
    until = now + datetime.timedelta(seconds=seconds)
    # Mail passed over is listed, so that marking what was stored never marks it.
    passed = "passed_over" if stored else f"COALESCE(passed_over, '') || {p}"
    cursor = database.execute_sql(
        f"UPDATE mailbox_checkpoint SET last_uid = {p}, passed_over = {passed}, "
        f"last_arrived_at = COALESCE({p}, last_arrived_at), taken = taken + {p}, "
        f"waiting = CASE WHEN waiting > 0 THEN waiting - 1 ELSE 0 END, "
        f"lease_expires_at = {p}, updated_at = {p} "
        f"WHERE name = {p} AND holder = {p} AND last_uid < {p}",
        (
            uid,
            *(() if stored else (f",{uid}",)),
            arrived_at,
            1 if stored else 0,
            until,
            now,
            name,
            holder,
            uid,
        ),
    )
    if cursor.rowcount != 1:
        raise LeaseLost(f"mailbox {name} is read by another process now")


def marked(name: str, holder: str, seconds: float, uid: int) -> None:
    """Stored mail up to ``uid`` has been marked done in the mailbox (and nothing up to it
    is owed any more)."""
    _held(name, holder, seconds, {"marked_uid": uid, "passed_over": None})


def passed_over(checkpoint: MailboxCheckpoint) -> set[int]:
    """The UIDs above ``checkpoint.marked_uid`` that were passed over, not stored."""
    return {int(part) for part in (checkpoint.passed_over or "").split(",") if part.isdigit()}


def looked(
    name: str,
    holder: str,
    seconds: float,
    *,
    waiting: int,
    oldest_waiting_at: datetime.datetime | None,
    error: str | None = None,
) -> None:
    """What the last look at the mailbox found: how much mail waits, since when."""
    _held(
        name,
        holder,
        seconds,
        {
            "waiting": waiting,
            "oldest_waiting_at": oldest_waiting_at,
            "checked_at": utcnow(),
            "last_error": error,
        },
    )


def failed(name: str, error: str) -> None:
    """Record why mailbox ``name`` could not be read (shown by ``status`` and ``doctor``),
    whoever holds it."""
    MailboxCheckpoint.update_where({"last_error": error[:2000]}, "name = {p}", name)


def standing(config: Any, now: datetime.datetime) -> list[dict[str, Any]]:
    """Where each ``[mail.imap.NAME]`` mailbox of ``config`` stands, for ``protege status``:
    who reads it, when it was last looked at, how much mail waits and for how long (its
    lag), how much was taken, and the last failure."""
    rows = {
        row.name: row
        for row in MailboxCheckpoint.select().where(
            MailboxCheckpoint.name.in_(list(config.mail.imap))
        )
    }
    found = []
    for name, settings in sorted(config.mail.imap.items()):
        row = rows.get(name)
        reading = (
            row is not None
            and row.holder is not None
            and row.lease_expires_at is not None
            and row.lease_expires_at >= now
        )
        waiting = row.waiting if row is not None else 0
        oldest = row.oldest_waiting_at if row is not None else None
        lag = (now - oldest).total_seconds() if waiting and oldest is not None else 0.0
        checked = row.checked_at if row is not None else None
        found.append(
            {
                "mailbox": name,
                "agent": settings.agent,
                "folder": settings.folder,
                "reader": row.holder if reading and row is not None else None,
                "checked_at": checked.isoformat() + "Z" if checked else None,
                "seconds_since_check": (now - checked).total_seconds() if checked else None,
                "waiting": waiting,
                "lag_seconds": max(lag, 0.0),
                "taken": row.taken if row is not None else 0,
                "uidvalidity": row.uidvalidity if row is not None else None,
                "last_uid": row.last_uid if row is not None else 0,
                "last_error": row.last_error if row is not None else None,
            }
        )
    return found
