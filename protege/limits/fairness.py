"""Fair turns: the place a run takes in the queue, so that one sender's backlog cannot
keep anyone else's next mail waiting.

Workers take queued runs by ``turn``, then by arrival. A lane's runs take consecutive turns
after its runs still queued; a lane with nothing queued starts at the lowest turn still
queued. Each proven sender has a lane of their own, and mail that did not prove its sender
shares one lane per agent (``protege.limits.senders.lane_of``). So the first mail of a
quiet sender is taken after at most one run of each lane ahead of it, however long a
flood's backlog is: round robin, kept in one integer per run and read through two indexed
lookups. Runs put back in the queue (retried, handed back, woken by an approval) keep their
turn, and go first.
"""

from __future__ import annotations

from protege.db import database

_FRONT = "SELECT MIN(turn) FROM run WHERE status = 'queued'"
_LAST_OF_LANE = "SELECT MAX(turn) FROM run WHERE status = 'queued' AND lane = {p}"


def next_turn(lane: str | None) -> int:
    """The turn a run in ``lane`` (``protege.limits.senders.lane_of``; None: a scheduled
    run, a lane of its own) takes when it is queued now."""
    (front,) = database.execute_sql(_FRONT).fetchone()
    front = int(front or 0)
    if lane is None:
        return front
    (last,) = database.execute_sql(_LAST_OF_LANE.format(p=database.param), (lane,)).fetchone()
    return front if last is None else max(front, int(last) + 1)


_BACK = "SELECT MAX(turn) FROM run WHERE status = 'queued'"


def last_turn() -> int:
    """The turn of the last run in the queue (0 when it is empty): a run given a turn past
    it goes after every run queued now."""
    (last,) = database.execute_sql(_BACK).fetchone()
    return int(last or 0)
