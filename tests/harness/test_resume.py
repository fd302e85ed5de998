"""A retried run resumes from its own trail: what was done is not done again."""

import pytest

from protege.errors import ProtegeError
from protege.harness import execute
from protege.installation import open_installation
from protege.models import Agent, Message, Toolkit
from protege.plugins import PluginHost
from protege.queue import requeue
from protege.registry import build_manifest
from protege.testing import http_error, run_reply, say, tool_call


@pytest.fixture
def agent(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


def test_a_retried_run_does_not_send_its_mail_twice(agent, config, scripted_model):
    manifest = build_manifest(config, PluginHost())
    scripted_model.script(
        tool_call("send_email", mode="reply", body="Your refund is on its way."),
        http_error(401),
    )
    run = run_reply(agent, sender="jane@acme.com", body="Refund?", config=config, manifest=manifest)
    assert run.status == "failed"
    assert Message.select().where(Message.direction == "outbound").count() == 1

    scripted_model.script(say("Done."))
    run = execute(requeue(run), open_installation(config, manifest=manifest, connect=False))

    assert run.status == "done"
    assert run.attempts == 2
    assert Message.select().where(Message.direction == "outbound").count() == 1
    assert len(list((config.data_dir / "outbox").glob("*.eml"))) == 1
    resumed = scripted_model.shown(-1)
    assert [m["role"] for m in resumed[-3:]] == ["user", "assistant", "tool"]
    assert [e.kind for e in run.timeline()].count("tool_call") == 1


def test_done_runs_are_not_retried(agent, config, scripted_model, scoop_tools):
    scripted_model.script(say("Hi."))
    run = run_reply(agent, sender="jane@acme.com", body="Hi", config=config, manifest=scoop_tools)
    with pytest.raises(ProtegeError, match="only failed or stuck runs are retried"):
        requeue(run)


def test_a_retry_does_not_count_the_failed_turn_against_the_budget(
    agent, config, scripted_model, scoop_tools
):
    import attrs

    config = attrs.evolve(config, runs=attrs.evolve(config.runs, max_model_turns=2))
    scripted_model.script(tool_call("lookup_order", order_number="SCP-1"), http_error(401))
    run = run_reply(
        agent, sender="jane@acme.com", body="Where is it?", config=config, manifest=scoop_tools
    )
    assert run.status == "failed"
    assert "401" in run.error

    scripted_model.script(say("Found it."))
    run = execute(requeue(run), open_installation(config, manifest=scoop_tools, connect=False))

    assert (run.status, run.error) == ("done", None)
    assert len(scripted_model.requests) == 3
    turns = [e.payload["turn"] for e in run.timeline() if e.kind == "model_response"]
    assert turns == [1, 2]
