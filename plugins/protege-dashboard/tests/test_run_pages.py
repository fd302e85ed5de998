"""Runs as the harness now leaves them: mail queued for the delivery loop, cancelled runs,
runs that were resumed; and the Cancel button."""

from __future__ import annotations

import html
import json
import re

import pytest

from protege import admin
from protege.delivery import send_pending
from protege.models import Agent, AuditEntry, Event, Message, Run, Toolkit
from protege.testing import run_reply, say, tool_call


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _mail_of(page: str, message: Message) -> str:
    found = re.search(rf'<article class="mail" id="mail-{message.id}">(.*?)</article>', page, re.S)
    assert found, f"no mail {message.id} on the page"
    return _text(found.group(1))


@pytest.fixture
def mailer(installation, scripted_model):
    """Sundae, granted send_email, and the installation a run of her uses (the scripted
    model's, opened once the model is set)."""
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    sundae.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return sundae, admin.open_installation(admin.load_config(), connect=False)


def test_a_run_page_says_where_each_mail_it_queued_stands(signed_in, mailer, scripted_model):
    sundae, running = mailer
    scripted_model.script(tool_call("send_email", mode="reply", body="On its way."), say("Done."))
    run = run_reply(
        sundae, sender="jane@acme.com", body="Refund?", installation=running, send_mail=False
    )
    assert run.status == "done"
    (message,) = Message.select().where(Message.run == run.id)
    page = signed_in.get(f"/runs/{run.id}").text
    shown = _mail_of(page, message)
    assert "Delivery pending : waiting for the delivery loop of protege serve" in shown
    assert "On its way." in _mail_of(page, message)

    send_pending(running.config)  # what the delivery loop does: to the outbox, here
    page = signed_in.get(f"/runs/{run.id}").text
    shown = _mail_of(page, message)
    assert shown.startswith("To jane@acme.com Subject Re: Delivery sent")
    assert "pending" not in shown


def test_a_failed_mail_shows_why_and_each_refused_recipient(signed_in, scoop):
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="jane@acme.com",
        to_addresses=[scoop.address],
        message_id="<1@acme.com>",
        thread_key="<1@acme.com>",
    )
    run = Run.create(agent=scoop, kind="reply", message=inbound, correlation_id="c1")
    # What the delivery loop records when the relay refuses every recipient.
    failed = Message.create(
        agent=scoop,
        direction="outbound",
        sender=scoop.address,
        to_addresses=["jane@acme.com", "<b>x</b>@acme.com"],
        subject="Re: Hi",
        body_text="Hello",
        message_id="<2@thescoop.example>",
        thread_key="<1@acme.com>",
        run=run.id,
        status="failed",
        delivery_attempts=3,
        delivery_error="the relay refused every recipient",
        refused_recipients=[
            {"address": "jane@acme.com", "code": 550, "reason": "no such user"},
            {"address": "<b>x</b>@acme.com", "code": 553, "reason": "bad\r\naddress"},
        ],
    )
    page = signed_in.get(f"/runs/{run.id}").text
    shown = _mail_of(page, failed)
    assert "Delivery failed after 3 tries: the relay refused every recipient" in shown
    assert "Refused jane@acme.com (550 no such user); <b>x</b>@acme.com (553 bad\\r\\naddress)" in (
        shown
    )
    assert "<b>x</b>" not in page  # outside text stays text


def test_events_of_resumed_and_cancelled_runs_are_shown(signed_in, scoop):
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="jane@acme.com",
        message_id="<1@acme.com>",
        thread_key="<1@acme.com>",
    )
    run = Run.create(
        agent=scoop,
        kind="reply",
        message=inbound,
        correlation_id="c1",
        status="cancelled",
        error="cancelled by an operator",
    )
    written = [  # as the harness writes them
        ("resumed", {"attempt": 2, "reason": "its worker stopped renewing the lease"}),
        ("cancelled", {"reason": "cancelled by an operator"}),
    ]
    assert {kind for kind, _ in written} <= set(admin.EVENT_KINDS)
    for seq, (kind, payload) in enumerate(written, start=1):
        Event.create(run=run, seq=seq, kind=kind, payload_json=json.dumps(payload))
    page = signed_in.get(f"/runs/{run.id}")
    assert page.status_code == 200
    text = _text(page.text)
    assert "resumed (attempt 2): its worker stopped renewing the lease" in text
    assert "cancelled: cancelled by an operator" in text
    assert 'id="cancel-run"' not in page.text  # an ended run has nothing to cancel

    listed = signed_in.get("/runs?status=cancelled").text
    assert f'id="run-{run.id}"' in listed
    assert "<option selected>cancelled</option>" in listed
    assert f'id="run-{run.id}"' not in signed_in.get("/runs?status=done").text


def _cancel(client, run, token_of):
    page = client.get(f"/runs/{run.id}")
    assert 'id="cancel-run"' in page.text
    return client.post(f"/runs/{run.id}/cancel", data={"csrf_token": token_of(page.text)})


def test_cancel_ends_a_queued_run_at_once_and_is_audited(signed_in, scoop, token_of):
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="j@acme.com",
        message_id="<1@a>",
        thread_key="<1@a>",
    )
    run = Run.create(agent=scoop, kind="reply", message=inbound, correlation_id="c1")
    answer = _cancel(signed_in, run, token_of)
    assert answer.url.path == f"/runs/{run.id}"
    assert f"run {run.id} cancelled (it had not started)" in answer.text
    assert Run.get_by_id(run.id).status == "cancelled"
    (entry,) = AuditEntry.select()
    assert (entry.actor, entry.action, entry.subject) == (
        "operator:mara",
        "cancel requested",
        f"run {run.id} of Sundae",
    )
    assert (entry.before["status"], entry.after["status"]) == ("queued", "cancelled")
    assert "cancel requested" in signed_in.get("/audit").text


def test_cancel_asks_a_running_run_to_stop_and_refuses_an_ended_one(signed_in, scoop, token_of):
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="j@acme.com",
        message_id="<1@a>",
        thread_key="<1@a>",
    )
    run = Run.create(agent=scoop, kind="reply", message=inbound, correlation_id="c1")
    stale = signed_in.get(f"/runs/{run.id}").text  # the page as the operator saw it
    Run.claim(run.id, "some-worker", Run.get_by_id(run.id).created_at, 60)
    answer = _cancel(signed_in, run, token_of)
    assert f"run {run.id} will stop at its next step" in answer.text
    assert Run.get_by_id(run.id).cancel_requested_at is not None
    assert 'id="cancel-requested"' in answer.text
    assert AuditEntry.select().count() == 1

    Run.get_by_id(run.id).finish("done", owner="some-worker")
    late = signed_in.post(f"/runs/{run.id}/cancel", data={"csrf_token": token_of(stale)})
    assert f"run {run.id} is done already: there is nothing to cancel" in late.text
    assert AuditEntry.select().count() == 1  # nothing changed, nothing recorded


def test_cancel_needs_the_csrf_token(signed_in, scoop):
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="j@acme.com",
        message_id="<1@a>",
        thread_key="<1@a>",
    )
    run = Run.create(agent=scoop, kind="reply", message=inbound, correlation_id="c1")
    assert signed_in.post(f"/runs/{run.id}/cancel", data={}).status_code == 403
    assert signed_in.post(f"/runs/{run.id}/cancel", data={"csrf_token": "x"}).status_code == 403
    assert Run.get_by_id(run.id).status == "queued"
    assert AuditEntry.select().count() == 0


def test_a_run_page_shows_the_sender_verdict_of_the_mail_it_answered(signed_in, scoop):
    from protege.authentication import MethodResult, Verdict

    forged = Verdict(
        authenticated=False,
        domain=None,
        method="none",
        dmarc="fail",
        policy="none",
        results=(MethodResult("dkim", "fail", "<b>thescoop.com</b>", True, "body hash mismatch"),),
        from_domain="thescoop.com",
        reason="nothing aligned with thescoop.com passed",
    )
    inbound = Message.create(
        agent=scoop,
        direction="inbound",
        sender="mara@thescoop.com",
        to_addresses=[scoop.address],
        message_id="<1@thescoop.com>",
        thread_key="<1@thescoop.com>",
        authentication=json.dumps(forged.as_json()),
    )
    run = Run.create(agent=scoop, kind="reply", message=inbound, correlation_id="c1")
    page = signed_in.get(f"/runs/{run.id}").text
    found = re.search(r'<dd id="sender-verdict" class="unproven">(.*?)</dd>', page, re.S)
    assert found, "no sender verdict on the page"
    shown = _text(found.group(1))
    assert shown.startswith("not authenticated; DMARC fail (policy none).")
    assert "dkim fail for <b>thescoop.com</b> (aligned): body hash mismatch" in shown
    assert "<b>thescoop.com</b>" not in found.group(1)  # escaped, never markup


def test_a_message_that_started_no_run_shows_its_verdict_and_flags(signed_in, scoop):
    from protege.authentication import unverified

    forged = unverified(
        "nothing aligned with bank.example passed", "bank.example", dmarc="fail", policy="reject"
    )
    stored = Message.create(
        agent=scoop,
        direction="inbound",
        status="ignored",
        sender="alerts@bank.example",
        to_addresses=[scoop.address],
        subject="Locked <account>",
        message_id="<9@bank.example>",
        thread_key="<9@bank.example>",
        flags=["sender authentication: fails DMARC for bank.example, whose policy is reject"],
        authentication=json.dumps(forged.as_json()),
    )
    page = signed_in.get(f"/messages/{stored.id}")
    assert page.status_code == 200
    shown = _text(page.text)
    assert "Message " + str(stored.id) + ": inbound, ignored, for" in shown
    assert "no run answered it" in shown
    assert "not authenticated; DMARC fail (policy reject)." in shown
    assert "whose policy is reject" in shown
    assert "Locked <account>" in shown
    assert "<account>" not in page.text  # escaped
    assert signed_in.get("/messages/999999").status_code == 404


def test_a_run_page_links_the_message_it_answered(signed_in, mailer, scripted_model):
    sundae, running = mailer
    scripted_model.script(say("Done."))
    run = run_reply(sundae, sender="jane@acme.com", body="Hi", installation=running)
    page = signed_in.get(f"/runs/{run.id}").text
    assert f'<a href="/messages/{run.message_id}">' in page
    message_page = _text(signed_in.get(f"/messages/{run.message_id}").text)
    assert f"answered by run {run.id}" in message_page
    assert "authenticated: acme.com by operator" in message_page
