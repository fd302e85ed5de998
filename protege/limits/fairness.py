"""Fair turns: the place a run takes in the queue, so that one sender's backlog cannot
keep anyone else's next mail waiting.

Workers take queued runs by ``turn``, then by arrival. A sender's runs take consecutive
turns after their own runs still queued; a sender with nothing queued starts at the lowest
turn still queued. So the first mail of a quiet sender is taken after at most one run of
each sender ahead of it, however long a flood's backlog is: round robin by sender, kept in
one integer per run and read through two indexed lookups. Runs put back in the queue
(retried, handed back, woken by an approval) keep their turn, and go first.
"""

from __future__ import annotations

from protege.db import database

_FRONT = "SELECT MIN(turn) FROM run WHERE status = 'queued'"
_LAST_OF_SENDER = "SELECT MAX(turn) FROM run WHERE status = 'queued' AND sender_key = {p}"


def next_turn(sender_key: str | None) -> int:
    """The turn a run of ``sender_key`` (None: a scheduled run, a sender of its own) takes
    when it is queued now."""
    (front,) = database.execute_sql(_FRONT).fetchone()
    front = int(front or 0)
    if sender_key is None:
        return front
    (last,) = database.execute_sql(
        _LAST_OF_SENDER.format(p=database.param), (sender_key,)
    ).fetchone()
    return front if last is None else max(front, int(last) + 1)


_BACK = "SELECT MAX(turn) FROM run WHERE status = 'queued'"


def last_turn() -> int:
    """The turn of the last run in the queue (0 when it is empty): a run given a turn past
    it goes after every run queued now."""
    (last,) = database.execute_sql(_BACK).fetchone()
    return int(last or 0)
