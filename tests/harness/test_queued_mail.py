"""Mail a tool queues belongs to the tool call that queues it: the call's own context names
it, so the tool's own threads queue for it while it runs, and nothing is queued through it
once it has returned."""

import asyncio
import json
import threading

import pytest

from protege import Tool
from protege.context import CallOver
from protege.db import database
from protege.models import Message
from protege.testing import run_reply, say, tool_call

from .conftest import agent_granted, manifest_of

RULE = "mail can be queued only while the tool call that queues it is running"
MAIL = {"to": ["mara@thescoop.com"], "subject": "Stock", "body": "from a thread"}


def queue_and_look(context):
    """Queue the mail, and say whether this thread was left holding a database connection."""
    outcome = context.queue_mail(MAIL)
    return {**outcome, "connection_left": not database.is_closed()}


class ThreadedSendTool(Tool):
    description = "Queues mail from a thread it starts, and waits for that thread."

    def use(self, context):
        outcomes = []
        helper = threading.Thread(target=lambda: outcomes.append(queue_and_look(context)))
        helper.start()
        helper.join()
        return self.success(**outcomes[0])


class AsyncThreadedSendTool(Tool):
    description = "Queues mail from a worker thread of its event loop."

    async def use(self, context):
        return self.success(**await asyncio.to_thread(queue_and_look, context))


GO = threading.Event()  # lets the left-behind thread try to queue its mail
TRIED = threading.Event()  # the left-behind thread has tried
LEFT_BEHIND: list[threading.Thread] = []
REFUSALS: list[Exception] = []


class LeaveBehindTool(Tool):
    description = "Starts a thread that queues mail later, and returns without waiting."

    def use(self, context):
        def later():
            GO.wait(30)
            try:
                context.queue_mail({**MAIL, "body": "too late"})
            except Exception as error:
                REFUSALS.append(error)
            finally:
                TRIED.set()

        helper = threading.Thread(target=later, daemon=True)
        LEFT_BEHIND.append(helper)
        helper.start()
        return self.success()


class GoTool(Tool):
    description = "Lets the left-behind thread try, and waits until it has."

    def use(self, context):
        GO.set()
        return self.success(tried=TRIED.wait(30))


class OldSendTool(Tool):
    description = "Queues mail by the old name, deliver."

    def use(self, context):
        return self.success(**context.deliver(MAIL))


TOOLS = [ThreadedSendTool, AsyncThreadedSendTool, LeaveBehindTool, GoTool, OldSendTool]


@pytest.fixture
def run(protege_db, config, scripted_model):
    agent, manifest = agent_granted(TOOLS), manifest_of(TOOLS)

    def go(*steps):
        scripted_model.script(*steps)
        return run_reply(agent, sender="jane@acme.com", body="Go", config=config, manifest=manifest)

    GO.clear()
    TRIED.clear()
    REFUSALS.clear()
    yield go
    GO.set()  # a test that failed early leaves no thread waiting
    for helper in LEFT_BEHIND:
        helper.join(30)
    LEFT_BEHIND.clear()


def call_ids(run, tool):
    return [
        e.payload["call_id"]
        for e in run.timeline()
        if e.kind == "tool_call" and e.payload["tool"] == tool
    ]


def outbound():
    return list(Message.select().where(Message.direction == "outbound"))


@pytest.mark.parametrize("tool", ["threaded_send", "async_threaded_send"])
def test_mail_queued_from_a_thread_the_tool_waits_for_is_queued_for_its_call(
    run, tool, config, scripted_model
):
    done = run(tool_call(tool), say("ok"))
    assert done.status == "done"
    (shown,) = [json.loads(m["content"]) for m in scripted_model.shown(1) if m["role"] == "tool"]
    assert (shown["status"], shown["connection_left"]) == ("queued", False)
    (mail,) = outbound()
    assert (mail.run_id, mail.tool_call_id) == (done.id, *call_ids(done, tool))
    assert mail.body_text == "from a thread"
    (delivery,) = [e.payload for e in done.timeline() if e.kind == "delivery"]
    assert (delivery["status"], delivery["message_id"]) == ("queued", mail.message_id)
    assert len(list(config.data_dir.glob("outbox/*.eml"))) == 1  # and the delivery loop sent it


def test_mail_a_tool_thread_queues_after_the_call_returned_is_refused(run, config):
    done = run(tool_call("leave_behind"), say("ok"))
    assert done.status == "done"
    GO.set()
    assert TRIED.wait(30)
    (refusal,) = REFUSALS
    assert isinstance(refusal, CallOver)
    (call_id,) = call_ids(done, "leave_behind")
    assert str(refusal) == (
        f"{RULE}; call {call_id} to leave_behind has ended (it returned, or timed out)"
    )
    assert outbound() == []
    assert "delivery" not in [e.kind for e in done.timeline()]
    assert not list(config.data_dir.glob("outbox/*.eml"))


def test_a_left_behind_thread_cannot_queue_for_the_call_running_after_its_own(run):
    done = run(tool_call("leave_behind"), tool_call("go"), say("ok"))
    assert done.status == "done"
    assert TRIED.is_set()  # while the next call ran
    (refusal,) = REFUSALS
    assert f"call {call_ids(done, 'leave_behind')[0]} to leave_behind has ended" in str(refusal)
    assert outbound() == []


def test_a_tool_calling_the_deprecated_deliver_queues_its_mail_and_is_warned(run):
    with pytest.warns(DeprecationWarning, match="RunContext.deliver is deprecated"):
        done = run(tool_call("old_send"), say("ok"))
    assert done.status == "done"
    (mail,) = outbound()
    assert mail.tool_call_id == call_ids(done, "old_send")[0]
