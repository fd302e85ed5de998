"""One protege process at a time: the lock schema changes and system toolkit syncs take."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import peewee

EXCLUSIVE_LOCK_KEY = 0x70726F74  # "prot"


@contextlib.contextmanager
def exclusive_on(database: peewee.Database | peewee.DatabaseProxy) -> Iterator[None]:
    """A transaction on ``database`` that no other protege process runs at the same time.

    On PostgreSQL it holds an advisory lock, so deploys on several machines may migrate and
    sync together; on SQLite it takes the write lock before reading.
    """
    target = getattr(database, "obj", None) or database
    if isinstance(target, peewee.PostgresqlDatabase):
        with database.atomic():
            database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (EXCLUSIVE_LOCK_KEY,))
            yield
    elif database.transaction_depth() == 0:
        with database.atomic(lock_type="IMMEDIATE"):  # take the write lock before reading
            yield
    else:
        with database.atomic():
            yield
