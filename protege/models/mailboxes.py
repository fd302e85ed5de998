"""Where reading each IMAP mailbox has got to, and which process reads it."""

from __future__ import annotations

import peewee

from protege.models.base import Record, utcnow


class MailboxCheckpoint(Record):
    """One ``[mail.imap.NAME]`` mailbox's durable checkpoint and lease.

    ``source`` names the account and folder read (``user@host:port/folder``): a checkpoint
    for another source is begun again. ``uidvalidity`` and ``last_uid`` say which mail has
    been stored (every UID up to it); ``marked_uid`` how far marking stored mail done has
    caught up, and ``passed_over`` the UIDs above it that were not stored (too large,
    refused), which are never marked. ``begun_at`` is when reading began (less the
    backfill): mail older than that was never this reader's to take. ``holder`` is the
    serve process reading it, until ``lease_expires_at``.
    ``waiting`` and ``oldest_waiting_at`` are the mail found but not yet stored at the last
    look (``checked_at``), for ``protege status``; ``last_error`` the last failure.
    """

    name = peewee.CharField(max_length=64, unique=True)
    source = peewee.CharField(max_length=600)
    uidvalidity = peewee.BigIntegerField(null=True)
    last_uid = peewee.BigIntegerField(default=0)
    marked_uid = peewee.BigIntegerField(default=0)
    passed_over = peewee.TextField(null=True)
    begun_at = peewee.DateTimeField(null=True)
    last_arrived_at = peewee.DateTimeField(null=True)
    taken = peewee.IntegerField(default=0)
    waiting = peewee.IntegerField(default=0)
    oldest_waiting_at = peewee.DateTimeField(null=True)
    checked_at = peewee.DateTimeField(null=True)
    holder = peewee.CharField(max_length=200, null=True)
    lease_expires_at = peewee.DateTimeField(null=True)
    last_error = peewee.TextField(null=True)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "mailbox_checkpoint"
