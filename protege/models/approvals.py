"""Approvals: a tool call that waits for a person's yes, and the policy that asks for it.

A grant may require approval for its tools (``AgentToolkit.require_approval``). A call to
such a tool does not run: it becomes an ``Approval``, matched to its answer by a secret
token, and the run waits. Answering (or expiring) an approval puts a waiting run back in
the queue; the harness then records the answer in the run's trail and runs the call once,
or tells the model why it did not run.
"""

from __future__ import annotations

import datetime
import secrets
from typing import TYPE_CHECKING, Any

import peewee

from protege.access import ApprovalPolicy, routing_key
from protege.db import database
from protege.errors import ProtegeError
from protege.models.base import JSONListField, Record, utcnow
from protege.models.runs import QUEUED, WAITING, Run

PENDING, APPROVED, DENIED, EXPIRED = "pending", "approved", "denied", "expired"
ANSWERED = (APPROVED, DENIED, EXPIRED)
NOBODY = "nobody (it expired)"  # who answered an approval that expired
TOKEN_BYTES = 20  # 160 bits, written as 40 lowercase hex digits (mail may fold case)


def new_token() -> str:
    """A fresh secret token for one approval."""
    return secrets.token_hex(TOKEN_BYTES)


class Approval(Record):
    """One tool call waiting for (or past) an approver's answer."""

    if TYPE_CHECKING:  # peewee adds these: the primary key, foreign key ids and backrefs
        run_id: Any

    token = peewee.CharField(max_length=64, unique=True, default=new_token)
    run = peewee.ForeignKeyField(Run, backref="approvals", on_delete="CASCADE")
    call_id = peewee.CharField(max_length=200)
    tool = peewee.CharField(max_length=64)
    arguments = peewee.TextField()
    approvers = JSONListField(default=list)
    notified = JSONListField(default=list)
    requested_by = peewee.CharField(max_length=320, null=True)
    status = peewee.CharField(max_length=16, default=PENDING)
    reason = peewee.TextField(null=True)
    answered_by = peewee.CharField(max_length=320, null=True)
    created_at = peewee.DateTimeField(default=utcnow)
    expires_at = peewee.DateTimeField()
    answered_at = peewee.DateTimeField(null=True)
    self_approval = peewee.BooleanField(default=True)  # may the run's own sender answer
    settled = peewee.BooleanField(default=False)  # the harness recorded what became of it

    class Meta:
        indexes = ((("run", "call_id"), True),)

    @property
    def policy(self) -> ApprovalPolicy:
        """Who may answer this approval."""
        return ApprovalPolicy(
            tuple(self.approvers), tuple(self.notified), self_approval=self.self_approval
        )

    def may_answer(self, sender: str | None) -> bool:
        """Whether ``sender`` (one mailbox, checked by the gateway) may answer: an approver,
        and not the one who asked when the policy wants someone else's yes."""
        if not self.policy.approves(sender):
            return False
        asker = routing_key(self.requested_by)
        return self.self_approval or asker is None or routing_key(sender) != asker

    @classmethod
    def with_token(cls, token: str) -> Approval | None:
        """The approval whose secret is ``token`` (compared in lowercase), if any."""
        text = (token or "").strip().lower()
        if len(text) != 2 * TOKEN_BYTES:
            return None
        return cls.get_or_none(cls.token == text)

    @staticmethod
    def answer(
        approval_id: int,
        decision: str,
        by: str,
        reason: str | None = None,
        now: datetime.datetime | None = None,
    ) -> bool:
        """Record ``decision`` (approved, denied or expired) for a pending approval and put
        its run back in the queue if it is waiting; whether this call decided it (False when
        it was answered before: a second answer changes nothing).

        An approval or denial that comes after the deadline decides nothing: the approval
        is expired there and then, as the scheduler's next pass would have done."""
        if decision not in ANSWERED:
            raise ProtegeError(f"an approval is approved, denied or expired, not {decision!r}")
        now = utcnow() if now is None else now
        still_open = (Approval.id == approval_id) & (Approval.status == PENDING)
        if decision != EXPIRED:
            still_open &= Approval.expires_at > now
        with database.atomic():
            decided = (
                Approval.update(status=decision, answered_by=by, reason=reason, answered_at=now)
                .where(still_open)
                .execute()
            )
            if decided != 1:
                if decision != EXPIRED:
                    Approval.answer(approval_id, EXPIRED, NOBODY, None, now)
                return False
            run_id = Approval.select(Approval.run).where(Approval.id == approval_id).scalar()
            wake(run_id)
        return True

    @staticmethod
    def expire_due(now: datetime.datetime) -> list[int]:
        """Expire every pending approval whose time ran out before ``now``; their waiting
        runs are queued again. Returns the ids expired."""
        due = [
            row.id
            for row in Approval.select(Approval.id).where(
                (Approval.status == PENDING) & (Approval.expires_at <= now)
            )
        ]
        return [
            approval_id
            for approval_id in due
            if Approval.answer(approval_id, EXPIRED, NOBODY, None, now)
        ]


def wake(run_id: int) -> bool:
    """Queue run ``run_id`` again if it is waiting (an approval of it was answered)."""
    return (
        Run.update(status=QUEUED, finished_at=None)
        .where((Run.id == run_id) & (Run.status == WAITING))
        .execute()
        == 1
    )


def unsettled(run_id: int) -> list[Approval]:
    """The approvals of run ``run_id`` answered (or expired) whose outcome the run has not
    yet taken in, oldest first."""
    return list(
        Approval.select()
        .where(
            (Approval.run == run_id) & (Approval.status.in_(ANSWERED)) & (Approval.settled == False)  # noqa: E712
        )
        .order_by(Approval.id)
    )


def pending_of(run_id: int) -> list[Approval]:
    """The approvals of run ``run_id`` still waiting for an answer."""
    return list(
        Approval.select()
        .where((Approval.run == run_id) & (Approval.status == PENDING))
        .order_by(Approval.id)
    )
