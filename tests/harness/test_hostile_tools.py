"""Tools and models that misbehave on purpose: whatever they raise or ask for, the run ends
properly, the model is told, and the worker carrying the run lives on."""

import asyncio
import json
import queue
import threading

import attrs
import pytest

from protege import Tool
from protege.context import CallOver
from protege.harness.dispatch import MAX_ARGUMENT_DEPTH, Dispatcher
from protege.harness.fence import Fence
from protege.installation import open_installation
from protege.mail import record_inbound
from protege.models import Message
from protege.queue import queue_reply
from protege.testing import make_context, raw_tool_call, run_reply, say, tool_call, tool_calls
from protege.worker import Workers

from .conftest import agent_granted, manifest_of

RAISABLE = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
}
NAME = {"type": "object", "properties": {"which": {"enum": sorted(RAISABLE)}}}


class RaiseSyncTool(Tool):
    description = "Raises the named BaseException from a thread."
    input_schema = NAME

    def use(self, context, which):
        raise RAISABLE[which](f"{which} from a tool")


class RaiseAsyncTool(Tool):
    description = "Raises the named BaseException from a coroutine."
    input_schema = NAME

    async def use(self, context, which):
        await asyncio.sleep(0)
        raise RAISABLE[which](f"{which} from a tool")


class ExitOnCreateTool(Tool):
    description = "Raises SystemExit while being made."

    def __init__(self):
        raise SystemExit(3)

    def use(self, context):
        return self.success()


class KeepTool(Tool):
    description = "Accepts any object."
    input_schema = {"type": "object"}

    def use(self, context, **arguments):
        return self.success(keys=sorted(arguments))


class WaitTool(Tool):
    description = "Waits for the test, as long as it takes."
    timeout = 60

    async def use(self, context):
        STARTED.set()
        try:
            await asyncio.Event().wait()
        finally:
            STOPPED.set()


STARTED = threading.Event()  # the waiting tool began (on its own loop, in its own thread)
STOPPED = threading.Event()  # the waiting tool was cancelled and left
LET_GO = threading.Event()  # lets the late sender try to send
TRIED = threading.Event()  # the late sender has tried
REFUSALS = []


class LateSendTool(Tool):
    description = "Outlives its timeout, then tries to queue mail."
    timeout = 0.1

    def use(self, context):
        LET_GO.wait(30)
        try:
            context.queue_mail({"to": ["mara@thescoop.com"], "body": "too late"})
        except Exception as error:
            REFUSALS.append(error)
        finally:
            TRIED.set()
        return self.success()


class LetGoTool(Tool):
    description = "Lets the late sender try, and waits until it has."

    def use(self, context):
        LET_GO.set()
        TRIED.wait(30)
        return self.success(tried=TRIED.is_set())


TOOLS = [RaiseSyncTool, RaiseAsyncTool, ExitOnCreateTool, KeepTool, WaitTool, LateSendTool]


class AbyssTool(Tool):
    description = "Returns data nested 100,000 levels deep."

    def use(self, context):
        deep = []
        for _ in range(100_000):
            deep = [deep]
        return self.success(deep=deep)


class Unprintable:
    def __str__(self):
        raise SystemExit("from __str__")


class OddResultTool(Tool):
    description = "Returns data JSON cannot hold as it is."
    input_schema = {"type": "object", "properties": {"shape": {"enum": ["tuple keys", "str"]}}}

    def use(self, context, shape):
        if shape == "tuple keys":
            return self.success(table={(1, 2): "x"})
        return self.success(thing=Unprintable()).with_details(thing=Unprintable())


TOOLS += [LetGoTool, AbyssTool, OddResultTool]


@pytest.fixture
def manifest():
    return manifest_of(TOOLS)


@pytest.fixture
def agent(protege_db):
    return agent_granted(TOOLS)


@pytest.fixture
def run(agent, config, manifest, scripted_model):
    def go(*steps, config=config):
        scripted_model.script(*steps)
        return run_reply(agent, sender="jane@acme.com", body="Go", config=config, manifest=manifest)

    return go


def shown_results(model, request=1):
    return [json.loads(m["content"]) for m in model.shown(request) if m["role"] == "tool"]


@pytest.mark.parametrize("name", sorted(RAISABLE))
@pytest.mark.parametrize("tool", ["raise_sync", "raise_async"])
def test_a_tool_raising_a_base_exception_is_a_failure_and_the_run_goes_on(
    run, scripted_model, tool, name
):
    done = run(tool_call(tool, which=name), say("ok"))
    assert (done.status, done.error) == ("done", None)
    (result,) = shown_results(scripted_model)
    assert result == {"ok": False, "reason": f"{name}: {name} from a tool"}
    recorded = next(e.payload for e in done.timeline() if e.kind == "tool_result")
    assert f"{name}: {name} from a tool" in recorded["details"]["traceback"]


def test_a_tool_raising_while_being_made_is_a_failure(run, scripted_model):
    assert run(tool_call("exit_on_create"), say("ok")).status == "done"
    assert shown_results(scripted_model) == [{"ok": False, "reason": "SystemExit: 3"}]


@pytest.fixture
def late_sender():
    LET_GO.clear()
    TRIED.clear()
    REFUSALS.clear()
    yield
    LET_GO.set()


def test_a_tool_past_its_timeout_cannot_queue_mail_once_the_run_is_done(
    run, scripted_model, config, late_sender, caplog
):
    done = run(tool_call("late_send"), say("ok"))
    assert done.status == "done"
    assert shown_results(scripted_model)[0]["reason"] == "the tool did not finish within 0.1 s"
    LET_GO.set()
    assert TRIED.wait(30)
    (refusal,) = REFUSALS
    assert isinstance(refusal, CallOver)
    (call_id,) = [e.payload["call_id"] for e in done.timeline() if e.kind == "tool_call"]
    assert str(refusal) == (
        "mail can be queued only while the tool call that queues it is running; "
        f"call {call_id} to late_send has ended (it returned, or timed out)"
    )
    assert "mail (to mara@thescoop.com) refused: mail can be queued only while" in caplog.text
    assert Message.select().where(Message.direction == "outbound").count() == 0
    assert not list(config.data_dir.glob("outbox/*.eml"))
    assert "delivery" not in [e.kind for e in done.timeline()]


def test_a_tool_past_its_timeout_cannot_queue_mail_while_the_run_goes_on(
    run, scripted_model, config, late_sender
):
    done = run(tool_call("late_send"), tool_call("let_go"), say("ok"))
    assert done.status == "done"
    assert shown_results(scripted_model, 2)[-1] == {"ok": True, "tried": True}
    assert [type(error) for error in REFUSALS] == [CallOver]
    assert Message.select().where(Message.direction == "outbound").count() == 0
    assert not list(config.data_dir.glob("outbox/*.eml"))


def test_base_exceptions_leave_the_worker_alive_and_every_run_finished(
    agent, config, manifest, scripted_model
):
    hostile = [(tool, name) for tool in ("raise_sync", "raise_async") for name in sorted(RAISABLE)]
    for tool, name in hostile:
        scripted_model.script(tool_call(tool, which=name), say("survived"))
    scripted_model.script(say("still here"))
    runs = [
        queue_reply(record_inbound(agent, sender="jane@acme.com", body=f"{tool} {name}"))
        for tool, name in [*hostile, ("none", "plain")]
    ]
    finished = queue.Queue()
    installation = open_installation(config, manifest=manifest, connect=False)
    pool = Workers(
        installation, max_concurrent_runs=1, poll_interval=0.01, on_finished=finished.put
    ).start()
    try:
        ended = [finished.get(timeout=60) for _ in runs]
    finally:
        pool.stop(grace=60)
    assert [r.id for r in ended] == [r.id for r in runs]  # one at a time, in order, none lost
    assert {r.status for r in ended} == {"done"}
    assert len(scripted_model.requests) == 2 * len(hostile) + 1


def test_a_real_cancellation_of_the_run_still_cancels(agent, config, manifest):
    entry = manifest.get("wait")
    call = {"id": "call_1", "function": {"name": "wait", "arguments": "{}"}}

    async def cancel_mid_call():
        STARTED.clear()
        STOPPED.clear()
        dispatcher = Dispatcher([entry], make_context(config=config), Fence(), 65536)
        task = asyncio.create_task(dispatcher.dispatch(call))
        assert await asyncio.to_thread(STARTED.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_call())
    assert STOPPED.wait(30)  # the tool itself was cancelled on its own loop, not abandoned


def nested(depth):
    return "[" * (depth - 1) + "]" * (depth - 1)


def test_arguments_nested_50000_levels_deep_are_a_failure(run, scripted_model):
    arguments = '{"x": ' + nested(50_000) + "}"
    assert run(raw_tool_call("keep", arguments), say("ok")).status == "done"
    assert shown_results(scripted_model) == [
        {"ok": False, "reason": f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"}
    ]


def test_arguments_just_past_the_depth_limit_are_refused_and_at_it_accepted(run, scripted_model):
    at_limit = '{"x": ' + nested(MAX_ARGUMENT_DEPTH) + "}"
    past_limit = '{"x": ' + nested(MAX_ARGUMENT_DEPTH + 1) + "}"
    run(tool_calls([raw_tool_call("keep", at_limit), raw_tool_call("keep", past_limit)]), say("."))
    at, past = shown_results(scripted_model)
    assert at == {"ok": True, "keys": ["x"]}
    assert past["reason"] == f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"


def test_calls_past_the_per_turn_cap_are_answered_with_a_failure_in_order(run, scripted_model):
    calls = [("keep", {"n": n}) for n in range(30)]
    done = run(tool_calls(calls), say("ok"))
    assert done.status == "done"  # the 14 declined calls are not tool failures
    request = scripted_model.shown(1)
    (assistant,) = [m for m in request if m.get("tool_calls")]
    answered = [m["tool_call_id"] for m in request if m["role"] == "tool"]
    assert answered == [call["id"] for call in assistant["tool_calls"]]
    results = shown_results(scripted_model)
    assert [r["ok"] for r in results] == [True] * 16 + [False] * 14
    assert results[16]["reason"] == (
        "not run: at most 16 tool calls are run per turn and this turn asked for 30; "
        "call it again in your next turn if you still need it"
    )
    refused = [e.payload["call_id"] for e in done.timeline() if e.kind == "tool_refused"]
    assert refused == answered[16:]


def test_the_per_turn_cap_is_a_setting(run, scripted_model, config):
    tight = attrs.evolve(config, runs=attrs.evolve(config.runs, max_tool_calls_per_turn=2))
    run(tool_calls([("keep", {}), ("keep", {}), ("keep", {})]), say("ok"), config=tight)
    assert [r["ok"] for r in shown_results(scripted_model)] == [True, True, False]


def test_a_result_nested_too_deeply_to_write_is_a_failure(run, scripted_model):
    assert run(tool_call("abyss"), say("ok")).status == "done"
    assert shown_results(scripted_model) == [
        {
            "ok": False,
            "reason": "the tool's result cannot be written as JSON (keys that are not text, "
            "circular or too deeply nested data)",
        }
    ]


def test_a_number_too_long_to_read_is_a_failure(run, scripted_model):
    done = run(raw_tool_call("keep", '{"n": ' + "9" * 5000 + "}"), say("ok"))
    assert done.status == "done"
    (result,) = shown_results(scripted_model)
    assert result["ok"] is False
    assert result["reason"].startswith("the arguments cannot be read")


def test_lone_surrogates_from_the_model_are_stored_and_sent_replaced(run, scripted_model):
    done = run(
        raw_tool_call("keep", '{"q": "x\\ud800"}'),
        raw_tool_call("no_such_\ud800", "{}"),
        say("ok \ud800"),
    )
    assert done.status == "done", done.error
    (call,) = [e.payload for e in done.timeline() if e.kind == "tool_refused"]
    assert call["tool"] == "no_such_?"


@pytest.mark.parametrize("shape", ["tuple keys", "str"])
def test_a_result_json_cannot_hold_is_written_or_failed_never_a_crash(run, scripted_model, shape):
    done = run(tool_call("odd_result", shape=shape), say("ok"))
    assert (done.status, done.error) == ("done", None)
    (result,) = shown_results(scripted_model)
    if shape == "tuple keys":
        assert result["ok"] is False
    else:
        assert result == {"ok": True, "thing": "<Unprintable that cannot be shown>"}
