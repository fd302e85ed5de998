"""Runs under leases: a run whose worker died is taken over and resumes from its events, at
most ``max_attempts`` times; an operator can cancel a run and its tools can see it."""

import datetime
import json
import threading

import attrs
import pytest

from protege import Tool
from protege.harness import events
from protege.harness.events import EventLog
from protege.installation import open_installation
from protege.mail import record_inbound
from protege.models import Message, Run
from protege.models.base import utcnow
from protege.queue import queue_reply
from protege.testing import run_reply, say, tool_call, tool_calls
from protege.worker import drain
from tests.harness.conftest import agent_granted, manifest_of

SEEN_CANCEL = threading.Event()
STARTED = threading.Event()


class NoticeCancelTool(Tool):
    """Waits until its run is cancelled, and says whether it saw that."""

    description = "Works until told to stop."
    timeout = 60

    def use(self, context):
        STARTED.set()
        # Polls the run's own flag, as a long tool would between two pieces of work.
        saw = context.cancellation.wait(30)
        if saw:
            SEEN_CANCEL.set()
        return self.success(stopped_early=saw)


PONGED = threading.Event()


class PingTool(Tool):
    """Succeeds only if pong runs while it waits: the calls of one turn run together."""

    description = "Waits for pong."
    timeout = 30

    async def use(self, context):
        import asyncio

        ponged = await asyncio.to_thread(PONGED.wait, 20)
        return self.success(ponged=ponged)


class PongTool(Tool):
    description = "Lets ping go."

    def use(self, context):
        PONGED.set()
        return self.success()


TOOLS = [NoticeCancelTool, PingTool, PongTool]


@pytest.fixture
def manifest():
    return manifest_of(TOOLS)


@pytest.fixture
def agent(protege_db):
    agent = agent_granted(TOOLS)
    from protege.models import Toolkit

    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


@pytest.fixture
def app(config, manifest):
    from protege.plugins import PluginHost
    from protege.registry import build_manifest

    mail = build_manifest(config, PluginHost())
    everything = attrs.evolve(
        manifest, tools=tuple(sorted([*manifest.tools, mail.get("send_email")], key=lambda e: e.id))
    )
    short = attrs.evolve(config, runs=attrs.evolve(config.runs, lease_seconds=60))
    return open_installation(short, manifest=everything, connect=False)


def _died_after_asking_to_send(agent, app):
    """A run whose worker recorded the model's send_email call, then died (kill -9)."""
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Refund?"))
    start = utcnow() - datetime.timedelta(seconds=3600)
    claim = Run.claim(run.id, "dead-worker", start, app.config.runs.lease_seconds)
    log = EventLog(run.id, claim.last_seq)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "send_email",
            "arguments": json.dumps({"mode": "reply", "body": "Yes."}),
        },
    }
    log.record(events.ModelRequest(turn=1, model="scripted", messages=2, tools=["send_email"]))
    log.record(events.ModelResponse(turn=1, content=None, tool_calls=[call], usage={}, model="m"))
    log.record(
        events.ToolCall(
            call_id="call_1", tool="send_email", arguments=call["function"]["arguments"]
        )
    )
    log.write()
    return run


def test_a_run_whose_worker_died_is_taken_over_and_resumes_from_its_events(
    agent, app, scripted_model
):
    run = _died_after_asking_to_send(agent, app)
    scripted_model.script(say("Done."))
    (ended,) = drain(app)
    assert (ended.id, ended.status, ended.attempts) == (run.id, "done", 2)
    kinds = [e.kind for e in ended.timeline()]
    assert kinds.count("resumed") == 1
    assert kinds.count("tool_call") == 1  # the call was not asked for again, only answered
    assert len(scripted_model.requests) == 1  # one more turn: the final answer
    (mail,) = Message.select().where(Message.direction == "outbound")
    assert mail.status == "sent"
    assert len(list((app.config.data_dir / "outbox").glob("*.eml"))) == 1


def test_a_run_taken_over_too_often_fails_for_good_with_the_reason(agent, app, scripted_model):
    run = _died_after_asking_to_send(agent, app)
    Run.update(attempts=app.config.runs.max_attempts).where(Run.id == run.id).execute()
    (ended,) = drain(app)
    assert ended.status == "failed"
    assert ended.error == (
        "given up after 3 attempts: its worker stopped each time (lease expired)"
    )
    assert scripted_model.requests == []
    assert not drain(app)  # failed for good: nobody takes it again


def test_a_cancelled_run_stops_at_its_next_step_and_its_tool_sees_it(agent, app, scripted_model):
    STARTED.clear()
    SEEN_CANCEL.clear()
    quick = attrs.evolve(app.config, runs=attrs.evolve(app.config.runs, lease_seconds=1))
    fast = attrs.evolve(app, config=quick)
    scripted_model.script(tool_call("notice_cancel"), say("never asked"))
    ran: list[Run] = []
    worker = threading.Thread(
        target=lambda: ran.append(
            run_reply(agent, sender="jane@acme.com", body="Go", installation=fast)
        )
    )
    worker.start()
    assert STARTED.wait(30)
    (running,) = Run.select().where(Run.status == "running")
    assert Run.request_cancel(running.id, utcnow()) == "running"
    worker.join(60)
    (ended,) = ran
    assert (ended.status, ended.error) == ("cancelled", "cancelled by an operator")
    assert SEEN_CANCEL.is_set()
    assert [e.kind for e in ended.timeline()][-2:] == ["tool_result", "cancelled"]
    assert len(scripted_model.requests) == 1  # it stopped before asking the model again


def test_a_cancel_reaches_a_waiting_tool_within_a_check_not_at_the_next_lease_renewal(
    agent, app, scripted_model
):
    STARTED.clear()
    SEEN_CANCEL.clear()
    # A lease renewed every twenty minutes: only the cancel watch can tell the tool in time.
    rare = attrs.evolve(app.config, runs=attrs.evolve(app.config.runs, lease_seconds=3600))
    scripted_model.script(tool_call("notice_cancel"), say("never asked"))
    ran: list[Run] = []
    worker = threading.Thread(
        target=lambda: ran.append(
            run_reply(
                agent,
                sender="jane@acme.com",
                body="Go",
                installation=attrs.evolve(app, config=rare),
            )
        )
    )
    worker.start()
    assert STARTED.wait(30)
    (running,) = Run.select().where(Run.status == "running")
    assert Run.request_cancel(running.id, utcnow()) == "running"  # this thread's connection
    worker.join(60)
    (ended,) = ran
    assert (ended.status, ended.error) == ("cancelled", "cancelled by an operator")
    assert SEEN_CANCEL.is_set()  # the tool stopped because of the cancel, not its 30 s wait
    result = next(e for e in ended.timeline() if e.kind == "tool_result")
    assert json.loads(result.payload["content"]) == {"ok": True, "stopped_early": True}


def test_the_calls_of_one_turn_run_together_and_are_answered_in_order(agent, app, scripted_model):
    PONGED.clear()
    scripted_model.script(tool_calls([("ping", {}), ("pong", {})]), say("ok"))
    done = run_reply(agent, sender="jane@acme.com", body="Both", installation=app)
    assert done.status == "done"
    answered = [m for m in scripted_model.shown(-1) if m["role"] == "tool"]
    assert [json.loads(m["content"]) for m in answered] == [
        {"ok": True, "ponged": True},
        {"ok": True},
    ]
    results = [e.payload["tool"] for e in done.timeline() if e.kind == "tool_result"]
    assert results == ["pong", "ping"]  # on record as each ended: pong let ping go


def test_a_turn_of_a_thousand_tool_calls_is_recorded_and_the_run_goes_on(
    agent, app, scripted_model
):
    scripted_model.script(tool_calls([("pong", {})] * 1000), say("ok"))
    done = run_reply(agent, sender="jane@acme.com", body="Many", installation=app)
    assert done.status == "done"
    kinds = [e.kind for e in done.timeline()]
    assert kinds.count("tool_call") == 1000
    assert kinds.count("tool_result") == 1000  # 16 run, the rest declined, every one answered
