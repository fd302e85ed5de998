"""Hostile model answers, read by protege's own reader (read_reply): refused with a clear
error or read safely; never a crash, a double send or unbounded storage."""

import json

import attrs
import pytest

from protege.harness.model import ModelError, read_reply
from protege.mail import record_inbound
from protege.models import Event, Message, Toolkit
from protege.queue import queue_reply
from protege.testing import raw_answer, say
from protege.worker import drain
from tests.harness.conftest import agent_granted, manifest_of


def _answer(message, **extra):
    return {"choices": [{"index": 0, "message": {"role": "assistant", **message}}], **extra}


def _body(answer) -> bytes:
    return json.dumps(answer).encode()


# --- read_reply alone -----------------------------------------------------------------


def test_deeply_nested_answer_is_a_model_error_not_a_recursion_error():
    body = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ModelError):
        read_reply(body, 1.0, "asked")


def test_deeply_nested_object_arguments_is_a_model_error_not_a_recursion_error():
    nested = b"[" * 990 + b"]" * 990
    body = (
        b'{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"x",'
        b'"arguments":' + nested + b"}}]}}]}"
    )
    with pytest.raises(ModelError):
        read_reply(body, 1.0, "asked")


def test_usage_keeps_only_finite_counts():
    body = (
        b'{"choices":[{"message":{"content":"hi"}}],'
        b'"usage":{"total_tokens":NaN,"prompt_tokens":-1e308,"completion_tokens":Infinity}}'
    )
    usage = read_reply(body, 1.0, "asked").usage
    # NaN / Infinity are not JSON: stored in the trail they make it unreadable to strict
    # JSON readers (jq, JavaScript, PostgreSQL's ::jsonb)
    assert all(v == v and abs(v) != float("inf") for v in usage.values()), usage
    assert json.loads(json.dumps(usage, allow_nan=False)) is not None


def test_null_everywhere_is_read():
    reply = read_reply(
        _body(
            {
                "choices": [
                    {
                        "message": {
                            "content": None,
                            "tool_calls": [
                                None,
                                {"id": None, "function": None},
                                {"id": 5, "function": {"name": None, "arguments": None}},
                            ],
                        }
                    }
                ],
                "usage": None,
                "model": None,
            }
        ),
        1.0,
        "asked",
    )
    ids = [c["id"] for c in reply.tool_calls]
    assert len(set(ids)) == 3
    assert all(i.startswith("call_protege_") for i in ids)
    assert all(c["function"]["name"] == "" for c in reply.tool_calls)
    assert reply.model == "asked"


def test_lone_surrogates_and_control_characters_are_made_storable():
    answer = _answer(
        {
            "content": "a\ud800b",
            "tool_calls": [
                {"id": "x\udfff", "function": {"name": "send\x00_email\n", "arguments": "{}"}}
            ],
        }
    )
    reply = read_reply(json.dumps(answer).encode(), 1.0, "asked")
    for text in (reply.content, reply.tool_calls[0]["id"], reply.tool_calls[0]["function"]["name"]):
        text.encode("utf-8")  # no lone surrogate left


def test_a_call_id_too_long_is_replaced():
    """A call id is echoed to the model and stored in several events: not bounded."""
    answer = _answer(
        {"tool_calls": [{"id": "i" * 1_000_000, "function": {"name": "x", "arguments": "{}"}}]}
    )
    reply = read_reply(json.dumps(answer).encode(), 1.0, "asked")
    assert len(reply.tool_calls[0]["id"]) <= 1000, "a 1 MB call id is kept as it is"


# --- whole runs -----------------------------------------------------------------------


@pytest.fixture
def mailer(protege_db):
    agent = agent_granted([])
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


@pytest.fixture
def app(config):
    from protege.installation import open_installation
    from protege.plugins import PluginHost
    from protege.registry import build_manifest

    mail = build_manifest(config, PluginHost())
    manifest = attrs.evolve(manifest_of([]), tools=(mail.get("send_email"),))
    return open_installation(config, manifest=manifest, connect=False)


def _send(call_id, body):
    call = {
        "type": "function",
        "function": {
            "name": "send_email",
            "arguments": json.dumps({"mode": "reply", "body": body}),
        },
    }
    if call_id is not None:
        call["id"] = call_id
    return call


def _run(agent, app):
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Hi"))
    (ended,) = drain(app)
    assert ended.id == run.id
    return ended


def test_duplicate_call_ids_do_not_send_mail_twice(mailer, app, scripted_model):
    calls = [_send("dup", "one"), _send("dup", "two")]
    scripted_model.script(raw_answer(_answer({"content": None, "tool_calls": calls})), say("ok"))
    ended = _run(mailer, app)
    outgoing = Message.select().where(Message.run == ended.id)
    assert outgoing.count() <= 1
    assert ended.status in ("done", "failed")


def test_an_id_reused_from_an_earlier_turn_does_not_send_twice(mailer, app, scripted_model):
    first = raw_answer(_answer({"tool_calls": [_send("same", "one")]}))
    second = raw_answer(_answer({"tool_calls": [_send("same", "two")]}))
    scripted_model.script(first, second, say("ok"))
    ended = _run(mailer, app)
    assert Message.select().where(Message.run == ended.id).count() == 1


def test_calls_without_ids_each_send(mailer, app, scripted_model):
    calls = [_send(None, "one"), _send(None, "two")]
    scripted_model.script(raw_answer(_answer({"tool_calls": calls})), say("ok"))
    ended = _run(mailer, app)
    assert ended.status == "done"
    assert Message.select().where(Message.run == ended.id).count() == 2


def test_deeply_nested_answer_fails_the_run_cleanly(mailer, app, scripted_model):
    scripted_model.script(raw_answer(b"[" * 100_000 + b"]" * 100_000))
    ended = _run(mailer, app)
    assert ended.status == "failed"
    assert "model endpoint" in (ended.error or ""), ended.error


def test_an_answer_of_thousands_of_tool_calls_is_refused_not_stored(mailer, app, scripted_model):
    n = 3000
    calls = [
        {"id": f"c{i}", "function": {"name": "send_email", "arguments": "{}"}} for i in range(n)
    ]
    scripted_model.script(raw_answer(_answer({"tool_calls": calls})), say("ok"))
    ended = _run(mailer, app)
    rows = Event.select().where(Event.run == ended.id).count()
    sent = Message.select().where(Message.run == ended.id).count()
    assert ended.status == "failed"
    assert ended.error == (
        "the model endpoint's answer has 3000 tool calls; protege reads at most 1024"
    )
    assert rows < 200, f"{n} calls of one answer left {rows} events"
    assert sent == 0
