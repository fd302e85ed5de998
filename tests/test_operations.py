"""The operator's operations, called as the command line and the dashboard call them: each
checks what it is asked, makes the change, and records it in the audit log under its actor
(or changes and records nothing, with an error saying why)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from protege import operations
from protege.errors import ProtegeError
from protege.models import (
    Agent,
    AgentToolkit,
    Approval,
    AuditEntry,
    Responsibility,
    Run,
    Toolkit,
)
from protege.models.base import utcnow

ACTOR = "operator:mara"


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example", instructions="Help.")


@pytest.fixture
def finance(sundae):
    toolkit = Toolkit.create(name="Finance", member_tool_ids=["send_email"])
    return toolkit


def _run(agent, status="queued"):
    duty = Responsibility.create(agent=agent, name=uuid.uuid4().hex, prompt="Report.")
    return Run.create(
        agent=agent,
        kind="scheduled",
        responsibility=duty,
        status=status,
        correlation_id=uuid.uuid4().hex,
    )


def _entries():
    return [(e.actor, e.action, e.subject) for e in AuditEntry.select().order_by(AuditEntry.id)]


def _approval(run, *, expires_in=datetime.timedelta(hours=1)):
    return Approval.create(
        run=run,
        call_id="call-1",
        tool="send_email",
        arguments="{}",
        approvers=["boss@thescoop.example"],
        notified=["boss@thescoop.example"],
        requested_by="jane@thescoop.example",
        expires_at=utcnow() + expires_in,
    )


# Runs


@pytest.mark.parametrize(
    ("status", "was", "line"),
    [
        ("queued", "queued", "cancelled (it had not started)"),
        ("waiting", "waiting", "cancelled (it was waiting for approval)"),
        ("running", "running", "will stop at its next step"),
    ],
)
def test_cancelling_a_run_says_what_it_was_and_is_audited(sundae, status, was, line):
    run = _run(sundae, status)
    cancelled = operations.cancel_run(run.id, actor=ACTOR)
    assert (cancelled.was, cancelled.at_once) == (was, status != "running")
    assert cancelled.describe() == f"run {run.id} {line}"
    stored = Run.get_by_id(run.id)
    if status == "running":
        assert (stored.status, stored.cancel_requested_at is not None) == ("running", True)
    else:
        assert stored.status == "cancelled"
    assert _entries() == [(ACTOR, "cancel requested", f"run {run.id} of Sundae")]


def test_cancelling_an_ended_run_is_refused_and_records_nothing(sundae):
    run = _run(sundae, "done")
    with pytest.raises(operations.OperationRefused, match="is done already: there is nothing"):
        operations.cancel_run(run.id, actor=ACTOR)
    assert (Run.get_by_id(run.id).status, _entries()) == ("done", [])


def test_cancelling_a_run_that_is_not_there_says_so(protege_db):
    with pytest.raises(operations.NotFound, match="there is no run 404"):
        operations.cancel_run(404, actor=ACTOR)


def test_a_responsibility_is_queued_now_unless_a_run_of_it_is_going(sundae):
    duty = Responsibility.create(agent=sundae, name="report", prompt="Report.")
    run = operations.queue_responsibility(duty)
    assert (run.status, run.kind, run.responsibility_id, run.due_at) == (
        "queued",
        "scheduled",
        duty.id,
        None,
    )
    with pytest.raises(operations.OperationRefused) as refused:
        operations.queue_responsibility(duty)
    assert str(refused.value) == f"'report' has run {run.id} queued already; wait for it to end"
    assert Run.select().count() == 1
    Run.update(status="done").where(Run.id == run.id).execute()
    assert operations.queue_responsibility(duty).id != run.id


# Grants


def test_a_toolkit_is_attached_and_detached_with_both_audited(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR, allow_proactive=True)
    assert (grant.agent_id, grant.toolkit_id, grant.allow_proactive) == (
        sundae.id,
        finance.id,
        True,
    )
    operations.add_gate_rule(grant, "allow", "*@thescoop.example", actor=ACTOR)
    operations.detach_toolkit(grant, actor=ACTOR)
    assert AgentToolkit.get_or_none(AgentToolkit.id == grant.id) is None
    assert [action for _, action, _ in _entries()] == [
        "toolkit attached",
        "rule added",
        "toolkit detached",
    ]
    assert {subject for _, _, subject in _entries()} == {"Finance on Sundae"}


def test_attaching_a_toolkit_twice_is_an_error_and_records_nothing_more(sundae, finance):
    operations.attach_toolkit(sundae, finance, actor=ACTOR)
    with pytest.raises(ProtegeError, match="'Finance' is already attached to Sundae"):
        operations.attach_toolkit(sundae, finance, actor=ACTOR)
    assert len(_entries()) == 1


def test_a_grants_scheduled_runs_and_mail_reach_are_set_and_audited(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    operations.set_scheduled_runs(grant, True, actor=ACTOR)
    operations.set_whole_archive(grant, True, actor=ACTOR)
    stored = AgentToolkit.get_by_id(grant.id)
    assert (stored.allow_proactive, stored.whole_archive) == (True, True)
    operations.set_scheduled_runs(grant, False, actor=ACTOR)
    operations.set_whole_archive(grant, False, actor=ACTOR)
    stored = AgentToolkit.get_by_id(grant.id)
    assert (stored.allow_proactive, stored.whole_archive) == (False, False)
    assert [action for _, action, _ in _entries()][1:] == [
        "scheduled runs allowed",
        "whole mail archive opened",
        "scheduled runs refused",
        "mail scoped to the sender",
    ]


# Gate and access rules


def test_gate_rules_are_added_and_removed_by_kind_and_pattern(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    rule = operations.add_gate_rule(grant, "allow", "*@TheScoop.example", actor=ACTOR)
    assert str(rule) == "allow *@thescoop.example"
    removed = operations.remove_gate_rule(grant, "allow", "*@THESCOOP.example", actor=ACTOR)
    assert (removed, list(grant.rules)) == ("*@thescoop.example", [])
    assert [action for _, action, _ in _entries()] == [
        "toolkit attached",
        "rule added",
        "rule removed",
    ]


def test_removing_a_gate_rule_that_is_not_there_says_so_and_records_nothing(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    operations.add_gate_rule(grant, "allow", "*@thescoop.example", actor=ACTOR)
    with pytest.raises(operations.NotFound, match=r"no rule 'deny \*@thescoop.example' on Fin"):
        operations.remove_gate_rule(grant, "deny", "*@thescoop.example", actor=ACTOR)
    assert len(_entries()) == 2


@pytest.mark.parametrize(
    ("kind", "pattern", "said"),
    [("maybe", "*@x.example", "a rule is allow or deny"), ("deny", "a*b*@x", "not a rule")],
)
def test_a_bad_rule_is_refused_and_nothing_is_recorded(sundae, finance, kind, pattern, said):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    with pytest.raises(ProtegeError, match=said):
        operations.add_gate_rule(grant, kind, pattern, actor=ACTOR)
    with pytest.raises(ProtegeError, match=said):
        operations.add_access_rule(sundae, kind, pattern, actor=ACTOR)
    assert (list(grant.rules), list(sundae.access_rules), len(_entries())) == ([], [], 1)


def test_access_rules_are_added_and_removed_and_audited_on_the_agent(sundae):
    rule = operations.add_access_rule(sundae, "deny", "spam@x.example", actor=ACTOR)
    assert str(rule) == "deny spam@x.example"
    assert not sundae.admits("spam@x.example").admitted
    assert operations.remove_access_rule(sundae, "deny", "spam@x.example", actor=ACTOR) == (
        "spam@x.example"
    )
    assert sundae.admits("spam@x.example").admitted
    with pytest.raises(operations.NotFound, match=r"no rule 'deny spam@x\.example' on Sundae"):
        operations.remove_access_rule(sundae, "deny", "spam@x.example", actor=ACTOR)
    assert _entries() == [
        (ACTOR, "access rule added", "Sundae"),
        (ACTOR, "access rule removed", "Sundae"),
    ]


# Approvals


@pytest.mark.parametrize("decision", ["approved", "denied"])
def test_answering_an_approval_wakes_its_run(sundae, decision):
    run = _run(sundae, "waiting")
    approval = _approval(run)
    answered = operations.answer_approval(approval.id, decision, actor=ACTOR, reason="fine")
    assert (answered.approval.status, answered.approval.answered_by) == (decision, ACTOR)
    assert answered.run.status == "queued"
    assert answered.describe() == (
        f"approval {approval.id} (send_email) {decision}; run {run.id} is queued again"
    )


def test_an_approval_is_answered_once(sundae):
    approval = _approval(_run(sundae, "waiting"))
    operations.answer_approval(approval.id, "approved", actor=ACTOR)
    with pytest.raises(operations.OperationRefused, match="was approved already"):
        operations.answer_approval(approval.id, "denied", actor="operator:other")
    assert (
        Approval.get_by_id(approval.id).status,
        Approval.get_by_id(approval.id).answered_by,
    ) == (
        "approved",
        ACTOR,
    )


def test_an_answer_past_the_deadline_decides_nothing(sundae):
    approval = _approval(_run(sundae, "waiting"), expires_in=-datetime.timedelta(minutes=1))
    with pytest.raises(operations.OperationRefused, match="had expired: nothing decided"):
        operations.answer_approval(approval.id, "approved", actor=ACTOR)
    assert Approval.get_by_id(approval.id).status == "expired"


def test_an_approval_is_approved_or_denied_nothing_else(sundae):
    approval = _approval(_run(sundae, "waiting"))
    with pytest.raises(ProtegeError, match="approved or denied, not 'expired'"):
        operations.answer_approval(approval.id, "expired", actor=ACTOR)
    with pytest.raises(operations.NotFound, match="no approval 999"):
        operations.answer_approval(999, "approved", actor=ACTOR)
    assert Approval.get_by_id(approval.id).status == "pending"


def test_a_grants_approval_is_required_changed_in_part_and_cleared(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    policy = operations.require_grant_approval(
        grant, actor=ACTOR, approvers=["*@thescoop.example"], notify=["boss@thescoop.example"]
    )
    assert (policy.approvers, policy.notify, policy.timeout, policy.self_approval) == (
        ("*@thescoop.example",),
        ("boss@thescoop.example",),
        72 * 3600,
        True,
    )
    # What is not given is kept: the approvers and where their requests go.
    changed = operations.require_grant_approval(grant, actor=ACTOR, timeout=3600)
    assert (changed.approvers, changed.notify, changed.timeout) == (
        ("*@thescoop.example",),
        ("boss@thescoop.example",),
        3600,
    )
    # New approvers send their requests to themselves unless told otherwise.
    moved = operations.require_grant_approval(grant, actor=ACTOR, approvers=["ann@x.example"])
    assert (moved.notify, moved.timeout) == (("ann@x.example",), 3600)
    operations.clear_grant_approval(grant, actor=ACTOR)
    assert AgentToolkit.get_by_id(grant.id).approval is None
    assert [action for _, action, _ in _entries()][1:] == [
        "approval required",
        "approval required",
        "approval required",
        "approval no longer required",
    ]


def test_a_grants_approval_needs_approvers_and_a_working_policy(sundae, finance):
    grant = operations.attach_toolkit(sundae, finance, actor=ACTOR)
    with pytest.raises(ProtegeError, match="say who approves"):
        operations.require_grant_approval(grant, actor=ACTOR, timeout=3600)
    with pytest.raises(ProtegeError, match="is not among the approvers"):
        operations.require_grant_approval(
            grant, actor=ACTOR, approvers=["*@thescoop.example"], notify=["boss@else.example"]
        )
    assert (AgentToolkit.get_by_id(grant.id).approval, len(_entries())) == (None, 1)


def test_a_tool_is_made_to_wait_for_approval_on_an_agent_and_let_go(protege_app, sundae):
    manifest = protege_app.manifest
    tool = manifest.tools[0].id
    policy = operations.require_tool_approval(
        sundae, tool, manifest, actor=ACTOR, approvers=["boss@thescoop.example"]
    )
    assert sundae.approvals_required() == {tool: policy}
    operations.unrequire_tool_approval(sundae, tool, actor=ACTOR)
    assert sundae.approvals_required() == {}
    with pytest.raises(operations.NotFound, match=f"{tool} does not require approval on Sundae"):
        operations.unrequire_tool_approval(sundae, tool, actor=ACTOR)
    with pytest.raises(operations.NotFound, match="no tool 'nope' in the manifest"):
        operations.require_tool_approval(
            sundae, "nope", manifest, actor=ACTOR, approvers=["boss@thescoop.example"]
        )
    assert _entries() == [
        (ACTOR, "approval required for a tool", "Sundae"),
        (ACTOR, "approval no longer required for a tool", "Sundae"),
    ]
