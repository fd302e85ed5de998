"""Which database protege's records use, here and now.

protege's peewee models are bound to one proxy, ``protege.db.database``. What the proxy
stands for is decided each time it is used, so that two applications in one process each
work on their own database:

1. the database of the work under way in this thread or task (``using``): an application's
   own calls, the threads and loops it starts, and ``with installation.activated():``;
2. else the database ``protege.db.connect`` bound for the whole process, if one is (scripts,
   the command line, tests: what was bound on purpose is not overridden);
3. else the database of the one application open in this process that opened a database
   of its own (``open_installation``).

With several applications open, none of them active and nothing bound for the process, no
database is guessed: ``NoActiveApplication`` says so, and nothing is written to the wrong one.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

import peewee

from protege.errors import ProtegeError

__all__ = [
    "NoActiveApplication",
    "RoutedDatabase",
    "active",
    "closed",
    "hand_over",
    "opened",
    "owned",
    "using",
]


class NoActiveApplication(ProtegeError):
    """protege's records were used outside any application's work while several are open."""


_active: contextvars.ContextVar[peewee.Database | None] = contextvars.ContextVar(
    "protege_database", default=None
)
_lock = threading.Lock()
# The databases applications opened for themselves, in the order they were opened.
_owned: list[peewee.Database] = []


class RoutedDatabase(peewee.DatabaseProxy):
    """A peewee proxy whose database is chosen where it is used (see the module's text);
    ``initialize`` binds the process-wide one."""

    __slots__ = ("_process",)

    def __init__(self) -> None:
        object.__setattr__(self, "_process", None)
        super().__init__()

    def __setattr__(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)

    @property
    def obj(self) -> peewee.Database | None:
        chosen = _active.get()
        if chosen is not None:
            return chosen
        process: peewee.Database | None = object.__getattribute__(self, "_process")
        if process is not None:
            return process
        with _lock:
            owned = list(_owned)
        if len(owned) <= 1:
            return owned[0] if owned else None
        raise NoActiveApplication(
            f"{len(owned)} protege applications are open in this process and this code runs "
            "outside the work of any of them: run it inside `with installation.activated():` "
            "so that protege knows whose database it is for"
        )

    @obj.setter
    def obj(self, value: peewee.Database | None) -> None:
        object.__setattr__(self, "_process", value)

    @property
    def process_database(self) -> peewee.Database | None:
        """The database bound for the whole process (``protege.db.connect``), if any."""
        return object.__getattribute__(self, "_process")


def active() -> peewee.Database | None:
    """The database of the work under way in this thread or task, if an application's."""
    return _active.get()


@contextlib.contextmanager
def using(database: peewee.Database) -> Iterator[peewee.Database]:
    """Within the block, protege's records in this thread or task use ``database``."""
    token = _active.set(database)
    try:
        yield database
    finally:
        _active.reset(token)


def hand_over() -> Callable[[], None]:
    """What a thread started now should call first to work on the database this work uses
    (threads begin with no context of their own): as a ``ThreadPoolExecutor`` initializer."""
    chosen = _active.get()
    if chosen is None:
        return _nothing
    return lambda: _adopt(chosen)


def _adopt(database: peewee.Database) -> None:
    _active.set(database)


def _nothing() -> None:
    return None


def opened(database: peewee.Database) -> None:
    """Record that an application opened ``database`` for itself."""
    with _lock:
        _owned.append(database)


def owned() -> tuple[peewee.Database, ...]:
    """The databases open applications opened for themselves."""
    with _lock:
        return tuple(_owned)


def closed(database: peewee.Database) -> None:
    """Record that the application that opened ``database`` closed it."""
    with _lock:
        if database in _owned:
            _owned.remove(database)
