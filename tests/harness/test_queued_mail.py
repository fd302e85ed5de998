"""Mail a tool queues belongs to the tool call that queues it: the call's own context names
it, so the tool's own threads queue for it while it runs, and nothing is queued through it
once it has returned."""

import asyncio
import json
import threading
from collections.abc import Mapping

import attrs
import pytest

from protege import Tool
from protege.context import Call, CallOver
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


class HeldMail(Mapping):
    """Mail whose reading waits until it is let go: a thread queueing it is held inside
    queue_mail, past the call's first look at whether it is running."""

    def __init__(self, mail):
        self.mail = mail
        self.reading = threading.Event()
        self.let_go = threading.Event()

    def __getitem__(self, key):
        return self.mail[key]

    def __len__(self):
        return len(self.mail)

    def __iter__(self):
        self.reading.set()
        self.let_go.wait(30)
        return iter(self.mail)


HELD = HeldMail({**MAIL, "body": "held"})


class HeldSendTool(Tool):
    description = "Starts a thread queueing mail it holds, and returns once it is held."

    def use(self, context):
        def later():
            try:
                context.queue_mail(HELD)
            except Exception as error:
                REFUSALS.append(error)
            finally:
                TRIED.set()

        helper = threading.Thread(target=later, daemon=True)
        LEFT_BEHIND.append(helper)
        helper.start()
        return self.success(held=HELD.reading.wait(30))


class LetGoTool(Tool):
    description = "Lets the held mail be read, and waits until its thread has tried."

    def use(self, context):
        HELD.let_go.set()
        return self.success(tried=TRIED.wait(30))


FORGE_AS: list[str] = []  # the call id a left-behind thread is to forge, when it is known


class ForgeTool(Tool):
    description = "Starts a thread that queues mail later through a Call it makes itself."

    def use(self, context):
        def later():
            GO.wait(30)
            call = Call(id=FORGE_AS[0] if FORGE_AS else context.call.id, tool="mailer")
            try:
                attrs.evolve(context, call=call).queue_mail({**MAIL, "body": "forged"})
            except Exception as error:
                REFUSALS.append(error)
            finally:
                TRIED.set()

        helper = threading.Thread(target=later, daemon=True)
        LEFT_BEHIND.append(helper)
        helper.start()
        return self.success()


class MailerTool(Tool):
    description = "Lets a forger try under this call's id first, then queues its own mail."

    def use(self, context):
        FORGE_AS.append(context.call.id)
        GO.set()
        TRIED.wait(30)
        return self.success(**context.queue_mail({**MAIL, "body": "genuine"}))


TOOLS = [
    ThreadedSendTool,
    AsyncThreadedSendTool,
    LeaveBehindTool,
    GoTool,
    OldSendTool,
    HeldSendTool,
    LetGoTool,
    ForgeTool,
    MailerTool,
]


@pytest.fixture
def run(protege_db, config, scripted_model):
    agent, manifest = agent_granted(TOOLS), manifest_of(TOOLS)

    def go(*steps):
        scripted_model.script(*steps)
        return run_reply(agent, sender="jane@acme.com", body="Go", config=config, manifest=manifest)

    GO.clear()
    TRIED.clear()
    REFUSALS.clear()
    FORGE_AS.clear()
    HELD.reading.clear()
    HELD.let_go.clear()
    yield go
    GO.set()  # a test that failed early leaves no thread waiting
    HELD.let_go.set()
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


def test_mail_a_thread_began_queueing_while_its_call_ran_is_refused_once_the_call_returned(
    run,
):
    # The thread is inside queue_mail when its call returns, and goes on only in the next
    # call: the call's end comes first, so the mail is not queued, in this call or any.
    done = run(tool_call("held_send"), tool_call("let_go"), say("ok"))
    assert done.status == "done"
    results = [json.loads(e.payload["content"]) for e in done.timeline() if e.kind == "tool_result"]
    assert [r.get("held", r.get("tried")) for r in results] == [True, True]
    (refusal,) = REFUSALS
    (call_id,) = call_ids(done, "held_send")
    assert (
        str(refusal) == f"{RULE}; call {call_id} to held_send has ended (it returned, or timed out)"
    )
    assert outbound() == []
    assert "delivery" not in [e.kind for e in done.timeline()]


def test_a_call_a_left_behind_thread_makes_for_its_own_ended_call_queues_nothing(run):
    done = run(tool_call("forge"), tool_call("go"), say("ok"))
    assert done.status == "done"
    (refusal,) = REFUSALS
    (call_id,) = call_ids(done, "forge")
    assert str(refusal) == (
        f"{RULE}; call {call_id} to mailer is not one protege issued in this run "
        "(a Call made by a tool, or kept from another attempt, queues nothing)"
    )
    assert outbound() == []


def test_a_call_forged_with_the_next_calls_id_neither_queues_nor_takes_that_calls_mail(
    run, scripted_model
):
    done = run(tool_call("forge"), tool_call("mailer"), say("ok"))
    assert done.status == "done"
    (refusal,) = REFUSALS
    assert "is not one protege issued in this run" in str(refusal)
    (mailer_id,) = call_ids(done, "mailer")
    (mail,) = outbound()
    assert (mail.body_text, mail.tool_call_id) == ("genuine", mailer_id)
    shown = json.loads(
        next(
            e.payload["content"]
            for e in done.timeline()
            if e.kind == "tool_result" and e.payload["tool"] == "mailer"
        )
    )
    assert shown["status"] == "queued"
    assert not shown.get("repeated")
