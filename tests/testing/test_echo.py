"""The echo model: a run answered end to end without a key, always the same way."""

import email
from email import policy

import attrs
import httpx
import pytest

from protege import Tool
from protege.installation import open_installation
from protege.models import Agent, Toolkit
from protege.registry import Manifest, Origin, ToolEntry
from protege.testing import run_reply
from protege.testing.echo import DONE, EchoModel


class LookupOrderTool(Tool):
    description = "Looks up an order by its number."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["order_number"],
        "properties": {"order_number": {"type": "string"}},
    }

    def use(self, context, order_number):
        return self.success(order_number=order_number, status="delivered")


@pytest.fixture
def echo():
    model = EchoModel().start()
    yield model
    model.stop()


@pytest.fixture
def app(protege_app, echo):
    config = protege_app.config
    config = attrs.evolve(config, model=attrs.evolve(config.model, base_url=echo.base_url))
    entries = [*protege_app.manifest.tools, ToolEntry(LookupOrderTool, Origin.HOST, "shop")]
    manifest = Manifest(tools=tuple(sorted(entries, key=lambda entry: entry.id)))
    return open_installation(config, manifest=manifest, connect=False)


def _replies(config):
    paths = sorted((config.data_dir / "outbox").glob("*.eml"))
    return [email.message_from_bytes(p.read_bytes(), policy=policy.default) for p in paths]


def test_the_echo_model_calls_the_tools_the_email_names_then_replies_quoting_it(app):
    agent = Agent.create(name="Sundae", address="sundae@shop.example")
    agent.grant(Toolkit.create(name="Shop", member_tool_ids=["lookup_order", "send_email"]))
    run = run_reply(
        agent,
        sender="jane@example.org",
        subject="Order",
        body='Where is it?\nlookup_order {"order_number": "SCP-1042"}',
        installation=app,
    )
    assert run.status == "done", run.error
    calls = [e.payload["tool"] for e in run.timeline() if e.kind == "tool_call"]
    assert calls == ["lookup_order", "send_email"]
    (reply,) = _replies(app.config)
    assert (reply["To"], reply["Subject"]) == ("jane@example.org", "Re: Order")
    text = reply.get_content()
    assert "> Where is it?" in text
    assert '"status": "delivered"' in text
    final = [e for e in run.timeline() if e.kind == "model_response"][-1]
    assert final.payload["content"] == DONE


def test_without_send_email_the_echo_model_ends_the_run_with_the_emails_text(app):
    agent = Agent.create(name="Quiet", address="quiet@shop.example")
    run = run_reply(agent, sender="jane@example.org", body="Hello there", installation=app)
    assert run.status == "done", run.error
    assert _replies(app.config) == []
    final = [e for e in run.timeline() if e.kind == "model_response"][-1]
    assert final.payload["content"] == "Hello there"


def test_the_echo_model_needs_no_key_and_keeps_nothing(echo):
    request = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{echo.base_url}/chat/completions", json=request, timeout=10)
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "hi"
    assert echo.requests == []
