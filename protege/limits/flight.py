"""Runs in flight per agent: which agents have as many runs running as
``agent_runs_in_flight`` lets them, so that workers leave their queued runs for now."""

from __future__ import annotations

import datetime

from protege.db import database
from protege.limit_settings import AGENT_RUNS_IN_FLIGHT, LimitSettings
from protege.limits.windows import naive_utc

# Running under a live lease: a run whose worker died no longer holds a place.
_RUNNING = (
    "SELECT run.agent_id, agent.name, COUNT(*) FROM run JOIN agent ON agent.id = run.agent_id "
    "WHERE run.status = 'running' AND run.lease_expires_at >= {p} "
    "GROUP BY run.agent_id, agent.name"
)


def busy_agents(now: datetime.datetime, settings: LimitSettings) -> list[int]:
    """The ids of the agents at their limit of runs in flight (none when no such limit is
    set, without a look at the database)."""
    if not settings.agent_runs_in_flight and not any(
        own.agent_runs_in_flight for own in settings.agents.values()
    ):
        return []
    rows = database.execute_sql(_RUNNING.format(p=database.param), (naive_utc(now),))
    busy = []
    for agent_id, name, running in rows.fetchall():
        cap = settings.for_agent(name)[AGENT_RUNS_IN_FLIGHT]
        if cap and running >= cap:
            busy.append(agent_id)
    return busy
