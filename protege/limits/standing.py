"""Where the limits stand: for each agent and the installation, every limit of ``[limits]``
with what was used of it in the window under way, and the held mail, grouped by sender.

What ``protege status`` and the dashboard show operators. A handful of grouped reads for
all agents at once, whatever the number of runs.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

import attrs

from protege.db import database
from protege.limit_settings import (
    AGENT_COST_PER_DAY,
    AGENT_COST_PER_MONTH,
    AGENT_LIMITS,
    AGENT_RUNS_IN_FLIGHT,
    AGENT_RUNS_PER_HOUR,
    AGENT_TOKENS_PER_DAY,
    AGENT_TOKENS_PER_MONTH,
    INSTALLATION_COST_PER_DAY,
    INSTALLATION_TOKENS_PER_DAY,
    UNPROVEN_RUNS_PER_HOUR,
    LimitSettings,
)
from protege.limits.admission import MICROS, WINDOW_OF
from protege.limits.senders import UNPROVEN, address_of, shown
from protege.limits.windows import DAY, HOUR, MONTH, day_key, naive_utc, window

__all__ = ["AgentStanding", "HeldMail", "Standing", "Standings", "Usage", "held_mail", "standings"]

# The lanes of mail that proved no sender (``protege.limits.senders.lane_of``).
_UNPROVEN_LANE = "'" + UNPROVEN + "agent ' || CAST(agent_id AS TEXT)"
_RUNS = (
    "SELECT agent_id, COUNT(*), SUM(CASE WHEN admitted_at >= {p} THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN admitted_at >= {p} AND lane = " + _UNPROVEN_LANE + " THEN 1 ELSE 0 END) "
    "FROM run WHERE admitted_at >= {p} GROUP BY agent_id"
)
_RUNNING = (
    "SELECT agent_id, COUNT(*) FROM run WHERE status = 'running' AND lease_expires_at >= {p} "
    "GROUP BY agent_id"
)
_SPENT = (
    "SELECT agent_id, "
    "SUM(CASE WHEN day = {p} THEN prompt_tokens + completion_tokens ELSE 0 END), "
    "SUM(prompt_tokens + completion_tokens), "
    "SUM(CASE WHEN day = {p} THEN cost_micros ELSE 0 END), "
    "SUM(cost_micros) "
    "FROM usage_day WHERE day >= {p} AND day < {p} GROUP BY agent_id"
)
_HELD = (
    "SELECT agent_id, sender_key, COUNT(*), MIN(id), MIN(held_until) FROM run "
    "WHERE status = 'held'{agent} GROUP BY agent_id, sender_key"
)
_REASONS = "SELECT id, held_reason FROM run WHERE id IN ({ids})"


@attrs.frozen
class Standing:
    """One limit as it stands: what it ``allowed`` (0: no limit), what was ``used`` in its
    window (None for the limits each sender has their own count of: the held mail shows
    who reached them), the window's kind and when it ends (None: runs in flight)."""

    limit: str
    allowed: float
    used: float | None
    window: str | None
    until: datetime.datetime | None

    @property
    def reached(self) -> bool:
        """Whether the limit is in force and used up."""
        return bool(self.allowed) and self.used is not None and self.used >= self.allowed

    def as_json(self) -> dict[str, object]:
        """The limit as ``status --json`` carries it."""
        return {
            "allowed": self.allowed,
            "used": self.used,
            "window": self.window,
            "until": None if self.until is None else self.until.isoformat(),
            "reached": self.reached,
        }

    def describe(self) -> str:
        """The limit in a few words: ``agent_runs_per_hour 12 of 500``."""
        used, allowed, _ = self.cells()
        if self.used is None:
            return f"{self.limit} {allowed}"
        return f"{self.limit} {used} of {allowed}" + (" (reached)" if self.reached else "")

    def cells(self) -> tuple[str, str, str]:
        """What was used, what is allowed and when the window ends, as a table shows them."""
        allowed = _amount(self.limit, self.allowed)
        if self.used is None:
            return "-", f"{allowed} per sender", _when(self.until)
        used = _amount(self.limit, self.used) + (" (reached)" if self.reached else "")
        return used, allowed, _when(self.until)


def _when(moment: datetime.datetime | None) -> str:
    return "" if moment is None else f"{moment:%Y-%m-%d %H:%M} UTC"


def _amount(limit: str, value: float) -> str:
    return f"{value:.4f}" if "cost" in limit else f"{int(value):,}"


@attrs.frozen
class Usage:
    """What one agent used in the windows under way: runs admitted this hour and today,
    runs running now, tokens and cost today and this month."""

    runs_this_hour: int = 0
    unproven_runs_this_hour: int = 0
    runs_today: int = 0
    running: int = 0
    tokens_today: int = 0
    tokens_this_month: int = 0
    cost_today: float = 0.0
    cost_this_month: float = 0.0

    def as_json(self) -> dict[str, object]:
        """The usage as ``status --json`` carries it."""
        return attrs.asdict(self)


@attrs.frozen
class HeldMail:
    """The held runs of one sender (None: scheduled runs) for one agent: how many, the
    first of them (released first), its reason, and the earliest time one may go."""

    agent_id: int
    sender: str | None
    runs: int
    first_run: int
    until: datetime.datetime | None
    reason: str

    def as_json(self) -> dict[str, object]:
        """The held mail as ``status --json`` carries it."""
        address, proven = (None, None) if self.sender is None else address_of(self.sender)
        return {
            "sender": address,
            "sender_proven": proven,
            "runs": self.runs,
            "first_run": self.first_run,
            "held_until": None if self.until is None else self.until.isoformat(),
            "reason": self.reason,
        }

    def describe(self) -> str:
        """One line: whose runs, how many, until when and why."""
        whose = f"from {shown(self.sender)}" if self.sender else "scheduled"
        plural = "s" if self.runs != 1 else ""
        until = "" if self.until is None else f" until {self.until:%Y-%m-%d %H:%M} UTC"
        return f"{self.runs} run{plural} {whose} held{until} (first: run {self.first_run})"


@attrs.frozen
class AgentStanding:
    """One agent's limits, usage and held mail."""

    agent_id: int
    name: str
    usage: Usage
    limits: Mapping[str, Standing]
    held: tuple[HeldMail, ...]

    @property
    def held_runs(self) -> int:
        """How many of the agent's runs are held."""
        return sum(group.runs for group in self.held)

    def as_json(self) -> dict[str, object]:
        """The agent's standing as ``status --json`` carries it."""
        return {
            "usage": self.usage.as_json(),
            "limits": {name: standing.as_json() for name, standing in self.limits.items()},
            "held_mail": [group.as_json() for group in self.held],
        }


@attrs.frozen
class Standings:
    """Every agent's standing (by agent id), and the installation's own limits and usage
    (tokens and cost today, every agent together)."""

    agents: Mapping[int, AgentStanding]
    installation_limits: Mapping[str, Standing]
    tokens_today: int
    cost_today: float

    def installation_json(self) -> dict[str, object]:
        """The installation's limits and usage as ``status --json`` carries them."""
        return {
            "usage": {"tokens_today": self.tokens_today, "cost_today": self.cost_today},
            "limits": {
                name: standing.as_json() for name, standing in self.installation_limits.items()
            },
        }


def standings(
    agents: Iterable[tuple[int, str]], now: datetime.datetime, settings: LimitSettings
) -> Standings:
    """The standing of each agent ``(id, name)`` of ``agents`` and of the installation at
    ``now`` under ``settings``."""
    now = naive_utc(now)
    p = database.param
    hour_start, hour_end = window(HOUR, now)
    day_start, day_end = window(DAY, now)
    month_start, month_end = window(MONTH, now)
    ends = {HOUR: hour_end, DAY: day_end, MONTH: month_end}
    runs = {
        agent_id: (int(today or 0), int(this_hour or 0), int(unproven or 0))
        for agent_id, today, this_hour, unproven in database.execute_sql(
            _RUNS.format(p=p), (hour_start, hour_start, day_start)
        ).fetchall()
    }
    running = {
        agent_id: int(count)
        for agent_id, count in database.execute_sql(_RUNNING.format(p=p), (now,)).fetchall()
    }
    today = day_key(now)
    spent = {
        agent_id: [int(value or 0) for value in values]
        for agent_id, *values in database.execute_sql(
            _SPENT.format(p=p), (today, today, day_key(month_start), day_key(month_end))
        ).fetchall()
    }
    held: dict[int, list[HeldMail]] = {}
    for group in held_mail():
        held.setdefault(group.agent_id, []).append(group)
    found = {}
    for agent_id, name in agents:
        runs_today, runs_this_hour, unproven_this_hour = runs.get(agent_id, (0, 0, 0))
        tokens_today, tokens_month, cost_today, cost_month = spent.get(agent_id, [0, 0, 0, 0])
        usage = Usage(
            runs_this_hour=runs_this_hour,
            unproven_runs_this_hour=unproven_this_hour,
            runs_today=runs_today,
            running=running.get(agent_id, 0),
            tokens_today=tokens_today,
            tokens_this_month=tokens_month,
            cost_today=cost_today / MICROS,
            cost_this_month=cost_month / MICROS,
        )
        used: dict[str, float | None] = {
            AGENT_RUNS_PER_HOUR: usage.runs_this_hour,
            UNPROVEN_RUNS_PER_HOUR: usage.unproven_runs_this_hour,
            AGENT_RUNS_IN_FLIGHT: usage.running,
            AGENT_TOKENS_PER_DAY: usage.tokens_today,
            AGENT_TOKENS_PER_MONTH: usage.tokens_this_month,
            AGENT_COST_PER_DAY: usage.cost_today,
            AGENT_COST_PER_MONTH: usage.cost_this_month,
        }
        allowed = settings.for_agent(name)
        limits = {
            limit: _standing(limit, allowed[limit], used.get(limit), ends) for limit in AGENT_LIMITS
        }
        found[agent_id] = AgentStanding(
            agent_id, name, usage, limits, tuple(held.get(agent_id, ()))
        )
    tokens = sum(values[0] for values in spent.values())
    cost = sum(values[2] for values in spent.values()) / MICROS
    installation = {
        INSTALLATION_TOKENS_PER_DAY: _standing(
            INSTALLATION_TOKENS_PER_DAY, settings.installation_tokens_per_day, tokens, ends
        ),
        INSTALLATION_COST_PER_DAY: _standing(
            INSTALLATION_COST_PER_DAY, settings.installation_cost_per_day, cost, ends
        ),
    }
    return Standings(found, installation, tokens, cost)


def _standing(
    limit: str, allowed: float, used: float | None, ends: Mapping[str, datetime.datetime]
) -> Standing:
    kind = WINDOW_OF.get(limit)
    return Standing(limit, allowed, used, kind, None if kind is None else ends[kind])


def held_mail(agent_id: int | None = None) -> list[HeldMail]:
    """The held runs (of agent ``agent_id``) grouped by agent and sender, the group whose
    first run is oldest first."""
    p = database.param
    where = "" if agent_id is None else f" AND agent_id = {p}"
    rows = database.execute_sql(
        _HELD.format(agent=where), () if agent_id is None else (agent_id,)
    ).fetchall()
    if not rows:
        return []
    firsts = [int(row[3]) for row in rows]
    reasons = {
        run_id: reason or ""
        for run_id, reason in database.execute_sql(
            _REASONS.format(ids=", ".join(map(str, firsts)))
        ).fetchall()
    }
    groups = [
        HeldMail(
            agent_id=owner,
            sender=sender,
            runs=int(count),
            first_run=int(first),
            until=_moment(until),
            reason=reasons.get(int(first), ""),
        )
        for owner, sender, count, first, until in rows
    ]
    return sorted(groups, key=lambda group: group.first_run)


def _moment(value: object) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromisoformat(str(value))
