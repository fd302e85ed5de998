"""Approval in the dashboard: the policy on Configure Access Settings, and approving or
denying waiting calls, as the command line does."""

from __future__ import annotations

import datetime
import html
import re

from protege.models import AgentToolkit, Approval, AuditEntry, Message, Run, Toolkit


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _post(client, page_path, target, token_of, **fields):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(target, data={"csrf_token": token_of(page.text), **fields})


def _grant_path(agent):
    grant = agent.grant_of(Toolkit.named("Finance"))
    return grant, f"/agents/{agent.id}/grants/{grant.id}"


def _waiting(agent, arguments='{"order_number": "SCP-1042"}') -> Approval:
    message = Message.create(
        agent=agent,
        direction="inbound",
        sender="jane@acme.example",
        to_addresses=[agent.address],
        subject="Refund",
        body_text="Refund please",
        message_id="<1@acme.example>",
        thread_key="<1@acme.example>",
    )
    run = Run.create(
        agent=agent, kind="reply", message=message, correlation_id="c1", status="waiting"
    )
    return Approval.create(
        run=run,
        call_id="call_1",
        tool="process_refund",
        arguments=arguments,
        approvers=["*@thescoop.com"],
        notified=["mara@thescoop.com"],
        requested_by="jane@acme.example",
        expires_at=datetime.datetime(2030, 1, 1),
    )


def test_the_grant_page_sets_and_clears_the_approval_policy(signed_in, scoop, token_of):
    grant, here = _grant_path(scoop)
    assert "No approval: the tools run as soon as they are called." in signed_in.get(here).text
    answer = _post(
        signed_in,
        here,
        f"{here}/approval",
        token_of,
        action="save",
        approvers="*@TheScoop.com",
        notify="boss@thescoop.com",
        timeout_hours="48",
    )
    assert answer.status_code == 200  # followed to the page
    text = _text(answer.text)
    assert "tools wait for approval by *@thescoop.com" in text
    assert (
        "Calls wait for a yes from *@thescoop.com; requests go to boss@thescoop.com; refused "
        "after 48 h unanswered; someone other than the asker must approve."
        in " ".join(text.split())
    )
    policy = AgentToolkit.get_by_id(grant.id).approval
    assert (policy.approvers, policy.notify, policy.timeout, policy.self_approval) == (
        ("*@thescoop.com",),
        ("boss@thescoop.com",),
        48 * 3600,
        False,
    )
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).get()
    assert (entry.action, entry.actor) == ("approval required", "operator:mara")
    cleared = _post(signed_in, here, f"{here}/approval", token_of, action="clear")
    assert "tools run without approval" in cleared.text
    assert AgentToolkit.get_by_id(grant.id).approval is None


def test_a_policy_that_cannot_work_is_refused_and_nothing_changes(signed_in, scoop, token_of):
    grant, here = _grant_path(scoop)
    answer = _post(
        signed_in,
        here,
        f"{here}/approval",
        token_of,
        action="save",
        approvers="*@thescoop.com",
        timeout_hours="48",
    )
    assert answer.status_code == 422
    assert "say where approval requests go" in _text(answer.text)
    assert 'class="flash"' not in answer.text  # an error, never a green notice
    # The form holds what was typed, to be put right rather than typed again.
    assert 'id="approval-approvers" placeholder="*@example.com" value="*@thescoop.com"' in (
        answer.text
    )
    assert 'id="approval-timeout" type="number" min="1" value="48"' in answer.text
    assert 'id="approval-self" >' in answer.text  # unchecked, as it was sent
    assert AgentToolkit.get_by_id(grant.id).approval is None
    assert AuditEntry.select().count() == 0


def test_a_waiting_call_is_approved_from_the_approvals_page(signed_in, scoop, token_of):
    approval = _waiting(scoop)
    page = _text(signed_in.get("/approvals").text)
    assert "process_refund" in page
    assert '{"order_number": "SCP-1042"}' in page
    answer = _post(
        signed_in,
        "/approvals",
        f"/approvals/{approval.id}/answer",
        token_of,
        decision="approve",
        back="/approvals",
    )
    assert f"approval {approval.id} (process_refund) approved; run 1 is queued" in answer.text
    decided = Approval.get_by_id(approval.id)
    assert (decided.status, decided.answered_by) == ("approved", "operator:mara")
    assert Run.get_by_id(approval.run_id).status == "queued"
    assert "No calls are waiting for approval." in signed_in.get("/approvals").text
    again = _post(
        signed_in,
        "/approvals?all=1",
        f"/approvals/{approval.id}/answer",
        token_of,
        decision="deny",
    )
    assert f"approval {approval.id} was approved already" in again.text
    assert Approval.get_by_id(approval.id).status == "approved"


def test_approving_past_the_deadline_from_the_page_says_it_expired_and_decides_nothing(
    signed_in, scoop, token_of
):
    approval = _waiting(scoop)
    Approval.update(expires_at=datetime.datetime(2020, 1, 1)).where(
        Approval.id == approval.id
    ).execute()  # the scheduler has not passed since its deadline
    answer = _post(
        signed_in,
        "/approvals",
        f"/approvals/{approval.id}/answer",
        token_of,
        decision="approve",
        back="/approvals",
    )
    assert f"approval {approval.id} had expired: nothing decided" in answer.text
    assert Approval.get_by_id(approval.id).status == "expired"


def test_a_waiting_call_is_denied_from_its_run_page_with_a_reason(signed_in, scoop, token_of):
    approval = _waiting(scoop, arguments='{"order_number": "<script>alert(1)</script>"}')
    run_page = signed_in.get(f"/runs/{approval.run_id}").text
    assert "<script>alert(1)" not in run_page
    assert f'id="deny-{approval.id}"' in run_page
    answer = _post(
        signed_in,
        f"/runs/{approval.run_id}",
        f"/approvals/{approval.id}/answer",
        token_of,
        decision="deny",
        reason="no photo",
        back=f"/runs/{approval.run_id}",
    )
    assert answer.url.path == f"/runs/{approval.run_id}"
    decided = Approval.get_by_id(approval.id)
    assert (decided.status, decided.reason) == ("denied", "no photo")


def test_answering_needs_the_form_token(signed_in, scoop):
    approval = _waiting(scoop)
    answer = signed_in.post(f"/approvals/{approval.id}/answer", data={"decision": "approve"})
    assert answer.status_code == 403
    assert Approval.get_by_id(approval.id).status == "pending"
