"""How things stand: the runs and the mail waiting on workers, counted per agent (where
the limits stand is ``protege.limits.standing``)."""

from __future__ import annotations

import datetime

from protege.db import database

_RUNS_SQL = (
    "SELECT agent_id, "
    "SUM(CASE WHEN status = 'queued' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status = 'running' AND lease_expires_at >= {p} THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < {p}) "
    "THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status = 'waiting' THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status = 'held' THEN 1 ELSE 0 END) "
    "FROM run WHERE status IN ('queued', 'running', 'failed', 'waiting', 'held') "
    "GROUP BY agent_id"
)
_MAIL_SQL = "SELECT agent_id, COUNT(*) FROM message WHERE status = 'pending' GROUP BY agent_id"


def overview(now: datetime.datetime) -> dict[int, dict[str, int]]:
    """Per agent id: its queued, running, stuck (running, lease expired before ``now``),
    failed, waiting (on an approval) and held (over a limit) runs, and its pending mail.
    Agents with none of these are left out."""
    found: dict[int, dict[str, int]] = {}

    def row(agent_id: int) -> dict[str, int]:
        return found.setdefault(
            agent_id,
            {
                "queued": 0,
                "running": 0,
                "stuck": 0,
                "failed": 0,
                "waiting": 0,
                "held": 0,
                "pending_mail": 0,
            },
        )

    p = database.param
    names = ("queued", "running", "stuck", "failed", "waiting", "held")
    for agent_id, *counts in database.execute_sql(_RUNS_SQL.format(p=p), (now, now)).fetchall():
        row(agent_id).update({name: int(n) for name, n in zip(names, counts, strict=True)})
    for agent_id, pending in database.execute_sql(_MAIL_SQL).fetchall():
        row(agent_id)["pending_mail"] = int(pending)
    return found
