"""Each kind of event has one readable line, and no payload, however odd, breaks it."""

import json

import attrs
import pytest

from protege.harness import events
from protege.harness.events import render

# One payload per kind, shaped as the harness records it today.
RECORDED = {
    events.MODEL_REQUEST: (
        {"turn": 2, "model": "m", "messages": 5, "tools": ["lookup_order", "send_email"]},
        "model request, turn 2: 5 messages; tools: lookup_order, send_email",
    ),
    events.MODEL_RESPONSE: (
        {
            "turn": 1,
            "content": "Let me\nlook.",
            "tool_calls": [{"id": "c1", "function": {"name": "lookup_order", "arguments": "{}"}}],
            "usage": {"total_tokens": 42},
            "latency_ms": 12.5,
            "model": "m",
        },
        "model says Let me look. calls lookup_order (42 tokens, 12.5 ms)",
    ),
    events.TOOL_CALL: (
        {"call_id": "c1", "tool": "lookup_order", "arguments": '{"order_number": "SCP-1"}'},
        '  call lookup_order {"order_number": "SCP-1"}',
    ),
    events.TOOL_REFUSED: (
        {"call_id": "c1", "tool": "process_refund", "reason": "not available"},
        "  REFUSED process_refund: not available",
    ),
    events.TOOL_RESULT: (
        {"call_id": "c1", "tool": "web_fetch", "ok": True, "trust": "untrusted", "content": "{}"},
        "  ok (untrusted): {}",
    ),
    events.BUDGET_EXHAUSTED: (
        {"budget": "max_model_turns", "limit": 20},
        "budget exhausted: max_model_turns (20)",
    ),
    events.DELIVERY: (
        {
            "status": "sent",
            "message_id": "<m1@thescoop.example>",
            "to": ["jane@acme.com"],
            "cc": ["mara@thescoop.com"],
            "bcc": [],
            "subject": "Re: Order",
        },
        "  delivery sent to jane@acme.com cc mara@thescoop.com, subject Re: Order "
        "<m1@thescoop.example>",
    ),
    events.ERROR: ({"error": "the model endpoint refused the API key (401)"}, None),
    events.RESUMED: (
        {"attempt": 2, "reason": "taken over: its worker stopped renewing the lease"},
        "resumed (attempt 2): taken over: its worker stopped renewing the lease",
    ),
    events.CANCELLED: (
        {"reason": "cancelled by an operator"},
        "cancelled: cancelled by an operator",
    ),
    events.APPROVAL_REQUESTED: (
        {
            "approval": 3,
            "call_id": "c1",
            "tool": "process_refund",
            "approvers": ["*@thescoop.com"],
            "notified": ["mara@thescoop.com"],
            "requested_by": "jane@acme.com",
            "expires_at": "2026-03-05T10:00:00",
        },
        "  approval 3 requested for process_refund from *@thescoop.com (mailed to "
        "mara@thescoop.com), on behalf of jane@acme.com, until 2026-03-05T10:00:00",
    ),
    events.APPROVAL_ANSWERED: (
        {
            "approval": 3,
            "tool": "process_refund",
            "decision": "denied",
            "by": "mara@thescoop.com",
            "reason": "not\nthis one",
        },
        "approval 3 for process_refund denied by mara@thescoop.com: not this one",
    ),
    events.APPROVAL_EXPIRED: (
        {"approval": 3, "tool": "process_refund", "expired_at": "2026-03-05T10:00:00"},
        "approval 3 for process_refund expired unanswered at 2026-03-05T10:00:00",
    ),
    events.WAITING: ({"approvals": [3]}, "waiting for approval (3)"),
    events.LIMIT_REACHED: (
        {
            "limit": "agent_tokens_per_day",
            "allowed": 1000,
            "used": 1200,
            "subject": "the agent",
            "window_start": "2026-03-05T00:00:00",
            "until": "2026-03-06T00:00:00",
            "reason": "agent_tokens_per_day reached by the agent (1,200 of 1,000); "
            "held until 2026-03-06 00:00 UTC",
        },
        "limit reached, the run is held: agent_tokens_per_day reached by the agent "
        "(1,200 of 1,000); held until 2026-03-06 00:00 UTC",
    ),
    events.MODEL_UNAVAILABLE: (
        {"error": "the model endpoint answered 503: busy", "retry_after": 20.0, "circuit": "open"},
        "model endpoint unavailable, back to the queue: the model endpoint answered 503: busy "
        "(it asked for 20.0 s); circuit open",
    ),
}


def test_every_kind_has_a_rendering_and_a_recorded_example():
    assert set(events.KINDS) == set(RECORDED)


@pytest.mark.parametrize("kind", sorted(RECORDED))
def test_each_kind_renders_as_recorded(kind):
    payload, expected = RECORDED[kind]
    line = render(kind, payload)
    assert line == (expected or f"error: {payload['error']}")


def test_a_failed_delivery_shows_its_error():
    line = render(
        events.DELIVERY,
        {"status": "failed", "to": ["a@b.example"], "error": "550 no such user", "subject": ""},
    )
    assert line == "  delivery failed to a@b.example: 550 no such user"


def test_a_repeated_delivery_says_it_was_not_sent_again():
    line = render(events.DELIVERY, {"status": "sent", "to": ["a@b.example"], "repeated": True})
    assert line == "  delivery sent to a@b.example (sent earlier by this call, not again)"


def test_a_failed_tool_result():
    line = render(events.TOOL_RESULT, {"ok": False, "content": '{"reason": "no"}'})
    assert line == '  failed: {"reason": "no"}'


def test_long_text_is_cut_to_one_line():
    line = render(events.TOOL_CALL, {"tool": "t", "arguments": "x\n" * 500})
    assert "\n" not in line
    assert line.endswith("…")
    assert len(line) == len("  call t ") + events.EXCERPT


ODD_PAYLOADS = [
    {},
    None,
    [],
    "a string",
    42,
    {"unexpected": True},
    {key: None for key in ("turn", "tools", "content", "tool_calls", "usage", "ok", "to")},
    {"tools": "lookup_order", "tool_calls": "nope", "usage": [], "to": "a@b.example"},
    {"tool_calls": [None, 3, {"function": None}], "content": {"nested": ["x"]}},
    {"mail": {"to": ["a@b.example"]}},  # a delivery as an older version described it
]


@pytest.mark.parametrize("payload", ODD_PAYLOADS, ids=repr)
@pytest.mark.parametrize("kind", sorted(RECORDED))
def test_odd_payloads_render_without_raising(kind, payload):
    line = render(kind, payload)
    assert isinstance(line, str)
    assert line.strip()
    assert "\n" not in line


def test_missing_keys_show_as_unknown_not_as_errors():
    assert render(events.MODEL_REQUEST, {}) == "model request, turn ?: ? messages; tools: none"
    assert render(events.TOOL_RESULT, {}) == "  unknown outcome: "
    assert render(events.DELIVERY, {}) == "  delivery (status unknown)"
    assert render(events.ERROR, {}) == "error: no reason recorded"


def test_an_unknown_kind_shows_its_name_and_payload():
    assert render("escalation_requested", {"to": "boss@x"}) == (
        'escalation_requested: {"to": "boss@x"}'
    )
    assert render("weird", {"obj": object}).startswith("weird: {")


HOSTILE_TEXT = "x\n   9   ok: refund approved\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e"


@pytest.mark.parametrize("kind", [*events.KINDS, "no_such_kind"])
def test_no_rendering_lets_line_breaks_or_terminal_controls_through(kind):
    payload = {
        key: HOSTILE_TEXT
        for key in ("tool", "reason", "content", "arguments", "error", "subject", "status")
    }
    payload["tool_calls"] = [{"function": {"name": HOSTILE_TEXT}}]
    line = events.render(kind, payload)
    assert not any(ch in line for ch in "\n\r\x1b\x07\x9b\u202e")


def test_controls_are_shown_escaped_not_dropped():
    line = events.render(events.TOOL_REFUSED, {"tool": "x\n9 ok", "reason": "\x1b[2J"})
    assert line == "  REFUSED x\\n9 ok: \\x1b[2J"


@pytest.mark.parametrize("kind", events.KINDS)
def test_every_kind_reads_back_what_was_written(kind):
    cls = events.CLASSES[kind]
    written = cls.from_payload(RECORDED[kind][0])
    stored = json.loads(events.to_json(written.as_json()))
    assert events.read(kind, stored) == written
    payload, expected = RECORDED[kind]
    assert render(kind, stored) == (expected or f"error: {payload['error']}")


def test_an_unknown_kind_is_kept_as_it_is():
    event = events.read("escalation_requested", {"approver": "boss@thescoop.com"})
    assert isinstance(event, events.UnknownEvent)
    assert event.as_json() == {"approver": "boss@thescoop.com"}


def test_a_tool_result_that_showed_files_names_them():
    line = events.render(
        "tool_result",
        {
            "ok": True,
            "trust": "untrusted",
            "content": '{"ok": true}',
            "parts": [{"kind": "image", "filename": "photo.png"}, {"kind": "pdf"}],
        },
    )
    assert line == '  ok (untrusted) [files: photo.png, pdf]: {"ok": true}'


def test_a_real_delivery_outcome_fits_the_delivery_event(protege_app):
    from protege.models import Agent

    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    outcome = protege_app.queue_mail(
        agent=agent, run=None, mail={"to": ["jane@acme.com"], "subject": "s", "body": "b"}
    )
    fields = {field.name for field in attrs.fields(events.Delivery)}
    assert set(outcome) <= fields  # nothing the gateway reports is lost from the trail
    assert events.Delivery.from_payload(outcome).status == "queued"


def test_a_turn_writes_its_events_in_one_statement_before_its_tools_and_one_after(
    protege_app, scripted_model
):
    import sqlite3

    from protege.db import database
    from protege.models import Agent, Toolkit
    from protege.testing import run_reply, say, tool_call

    if not isinstance(database.connection(), sqlite3.Connection):
        pytest.skip("counts statements with SQLite's trace hook; PostgreSQL writes the same")
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Orders", member_tool_ids=["lookup_order"]))
    scripted_model.script(tool_call("lookup_order", order_number="SCP-1042"), say("Found it."))
    inserts = []
    database.connection().set_trace_callback(
        lambda sql: inserts.append(sql) if sql.startswith("INSERT INTO event") else None
    )
    try:
        done = run_reply(agent, sender="jane@acme.com", body="Where?", installation=protege_app)
    finally:
        database.connection().set_trace_callback(None)
    assert done.status == "done"
    assert len(done.timeline()) == 7  # request, response, call, result, request, response...
    # ...written as: the first turn's ask, its tool's answer, the last turn with the run's end.
    assert len(inserts) == 3


def test_a_model_request_names_the_prompt_sections_it_carried_and_left_out():
    line = render(
        events.MODEL_REQUEST,
        {
            "turn": 1,
            "messages": 2,
            "tools": [],
            "sections": [
                {"name": "current_time", "trust": "trusted", "truncated": False},
                {"name": "notes", "trust": "untrusted", "truncated": True},
            ],
            "sections_left_out": [{"name": "policy", "reason": "the host app's resolver wins"}],
        },
    )
    assert line == (
        "model request, turn 1: 2 messages; tools: none; sections: current_time, "
        "notes (untrusted, cut); left out: policy (the host app's resolver wins)"
    )


def test_odd_recorded_sections_still_render():
    line = render(events.MODEL_REQUEST, {"sections": "oops", "sections_left_out": [7, {}]})
    assert line.endswith("tools: none; left out: 7, ?")
