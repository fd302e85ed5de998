"""The run queue: runs waiting in the database for a worker, and how a worker takes one.

The gateway puts reply runs here, the scheduler scheduled ones, and the workers take them
out for the harness. Several workers, in one process or many, may share it.
"""

from __future__ import annotations

import datetime
import functools
import uuid

import peewee

from protege.config import AuthenticationSettings
from protege.db import connection_broken, database
from protege.errors import ProtegeError
from protege.limit_settings import LimitSettings
from protege.limits.admission import Hold
from protege.limits.fairness import next_turn
from protege.limits.flight import busy_agents
from protege.limits.senders import lane_of, sender_key
from protege.limits.windows import naive_utc
from protege.models import Agent, Message, Responsibility, Run
from protege.models.base import utcnow
from protege.models.runs import DONE, FAILED, HELD, QUEUED, REPLY, RUNNING, SCHEDULED, Claim

__all__ = [
    "AlreadyQueued",
    "claim_next",
    "queue_reply",
    "queue_scheduled",
    "requeue",
    "retry_failed",
    "sender_key",
]


def queue_reply(
    message: Message,
    *,
    hold: Hold | None = None,
    now: datetime.datetime | None = None,
    authentication: AuthenticationSettings | None = None,
) -> Run:
    """Queue a run answering ``message`` (an inbound message of its agent), in its
    sender's fair turn; or, with ``hold`` (``protege.limits.admission``), store it held
    until the hold's window ends."""
    key = sender_key(message, authentication)
    lane = lane_of(key, message.agent_id)
    fields: dict[str, object] = {
        "agent": message.agent,  # the message's own (usually loaded) agent: no query later
        "kind": REPLY,
        "message": message,
        "correlation_id": uuid.uuid4().hex,
        "sender_key": key,
        "lane": lane,
    }
    if hold is None:
        fields.update(turn=next_turn(lane), admitted_at=now or utcnow())
    else:
        fields.update(status=HELD, held_until=hold.until, held_reason=hold.reason)
    return Run.insert_new(**fields)


class AlreadyQueued(ProtegeError):
    """A run for this responsibility and due time exists already (another scheduler, or an
    earlier pass of this one, queued it)."""


def queue_scheduled(
    responsibility: Responsibility,
    due_at: datetime.datetime | None = None,
    *,
    hold: Hold | None = None,
    now: datetime.datetime | None = None,
) -> Run:
    """Queue a run carrying out ``responsibility``: for the due time ``due_at`` (an aware
    datetime) when the scheduler queues it, or for no due time when asked to run now; or,
    with ``hold`` (a spending limit reached, ``protege.limits.admission``), store it held
    until the hold's window ends.

    At most one run stands for each due time, even with several schedulers on one
    database: the second to try gets ``AlreadyQueued``.
    """
    stored = None if due_at is None else due_at.astimezone(datetime.UTC).replace(tzinfo=None)
    fields: dict[str, object] = {
        "agent": responsibility.agent,
        "kind": SCHEDULED,
        "responsibility": responsibility,
        "correlation_id": uuid.uuid4().hex,
        "due_at": stored,
    }
    if hold is None:
        fields.update(turn=next_turn(None), admitted_at=utcnow() if now is None else naive_utc(now))
    else:
        fields.update(status=HELD, held_until=hold.until, held_reason=hold.reason)
    try:
        with database.atomic():  # a savepoint: the unique violation spoils no transaction
            return Run.create(**fields)
    except peewee.IntegrityError:
        if due_at is not None and (
            Run.select()
            .where((Run.responsibility == responsibility.id) & (Run.due_at == stored))
            .exists()
        ):
            raise AlreadyQueued(
                f"a run of {responsibility.name!r} for {due_at.isoformat()} is queued already"
            ) from None
        raise


def requeue(run: Run) -> Run:
    """Queue a failed (or stuck) run again; it resumes from its own events when it runs.

    Tool calls whose results were recorded are not run again, and mail a call already sent
    is not sent again.
    """
    if run.status == HELD:
        raise ProtegeError(
            f"run {run.id} is held ({run.held_reason}): `protege runs release {run.id}` queues it"
        )
    if run.status in (QUEUED, DONE):
        raise ProtegeError(f"run {run.id} is {run.status}: only failed or stuck runs are retried")
    if (
        run.status == RUNNING
        and run.lease_expires_at is not None
        and run.lease_expires_at >= utcnow()
    ):
        raise ProtegeError(
            f"run {run.id} is running and its worker holds it (until "
            f"{run.lease_expires_at:%H:%M:%S} UTC): cancel it, or wait for it to end"
        )
    Run.update(
        status=QUEUED,
        error=None,
        finished_at=None,
        lease_owner=None,
        lease_expires_at=None,
        cancel_requested_at=None,
    ).where(Run.id == run.id).execute()
    run.status, run.error, run.finished_at = QUEUED, None, None
    return run


def retry_failed(run: Run) -> bool:
    """Queue the failed run ``run`` again if it is still failed as read, attempts and all;
    whether this call did (safe when several schedulers apply the retry policy at once)."""
    updated = (
        Run.update(status=QUEUED, error=None, finished_at=None)
        .where((Run.id == run.id) & (Run.status == FAILED) & (Run.attempts == run.attempts))
        .execute()
    )
    if updated == 1:
        run.status, run.error, run.finished_at = QUEUED, None, None
    return updated == 1


def claim_next(
    owner: str,
    now: datetime.datetime,
    lease_seconds: float,
    *,
    look: bool = True,
    expired: bool = True,
    limits: LimitSettings | None = None,
) -> tuple[Run, Claim] | None:
    """Take the next run for the worker attempt ``owner``: a run whose worker stopped
    renewing its lease, else the queued one whose turn is next; None when there is
    neither. Safe with several workers in several processes. A busy worker may skip the
    first ``look`` and, between regular looks, the ``expired`` runs (``Run.claim_next``).
    With ``limits``, the runs of agents at their ``agent_runs_in_flight`` wait."""
    busy = () if limits is None else busy_agents(now, limits)
    claim = Run.claim_next(owner, now, lease_seconds, look=look, expired=expired, busy_agents=busy)
    if claim is None:
        return None
    try:
        row = _claimed_row(claim.run_id)
    except BaseException:
        # The claim is committed: a run this worker cannot read would sit leased to nobody
        # until its lease ran out. Hand it back (on a new connection, if need be).
        if not database.in_transaction():
            database.close()
        Run.hand_back(claim.run_id, owner)
        raise
    runs, agents = len(Run._meta.sorted_fields), len(Agent._meta.sorted_fields)
    run = Run.from_row(row[:runs])
    run.agent = Agent.from_row(row[runs : runs + agents])
    if run.message_id is not None:
        run.message = Message.from_row(row[runs + agents :])
    return run, claim


def _claimed_row(run_id: int) -> tuple:
    """The claimed run with its agent and message, so running it asks for neither again
    (plain SQL: building this join with peewee cost more than the claim itself); read again
    on a new connection when the server had ended this one after the claim."""
    for attempt in (1, 2):
        try:
            return database.execute_sql(_claimed_sql(database.param), (run_id,)).fetchone()
        except (peewee.DatabaseError, peewee.InterfaceError):
            if attempt == 2 or not connection_broken():
                raise
            database.close()
    raise AssertionError("unreachable")


@functools.cache
def _claimed_sql(param: str) -> str:
    return (
        f"SELECT {Run.columns()}, {Agent.columns()}, {Message.columns()} FROM run "
        "JOIN agent ON agent.id = run.agent_id "
        f"LEFT JOIN message ON message.id = run.message_id WHERE run.id = {param}"
    )
