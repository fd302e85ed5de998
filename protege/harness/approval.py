"""Approval inside a run: a call to a guarded tool waits, a request goes by mail, and once
an approver answered, the run records the answer, runs the call once (or tells the model
why it did not run) and goes on.

The answer itself arrives elsewhere (the gateway, the command line): it only updates the
``Approval`` row and queues the waiting run again; everything the run's trail says about it
is recorded here, by the run, so the trail is written by one writer at a time.
"""

from __future__ import annotations

import datetime
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

import attrs

from protege.access import ApprovalPolicy, routing_key
from protege.db import database
from protege.harness import events
from protege.harness.dispatch import Dispatcher, Outcome
from protege.mail import APPROVE_TAG, MESSAGE_ID_PREFIX
from protege.models import Agent, Run
from protege.models.approvals import APPROVED, DENIED, Approval, unsettled
from protege.result import failure

logger = logging.getLogger(__name__)


def reply_address(agent_address: str, token: str) -> str:
    """The address an approver's answer goes to: the agent's, tagged with the token."""
    local, _, domain = agent_address.rpartition("@")
    return f"{local}+{APPROVE_TAG}{token}@{domain}"


def request_message_id(agent_address: str, token: str) -> str:
    """The Message-ID of an approval request: answers refer to it, token and all."""
    return f"<{MESSAGE_ID_PREFIX}{token}@{agent_address.rpartition('@')[2]}>"


def as_call(approval: Approval) -> dict[str, Any]:
    """The tool call an approval stands for, as the model made it."""
    return {
        "id": approval.call_id,
        "type": "function",
        "function": {"name": approval.tool, "arguments": approval.arguments},
    }


def note(answer: events.RunEvent | None, call_id: str, tool: str, content: str) -> dict:
    """The message that shows the model what became of a call that waited for approval
    (answer: the ``ApprovalAnswered`` or ``ApprovalExpired`` event), with its result."""
    if isinstance(answer, events.ApprovalExpired):
        head = f"nobody answered the approval of your call {call_id} to {tool} in time"
        head += "; it did not run"
    elif isinstance(answer, events.ApprovalAnswered) and answer.decision == APPROVED:
        head = f"{answer.by} approved your call {call_id} to {tool}; it has run now"
    elif isinstance(answer, events.ApprovalAnswered) and answer.decision == DENIED:
        head = f"{answer.by} denied your call {call_id} to {tool}; it did not run"
    else:
        head = f"the approval of your call {call_id} to {tool} was answered"
    return {"role": "user", "content": f"(protege: {head}. Its result follows.)\n{content}"}


class Desk:
    """The approvals of one run attempt: which calls wait, requesting, and settling."""

    def __init__(
        self,
        run: Run,
        policies: dict[str, ApprovalPolicy],
        dispatcher: Dispatcher,
        queue_mail: Callable[..., dict[str, Any]],
        clock: Callable[[], datetime.datetime],
        resumed: bool = True,
        authenticated: bool = False,
    ) -> None:
        self.run = run
        # Self-approval needs the asker proven: an approver pattern is an allow rule.
        self.authenticated = authenticated
        # A run's approvals are requested by its own attempts, after their first events:
        # a run with no events yet has none, and its turns need not ask the database.
        self.may_have_approvals = resumed
        self.policies = policies
        self.dispatcher = dispatcher
        self.queue_mail = queue_mail
        self.clock = clock
        message = run.message if run.message_id is not None else None
        self.sender: str | None = None if message is None else message.sender

    def policy_for(self, call: dict[str, Any]) -> ApprovalPolicy | None:
        """The approval ``call`` needs, or None when it is dispatched at once (its tool
        needs none, or dispatch refuses the call anyway)."""
        policy = self.policies.get(call["function"]["name"])
        if policy is None or self.dispatcher.problem(call) is not None:
            return None
        return policy

    def self_approved(self, call: dict[str, Any], policy: ApprovalPolicy) -> events.RunEvent | None:
        """The event approving ``call`` at once when the run's sender is an approver and
        the policy lets them approve their own asks; None otherwise."""
        if not policy.self_approves(self.sender, authenticated=self.authenticated):
            return None
        return events.ApprovalAnswered(
            call_id=call["id"],
            tool=call["function"]["name"],
            decision=APPROVED,
            by=routing_key(self.sender),
            reason="self-approval: the sender is an approver",
            answered_at=self.clock().isoformat(timespec="seconds"),
        )

    def request(self, call: dict[str, Any], policy: ApprovalPolicy) -> tuple[Approval, bool]:
        """The approval ``call`` waits for, and whether it was created now (then its
        request mail is queued in the same transaction). In the database's thread."""
        self.may_have_approvals = True
        with database.atomic():
            found = Approval.get_or_none(
                (Approval.run == self.run.id) & (Approval.call_id == call["id"])
            )
            if found is not None:
                return found, False
            now = self.clock()
            asker = routing_key(self.sender)
            notify = [a for a in policy.notify if policy.self_approval or a != asker]
            approval = Approval.create(
                run=self.run.id,
                call_id=call["id"],
                tool=call["function"]["name"],
                arguments=call["function"].get("arguments") or "{}",
                approvers=list(policy.approvers),
                notified=notify,
                requested_by=asker,
                self_approval=policy.self_approval,
                created_at=now,
                expires_at=now + datetime.timedelta(seconds=policy.timeout),
            )
            agent: Agent = self.run.agent
            if not notify:
                # Without self-approval the asker is never asked; with nobody else to mail,
                # the approval waits for an operator (approvals approve, the dashboard).
                logger.warning(
                    "approval %s: nobody but the asker to mail; it waits for an operator",
                    approval.id,
                )
                return approval, True
            self.queue_mail(
                agent=agent,
                run=self.run,
                mail=self._request_mail(approval),
                message_id=request_message_id(agent.address, approval.token),
                reply_to=[reply_address(agent.address, approval.token)],
            )
            return approval, True

    def requested(self, approval: Approval) -> events.ApprovalRequested:
        """The event recording ``approval``'s request."""
        return events.ApprovalRequested(
            approval=approval.id,
            call_id=approval.call_id,
            tool=approval.tool,
            approvers=list(approval.approvers),
            notified=list(approval.notified),
            requested_by=approval.requested_by,
            expires_at=approval.expires_at.isoformat(timespec="seconds"),
        )

    def waiting(self, call: dict[str, Any], approval: Approval) -> Outcome:
        """What the model is told for a call that waits for ``approval``."""
        result = failure(
            "not run yet: this call waits for approval",
            awaiting_approval=True,
            approvers=list(approval.approvers),
            asked=list(approval.notified),
            expires_at=approval.expires_at.isoformat(timespec="minutes") + " UTC",
            next=(
                "The approvers were asked by email. Once one answers, you are told the "
                "outcome here, and an approved call runs then (do not call it again). "
                "You may tell the sender that it waits for approval."
            ),
        )
        return self.dispatcher.unrun(call, result, awaiting_approval=True)

    def answered(self) -> list[tuple[Approval, events.RunEvent]]:
        """The approvals of this run answered but not yet taken in, each with the event
        recording its answer. In the database's thread."""
        found: list[tuple[Approval, events.RunEvent]] = []
        if not self.may_have_approvals:
            return found
        for approval in unsettled(self.run.id):
            when = (approval.answered_at or self.clock()).isoformat(timespec="seconds")
            event: events.RunEvent
            if approval.status in (APPROVED, DENIED):
                event = events.ApprovalAnswered(
                    approval=approval.id,
                    call_id=approval.call_id,
                    tool=approval.tool,
                    decision=approval.status,
                    by=approval.answered_by,
                    reason=approval.reason,
                    answered_at=when,
                )
            else:
                event = events.ApprovalExpired(
                    approval=approval.id,
                    call_id=approval.call_id,
                    tool=approval.tool,
                    expired_at=when,
                )
            found.append((approval, event))
        return found

    async def outcome(self, approval: Approval) -> Outcome:
        """Run the approved call (dispatch checks it again against this run's grants), or
        answer a denied or expired one without running it."""
        call = as_call(approval)
        if approval.status == APPROVED:
            done = await self.dispatcher.dispatch(call)
        elif approval.status == DENIED:
            said = {"approver_said": approval.reason} if approval.reason else {}
            refused = failure(f"not run: {approval.answered_by} denied it", **said)
            done = self.dispatcher.unrun(call, refused.untrusted() if said else refused)
        else:
            done = self.dispatcher.unrun(
                call, failure("not run: nobody approved it before the approval expired")
            )
        trail = tuple(
            attrs.evolve(e, after_approval=True) if isinstance(e, events.ToolResult) else e
            for e in done.trail
        )
        return attrs.evolve(done, trail=trail)

    @staticmethod
    def mark_settled(approvals: list[Approval]) -> None:
        """Record that the run took these answers in (in the caller's transaction)."""
        Approval.update(settled=True).where(Approval.id.in_([a.id for a in approvals])).execute()

    def _request_mail(self, approval: Approval) -> dict[str, Any]:
        run, agent = self.run, self.run.agent
        duty = run.responsibility if run.responsibility_id is not None else None
        message = run.message if run.message_id is not None else None
        asker = approval.requested_by or f"a scheduled run ({duty.name if duty else '?'})"
        fence = f"----- arguments {secrets.token_hex(4)} -----"
        try:
            shown = json.dumps(json.loads(approval.arguments), indent=2, ensure_ascii=True)
        except ValueError:
            shown = json.dumps(approval.arguments, ensure_ascii=True)
        # The subject is the sender's text: quoted as a JSON string, on one line.
        subject = json.dumps(message.subject, ensure_ascii=True) if message is not None else ""
        thread = f" in the thread {subject}" if message is not None else ""
        approvers = ", ".join(approval.approvers)
        body = "\n".join(
            [
                f"{agent.name} wants to call {approval.tool} and needs an approver's yes first.",
                "",
                f"Asked for by: {asker}{thread} (run {run.id}).",
                f"Tool: {approval.tool}",
                "Arguments, as the model wrote them (data, not instructions; parts of them may",
                "come from the email that asked):",
                fence,
                shown,
                fence,
                "",
                "To answer, reply to this mail with APPROVE or DENY as the first word of your",
                'reply, optionally followed by a reason ("deny: the photo shows no damage").',
                f"Approvers: {approvers}. Without an answer by "
                f"{approval.expires_at:%Y-%m-%d %H:%M} UTC, the call does not run.",
            ]
        )
        return {
            "to": list(approval.notified),
            "subject": f"Approval needed: {approval.tool} for {asker}",
            "body": body,
        }
