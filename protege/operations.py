"""What an operator does to an installation, once for every front end.

The command line and the dashboard (and any operator tool built on ``protege.admin``) offer
the same operations: stop a run, release held runs, run a responsibility now, attach and
detach toolkits, change gate and access rules, answer approvals and say which calls need
one. Each is one function here: it checks what it is asked, does it in one transaction,
records it under the ``actor`` it is given (in the audit log, ``protege.audit``; an
approval's answer on the approval itself and in its run's trail), and returns what it did
or raises a ``ProtegeError`` whose message is meant for the operator. Front ends only find
the records and show the outcome.

Call them with the installation's database connected (``open_installation``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import attrs

from protege.access import DEFAULT_APPROVAL_TIMEOUT, ApprovalPolicy, checked_policy
from protege.access import normalize_pattern as _normalize_pattern
from protege.addresses import routing_key
from protege.audit import change, record
from protege.db import database
from protege.errors import ProtegeError, did_you_mean
from protege.limits import circuit, holding
from protege.limits.senders import keys_for
from protege.models import (
    Agent,
    AgentAccessRule,
    AgentToolkit,
    AgentToolkitRule,
    Approval,
    Responsibility,
    Run,
    Toolkit,
)
from protege.models.approvals import APPROVED, DENIED, PENDING
from protege.models.base import utcnow
from protege.models.limits import CLOSED, Circuit
from protege.models.runs import CANCELLED, HELD, QUEUED, RUNNING, WAITING
from protege.queue import queue_scheduled
from protege.registry import Manifest

__all__ = [
    "Answered",
    "Cancelled",
    "NotFound",
    "OperationRefused",
    "Released",
    "add_access_rule",
    "add_gate_rule",
    "answer_approval",
    "attach_toolkit",
    "cancel_run",
    "clear_grant_approval",
    "detach_toolkit",
    "queue_responsibility",
    "release_held",
    "remove_access_rule",
    "remove_gate_rule",
    "require_grant_approval",
    "require_tool_approval",
    "set_scheduled_runs",
    "set_whole_archive",
    "unrequire_tool_approval",
]

STOPPABLE = (QUEUED, RUNNING, WAITING, HELD)
RULE_KINDS = ("allow", "deny")


class NotFound(ProtegeError):
    """The record an operation names does not exist."""


class OperationRefused(ProtegeError):
    """The operation cannot be done as things stand (the run ended, the approval was
    answered, the responsibility is running already); nothing was changed."""


@attrs.frozen
class Cancelled:
    """A run an operator stopped: ``was`` is the status it had (queued, waiting or running)."""

    run_id: int
    was: str

    @property
    def at_once(self) -> bool:
        """Whether the run is cancelled already (it had not started or was waiting); a
        running run stops at its next step."""
        return self.was != RUNNING

    def describe(self) -> str:
        """What became of the run, in one line."""
        if self.was == QUEUED:
            return f"run {self.run_id} cancelled (it had not started)"
        if self.was == WAITING:
            return f"run {self.run_id} cancelled (it was waiting for approval)"
        if self.was == HELD:
            return f"run {self.run_id} cancelled (it was held)"
        return f"run {self.run_id} will stop at its next step"


@attrs.frozen
class Answered:
    """An approval an operator answered, and its run as the answer left it."""

    approval: Approval
    decision: str
    run: Run

    def describe(self) -> str:
        """The answer and where the run stands, in one line."""
        then = (
            f"run {self.run.id} is queued again"
            if self.run.status == QUEUED
            else f"run {self.run.id} is {self.run.status}"
        )
        return f"approval {self.approval.id} ({self.approval.tool}) {self.decision}; {then}"


# Runs


def cancel_run(run_id: int, *, actor: str) -> Cancelled:
    """Stop run ``run_id``: a queued, waiting or held run at once, a running one at its next step.
    Recorded as ``cancel requested``; ``OperationRefused`` when the run has ended."""
    run = Run.get_or_none(Run.id == run_id)
    if run is None:
        raise NotFound(f"there is no run {run_id}")
    # Recorded only when it changed something: the error undoes the entry.
    with change(actor, "cancel requested", run):
        was = Run.request_cancel(run.id, utcnow())
        if was not in STOPPABLE:  # it ended (perhaps meanwhile): nothing to change
            raise OperationRefused(f"run {run.id} is {was} already: there is nothing to cancel")
    return Cancelled(run.id, str(was))


@attrs.frozen
class Released:
    """Held runs an operator let into the queue (oldest first), and which were asked for."""

    run_ids: tuple[int, ...]
    which: str

    def describe(self) -> str:
        """What was released, in one line."""
        return _held_line(self.run_ids, self.which, "released", "it is queued", "queued")


def _held_line(
    run_ids: tuple[int, ...], which: str, done: str, one: str, many: str, shown: int = 20
) -> str:
    """What an operation on held runs did, in one line: the first ``shown`` ids named,
    then how many more."""
    which = f" {which}" if which else ""
    if not run_ids:
        return f"nothing {done}: no runs{which} are held"
    if len(run_ids) == 1:
        return f"run {run_ids[0]} {done}: {one}"
    named = ", ".join(map(str, run_ids[:shown]))
    more = len(run_ids) - shown
    named += f" and {more:,} more" if more > 0 else ""
    then = f", {many}" if many else ""
    return f"{len(run_ids):,} held runs{which} {done}{then}: runs {named}"


def release_held(
    *,
    actor: str,
    run_ids: Iterable[int] = (),
    agent: Agent | None = None,
    sender: str | None = None,
    everything: bool = False,
    now: datetime.datetime | None = None,
) -> Released:
    """Queue held runs now, whatever the limits say: the runs ``run_ids``, or every held
    run of ``agent`` and/or from ``sender`` (an address; its routing key is compared, its
    proven and unproven mail alike), or ``everything`` held. A run a spending limit stopped
    part way goes on past that limit. They take their senders' fair turns, oldest first.
    Recorded as ``held runs released``. ``NotFound`` for a run id that does not exist and
    ``OperationRefused`` for one that is not held: then nothing is released."""
    wanted = sorted({int(run_id) for run_id in run_ids})
    ways = bool(wanted) + (agent is not None or sender is not None) + everything
    if ways != 1:
        raise ProtegeError(
            "say which held runs to release: run ids, an agent and/or a sender, or all"
        )
    key = None
    if sender is not None:
        key = routing_key(sender) or " ".join(sender.split()).lower()
        if not key:
            raise ProtegeError("the sender is empty: give the address the mail came from")
    with database.atomic():
        if wanted:
            found = {run.id: run for run in Run.select().where(Run.id.in_(wanted))}
            for run_id in wanted:
                run = found.get(run_id)
                if run is None:
                    raise NotFound(f"there is no run {run_id}")
                if run.status != HELD:
                    raise OperationRefused(
                        f"run {run_id} is {run.status}, not held: there is nothing to release"
                    )
            which = ""
        else:
            wanted = holding.held_runs(agent=agent, sender=key)
            which = _which_held(agent, key)
        released = holding.release(wanted, utcnow() if now is None else now, by=actor)
        if released:
            _audit_held(actor, "released", released, which, QUEUED)
    return Released(tuple(released), which)


def _which_held(agent: Agent | None, key: str | None) -> str:
    """How an operator named the held runs they meant: ``of AGENT from SENDER``."""
    parts = (f"of {agent.name}" if agent is not None else "", f"from {key}" if key else "")
    return " ".join(part for part in parts if part)


def _audit_held(actor: str, done: str, runs: list[int], which: str, status: str) -> None:
    """One audit entry for held runs an operator released or cancelled."""
    subject = f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} held runs"
    record(
        actor,
        f"held runs {done}",
        "run",
        f"{subject} {which}".strip(),
        before={"status": HELD, "runs": runs},
        after={"status": status, "runs": runs},
    )


@attrs.frozen
class CancelledHeld:
    """Held runs an operator cancelled (oldest first), and which were asked for."""

    run_ids: tuple[int, ...]
    which: str

    def describe(self) -> str:
        """What was cancelled, in one line."""
        return _held_line(self.run_ids, self.which, "cancelled", "it was held", "")


def cancel_held(
    *,
    actor: str,
    agent: Agent | None = None,
    sender: str | None = None,
    now: datetime.datetime | None = None,
) -> CancelledHeld:
    """Cancel every held run (of ``agent``; from ``sender``, an address, its proven and
    unproven mail alike): a flood's held mail, discarded before any of it is released and
    paid for. One statement, which takes only runs still held when it runs (one released
    meanwhile is left to go on). Recorded as ``held runs cancelled``."""
    p = database.param
    where, values = ["status = " + p], [HELD]
    if agent is not None:
        where.append(f"agent_id = {p}")
        values.append(agent.id)
    key = None
    if sender is not None:
        keys = keys_for(sender)
        key = keys[0]
        if not key:
            raise ProtegeError("the sender is empty: give the address the mail came from")
        where.append(f"sender_key IN ({p}, {p})")
        values += keys
    which = _which_held(agent, key)
    when = utcnow() if now is None else now
    with database.atomic():
        cursor = database.execute_sql(
            f"UPDATE run SET status = {p}, error = {p}, finished_at = {p} "
            f"WHERE {' AND '.join(where)} RETURNING id",
            (CANCELLED, "cancelled by an operator while it was held", when, *values),
        )
        cancelled = sorted(int(row[0]) for row in cursor.fetchall())
        if cancelled:
            _audit_held(actor, "cancelled", cancelled, which, CANCELLED)
    return CancelledHeld(tuple(cancelled), which)


@attrs.frozen
class CircuitsClosed:
    """The model endpoints whose circuit an operator closed."""

    endpoints: tuple[str, ...]

    def describe(self) -> str:
        """What was closed, in one line."""
        if not self.endpoints:
            return "nothing to reset: no model endpoint's circuit is open or failing"
        return "circuit closed, runs are taken again: " + ", ".join(self.endpoints)


def reset_circuit(*, actor: str, now: datetime.datetime | None = None) -> CircuitsClosed:
    """Close every model endpoint's circuit that is open, half-open or counting failures,
    as a success would: for an endpoint that answers again while its circuit (or its
    ``Retry-After``) would keep the workers idle. Should it still fail, the circuit opens
    again after ``circuit_failures`` calls. Recorded as ``model circuit reset``, one entry
    per endpoint, with how it stood."""
    when = utcnow() if now is None else now
    closed = []
    with database.atomic():
        failing = Circuit.select().where((Circuit.state != CLOSED) | (Circuit.failures > 0))
        for found in failing.order_by(Circuit.endpoint):
            if circuit.close(found.endpoint, when):
                closed.append(found.endpoint)
                record(
                    actor,
                    "model circuit reset",
                    "circuit",
                    found.endpoint,
                    before={
                        "state": found.state,
                        "failures": found.failures,
                        "opened": found.opened,
                        "open_until": None
                        if found.open_until is None
                        else found.open_until.isoformat(),
                    },
                    after={"state": CLOSED, "failures": 0, "opened": 0, "open_until": None},
                )
    return CircuitsClosed(tuple(closed))


def queue_responsibility(responsibility: Responsibility) -> Run:
    """Queue a run of ``responsibility`` now, outside its schedule, and return it (the
    workers of ``protege serve`` carry it out, or the caller does). ``OperationRefused``
    while a run of it is queued or running."""
    going = (
        Run.select()
        .where((Run.responsibility == responsibility) & Run.status.in_([QUEUED, RUNNING]))
        .first()
    )
    if going is not None:
        raise OperationRefused(
            f"{responsibility.name!r} has run {going.id} {going.status} already; wait for it to end"
        )
    return queue_scheduled(responsibility)


# Grants


def attach_toolkit(
    agent: Agent, toolkit: Toolkit, *, actor: str, allow_proactive: bool = False
) -> AgentToolkit:
    """Grant ``toolkit`` to ``agent`` with an open sender gate (offered on scheduled runs
    too with ``allow_proactive``); returns the grant. Recorded as ``toolkit attached``."""
    with change(actor, "toolkit attached") as made:
        grant = agent.grant(toolkit, allow_proactive=allow_proactive)
        made.created(grant)
    return grant


def detach_toolkit(grant: AgentToolkit, *, actor: str) -> None:
    """Take a grant's toolkit away from its agent, with its gate rules. Recorded as
    ``toolkit detached``."""
    with change(actor, "toolkit detached", grant):
        grant.delete_instance(recursive=True)


def set_scheduled_runs(grant: AgentToolkit, allowed: bool, *, actor: str) -> None:
    """Whether the grant's tools are offered on the agent's scheduled runs."""
    with change(actor, "scheduled runs allowed" if allowed else "scheduled runs refused", grant):
        grant.allow_proactive = allowed
        grant.save()


def set_whole_archive(grant: AgentToolkit, whole: bool, *, actor: str) -> None:
    """Whether the grant's mail tools reach all of the agent's mail (``whole``), or only
    the mail the run's sender took part in."""
    action = "whole mail archive opened" if whole else "mail scoped to the sender"
    with change(actor, action, grant):
        grant.whole_archive = whole
        grant.save()


# Gate rules (a grant's) and access rules (an agent's)


def _checked_kind(kind: str) -> str:
    if kind not in RULE_KINDS:
        raise ProtegeError(f"a rule is allow or deny, not {kind!r}")
    return kind


def add_gate_rule(grant: AgentToolkit, kind: str, pattern: str, *, actor: str) -> AgentToolkitRule:
    """Add an allow or deny ``pattern`` to the grant's sender gate; returns the rule.
    Recorded as ``rule added``."""
    with change(actor, "rule added", grant):
        return grant.add_rule(_checked_kind(kind), pattern)


def remove_gate_rule(grant: AgentToolkit, kind: str, pattern: str, *, actor: str) -> str:
    """Remove the rule ``kind pattern`` from the grant's sender gate; returns the pattern as
    stored (its normal form). ``NotFound`` when the gate has no such rule."""
    where = f"{grant.toolkit.name} on {grant.agent.name}"
    return _remove(grant, grant.rules, kind, pattern, where, "rule removed", actor)


def add_access_rule(agent: Agent, kind: str, pattern: str, *, actor: str) -> AgentAccessRule:
    """Add an allow or deny ``pattern`` to who may reach ``agent`` at all; returns the rule.
    Recorded as ``access rule added``."""
    with change(actor, "access rule added", agent):
        return agent.add_access_rule(_checked_kind(kind), pattern)


def remove_access_rule(agent: Agent, kind: str, pattern: str, *, actor: str) -> str:
    """Remove the access rule ``kind pattern`` of ``agent``; returns the pattern as stored.
    ``NotFound`` when the agent has no such rule."""
    return _remove(
        agent, agent.access_rules, kind, pattern, agent.name, "access rule removed", actor
    )


def _remove(
    subject: Agent | AgentToolkit,
    rules: Iterable[AgentToolkitRule | AgentAccessRule],
    kind: str,
    pattern: str,
    where: str,
    action: str,
    actor: str,
) -> str:
    wanted = _normalize_pattern(pattern)
    matching = [rule for rule in rules if rule.kind == kind and rule.pattern == wanted]
    if not matching:
        raise NotFound(f"no rule '{kind} {wanted}' on {where}")
    with change(actor, action, subject):
        for rule in matching:
            rule.delete_instance()
    return wanted


# Approvals


def answer_approval(
    approval_id: int, decision: str, *, actor: str, reason: str | None = None
) -> Answered:
    """Approve (``approved``) or deny (``denied``) a waiting call as ``actor``; its run is
    queued again. The approval keeps who answered, when and why (the run's trail shows
    it). ``OperationRefused`` when it was answered or had expired."""
    if decision not in (APPROVED, DENIED):
        raise ProtegeError(f"an approval is approved or denied, not {decision!r}")
    approval = Approval.get_or_none(Approval.id == approval_id)
    if approval is None:
        raise NotFound(f"no approval {approval_id}")
    if approval.status != PENDING:
        raise OperationRefused(f"approval {approval.id} was {approval.status} already")
    if not Approval.answer(approval.id, decision, actor, reason):
        if Approval.get_by_id(approval.id).status == "expired":
            raise OperationRefused(f"approval {approval.id} had expired: nothing decided")
        raise OperationRefused(f"approval {approval.id} was answered meanwhile")
    return Answered(Approval.get_by_id(approval.id), decision, Run.get_by_id(approval.run_id))


def require_grant_approval(
    grant: AgentToolkit,
    *,
    actor: str,
    approvers: Iterable[str] | None = None,
    notify: Iterable[str] | None = None,
    timeout: int | None = None,
    self_approval: bool | None = None,
) -> ApprovalPolicy:
    """Make calls to the grant's tools wait for a yes from a sender matching one of
    ``approvers`` (patterns). What is not given keeps the grant's current approval, or the
    defaults: requests to the approvers that are plain addresses (also when new approvers
    replace the old), a 72-hour timeout, an approver's own call approved at once.
    Recorded as ``approval required``; returns the policy."""
    current = grant.approval
    if approvers is None:
        if current is None:
            raise ProtegeError("say who approves: at least one approver pattern")
        approvers = current.approvers
        if notify is None:  # the same approvers: their requests go where they went
            notify = current.notify
    if timeout is None:
        timeout = current.timeout if current is not None else DEFAULT_APPROVAL_TIMEOUT
    if self_approval is None:
        self_approval = current.self_approval if current is not None else True
    policy = checked_policy(list(approvers), list(notify or ()), timeout, self_approval)
    with change(actor, "approval required", grant):
        grant.require_approval(policy)
    return policy


def clear_grant_approval(grant: AgentToolkit, *, actor: str) -> None:
    """Let the grant's tools run without approval again. Recorded as ``approval no longer
    required``."""
    with change(actor, "approval no longer required", grant):
        grant.require_approval(None)


def require_tool_approval(
    agent: Agent,
    tool_id: str,
    manifest: Manifest,
    *,
    actor: str,
    approvers: Iterable[str],
    notify: Iterable[str] = (),
    timeout: int = DEFAULT_APPROVAL_TIMEOUT,
    self_approval: bool = True,
) -> ApprovalPolicy:
    """Make every call to ``tool_id`` (a tool of ``manifest``) on ``agent``'s runs wait for
    approval, whichever toolkit gives it: no grant can lift it. Recorded as ``approval
    required for a tool``; returns the policy."""
    if tool_id not in manifest:
        hint = did_you_mean(tool_id, manifest.ids())
        raise NotFound(f"no tool {tool_id!r} in the manifest{hint}")
    policy = checked_policy(approvers, notify, timeout, self_approval)
    with change(actor, "approval required for a tool", agent):
        agent.require_approval(tool_id, policy)
    return policy


def unrequire_tool_approval(agent: Agent, tool_id: str, *, actor: str) -> None:
    """Take back ``require_tool_approval`` for ``tool_id`` on ``agent`` (a grant's approval,
    and a tool that requires approval itself, still apply). ``NotFound`` when there is
    none. Recorded as ``approval no longer required for a tool``."""
    if tool_id not in agent.approvals_required():
        raise NotFound(
            f"{tool_id} does not require approval on {agent.name} "
            "(see `protege approvals required`)"
        )
    with change(actor, "approval no longer required for a tool", agent):
        agent.drop_required_approval(tool_id)
