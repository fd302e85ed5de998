"""The run queue: runs waiting in the database for a worker, and how a worker takes one.

The gateway puts reply runs here, the scheduler scheduled ones, and the workers take them
out for the harness. Several workers, in one process or many, may share it.
"""

from __future__ import annotations

import uuid

from peewee import JOIN

from protege.errors import ProtegeError
from protege.models import Agent, Message, Responsibility, Run
from protege.models.base import utcnow
from protege.models.runs import DONE, QUEUED, REPLY, SCHEDULED

__all__ = ["claim_next", "queue_reply", "queue_scheduled", "requeue"]


def queue_reply(message: Message) -> Run:
    """Queue a run answering ``message`` (an inbound message of its agent)."""
    return Run.create(
        agent=message.agent,  # the message's own (usually loaded) agent: no query at run time
        kind=REPLY,
        message=message,
        correlation_id=uuid.uuid4().hex,
    )


def queue_scheduled(responsibility: Responsibility) -> Run:
    """Queue a run carrying out ``responsibility``."""
    return Run.create(
        agent=responsibility.agent,
        kind=SCHEDULED,
        responsibility=responsibility,
        correlation_id=uuid.uuid4().hex,
    )


def requeue(run: Run) -> Run:
    """Queue a failed (or stuck) run again; it resumes from its own events when it runs.

    Tool calls whose results were recorded are not run again, and mail a call already sent
    is not sent again.
    """
    if run.status in (QUEUED, DONE):
        raise ProtegeError(f"run {run.id} is {run.status}: only failed or stuck runs are retried")
    Run.update(status=QUEUED, error=None, finished_at=None).where(Run.id == run.id).execute()
    run.status, run.error, run.finished_at = QUEUED, None, None
    return run


def claim_next() -> Run | None:
    """Take the oldest queued run for this worker, or None; safe with several workers."""
    while True:
        candidate = Run.select(Run.id).where(Run.status == QUEUED).order_by(Run.id).first()
        if candidate is None:
            return None
        if Run.claim(candidate.id, utcnow()):
            return (  # with its agent and message, so running it asks for neither again
                Run.select(Run, Agent, Message)
                .join(Agent)
                .switch(Run)
                .join(Message, JOIN.LEFT_OUTER)
                .where(Run.id == candidate.id)
                .get()
            )
