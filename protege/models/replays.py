"""Tokens of signed requests already taken, so that a captured request cannot be sent again.

A webhook signed over a timestamp and a one-time token (Mailgun's) is fresh for a window;
within it, only its first arrival counts. The tokens live in the database, so every process
serving the same installation, and a process started again, refuses the second arrival.
"""

from __future__ import annotations

import datetime

import peewee

from protege.db import database
from protege.models.base import Record, utcnow


class UsedToken(Record):
    """A one-time token a signed request carried (``issuer`` says whose, as ``mailgun``),
    kept until ``expires_at``, when its signature is too old to be taken anyway."""

    issuer = peewee.CharField(max_length=32)
    token = peewee.CharField(max_length=200)
    expires_at = peewee.DateTimeField()

    class Meta:
        table_name = "used_token"
        indexes = ((("issuer", "token"), True),)

    @classmethod
    def first_use(cls, issuer: str, token: str, expires_at: datetime.datetime) -> bool:
        """Whether ``token`` of ``issuer`` arrives for the first time (then remembered until
        ``expires_at``, a naive UTC time); False for a token already taken. Tokens whose
        time is past are forgotten on the way."""
        cls.delete().where(cls.expires_at < utcnow()).execute()
        try:
            with database.atomic():
                cls.create(issuer=issuer, token=token, expires_at=expires_at)
        except peewee.IntegrityError:
            return False
        return True

    @classmethod
    def forget(cls, issuer: str, token: str) -> None:
        """Take back ``first_use``: the request it let in was not taken after all (the
        mail could not be stored, or was refused), so the sender's retry must be let in."""
        cls.delete().where((cls.issuer == issuer) & (cls.token == token)).execute()
