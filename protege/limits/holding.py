"""Held runs: letting them into the queue when their window reopens, or when an operator
says so, in the order they arrived.

A held run is a stored mail's run (or a run stopped at a spending limit) waiting in status
``held``; nothing is dropped. The scheduler's pass calls ``release_due``: each held run
whose ``held_until`` has come is checked against the limits again, oldest first, and
either queued or held on to a later time. ``release`` is the operator's: it queues the
runs it names whatever the limits say.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

import attrs

from protege.db import database
from protege.limit_settings import (
    SENDER_RUNS_PER_DAY,
    SENDER_RUNS_PER_HOUR,
    UNPROVEN_RUNS_PER_HOUR,
    LimitSettings,
)
from protege.limits.admission import Hold, admission, admitting
from protege.limits.fairness import next_turn
from protege.limits.senders import keys_for
from protege.limits.windows import naive_utc
from protege.models import Agent, Run
from protege.models.runs import HELD

_RELEASE_SQL = (
    "UPDATE run SET status = 'queued', turn = {p}, admitted_at = COALESCE(admitted_at, {p}), "
    "held_until = NULL, held_reason = NULL, released_by = {p} WHERE id = {p} AND status = 'held'"
)
_HOLD_ON_SQL = (
    "UPDATE run SET held_until = {p}, held_reason = {p} WHERE status = 'held' AND id IN ({ids})"
)
# A running run stopped at a spending limit: held, its lease given up, the attempt not
# counted (as a run handed back at shutdown: nothing failed).
_HOLD_RUNNING_SQL = (
    "UPDATE run SET status = 'held', held_until = {p}, held_reason = {p}, released_by = NULL, "
    "attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL "
    "WHERE id = {p} AND status = 'running' AND lease_owner = {p}"
)
BATCH = 500
MAX_PER_PASS = 100_000  # held runs looked at in one pass; the next pass takes the rest


@attrs.define
class Released:
    """What a release pass did: the runs it queued and those it held on to."""

    queued: list[int] = attrs.Factory(list)
    held_on: int = 0


def release_due(now: datetime.datetime, settings: LimitSettings) -> Released:
    """Queue the held runs whose window reopened by ``now`` while the limits allow them,
    taking the lanes in turn (``protege.limits.senders.lane_of``), each lane's oldest
    first, so one sender's backlog does not take every place the new window has; hold the
    others on to their new window's end."""
    now = naive_utc(now)
    done = Released()
    names = {agent.id: agent.name for agent in Agent.select(Agent.id, Agent.name)}
    # peewee has no types: these rows are tuples.
    due: list[tuple[int, int, str | None, str | None, int | None, datetime.datetime | None]] = list(
        Run.select(  # type: ignore[arg-type]
            Run.id, Run.agent, Run.sender_key, Run.lane, Run.message, Run.admitted_at
        )
        .where((Run.status == HELD) & (Run.held_until <= now))
        .order_by(Run.id)
        .limit(MAX_PER_PASS)
        .tuples()
    )
    # Once a sender, a lane or an agent is found over a limit in this pass, its later runs
    # stay held to the same time without a look of their own.
    blocked: dict[tuple[object, ...], Hold] = {}
    held_on: dict[Hold, list[int]] = {}
    for run_id, agent_id, sender_key, lane, message_id, admitted_at in _in_turns(due):
        scopes = ((agent_id,), (agent_id, "sender", sender_key), (agent_id, "lane", lane))
        hold = next((blocked[scope] for scope in scopes if scope in blocked), None)
        if hold is None:
            with admitting(agent_id):
                hold = admission(
                    agent_id,
                    names.get(agent_id, ""),
                    sender_key,
                    now,
                    settings,
                    # A run held part way (spending) was counted when first admitted.
                    count_runs=message_id is not None and admitted_at is None,
                    waiting_behind=False,
                )
                if hold is None:
                    _queue(run_id, lane, now)
                    done.queued.append(run_id)
                    continue
            blocked[_scope_of(hold, agent_id, sender_key, lane)] = hold
        held_on.setdefault(hold, []).append(run_id)
    for hold, ids in held_on.items():
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            database.execute_sql(
                _HOLD_ON_SQL.format(p=database.param, ids=", ".join(map(str, chunk))),
                (hold.until, hold.reason),
            )
        done.held_on += len(ids)
    return done


def _in_turns(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Held runs (in arrival order) in the order they are let go: round robin over their
    lanes, each lane's oldest first (a run of no lane, a scheduled one, is a lane alone)."""
    lanes: dict[object, list[tuple[Any, ...]]] = {}
    for row in rows:
        lanes.setdefault(row[3] if row[3] is not None else ("run", row[0]), []).append(row)
    queues = list(lanes.values())
    ordered = []
    for position in range(max((len(q) for q in queues), default=0)):
        ordered += [q[position] for q in queues if position < len(q)]
    return ordered


def _scope_of(hold: Hold, agent_id: int, sender_key: str | None, lane: str | None) -> tuple:
    """Whose further runs ``hold`` holds too: the sender's, the lane's or the agent's."""
    if hold.limit in (SENDER_RUNS_PER_HOUR, SENDER_RUNS_PER_DAY):
        return (agent_id, "sender", sender_key)
    if hold.limit == UNPROVEN_RUNS_PER_HOUR:
        return (agent_id, "lane", lane)
    return (agent_id,)


def _queue(run_id: int, lane: str | None, now: datetime.datetime, by: str | None = None) -> bool:
    cursor = database.execute_sql(
        _RELEASE_SQL.format(p=database.param), (next_turn(lane), now, by, run_id)
    )
    return cursor.rowcount == 1


def release(run_ids: Iterable[int], now: datetime.datetime, *, by: str) -> list[int]:
    """Queue the held runs ``run_ids`` now, whatever the limits say: an operator's
    decision, recorded as ``by``. A run a spending limit stopped part way goes on past
    that limit in the attempt that follows. Returns the runs that were held and are
    queued now."""
    now = naive_utc(now)
    released = []
    for run_id in run_ids:
        lane = Run.select(Run.lane).where(Run.id == run_id).scalar()
        with database.atomic():
            if _queue(run_id, lane, now, by[:200]):
                released.append(run_id)
    return released


def hold_running(run_id: int, owner: str, hold: Hold) -> bool:
    """Hold the running run ``run_id``, whose lease ``owner`` holds, for ``hold`` (a
    spending limit reached mid-run): it waits in status ``held`` until ``hold.until``,
    then resumes from its events once released. Whether ``owner`` still held it (nothing
    is changed when not)."""
    cursor = database.execute_sql(
        _HOLD_RUNNING_SQL.format(p=database.param),
        (naive_utc(hold.until), hold.reason, run_id, owner),
    )
    return cursor.rowcount == 1


def held_runs(*, agent: Agent | None = None, sender: str | None = None) -> list[int]:
    """The ids of the held runs (of ``agent``; from ``sender``, an address, whether its
    mail proved it or not), oldest first."""
    query = Run.select(Run.id).where(Run.status == HELD)
    if agent is not None:
        query = query.where(Run.agent == agent)
    if sender is not None:
        query = query.where(Run.sender_key.in_(keys_for(sender)))
    return [run.id for run in query.order_by(Run.id)]
