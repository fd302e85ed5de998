"""``on_event`` listeners: every committed event of a run, in commit order, from a
dispatcher thread that a raising, slow or overwhelmed listener never lets hold up a run."""

from __future__ import annotations

import logging
import queue
import threading

import attrs
import pytest

from protege import Tool, hookimpl
from protege.harness import execute
from protege.harness.listeners import EventDispatcher
from protege.installation import open_installation
from protege.mail import record_inbound
from protege.plugins import PluginHost
from protege.queue import queue_reply
from protege.testing import say, tool_call
from protege.worker import Workers, drain
from tests.harness.conftest import agent_granted, manifest_of


class EchoTool(Tool):
    """Gives back what it was given."""

    description = "Echoes its text."
    input_schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    def use(self, context, text):
        return self.success(text=text)


class Recorder:
    """A listener that keeps what it heard: the run's status, the event's number and kind."""

    def __init__(self):
        self.heard = []

    @hookimpl
    def on_event(self, app, run, event):
        self.heard.append((run.status, event.seq, event.kind))


class Raising:
    """A listener with a bug."""

    @hookimpl
    def on_event(self, app, run, event):
        raise RuntimeError("the listener has a bug")


class Blocked:
    """A listener that waits, at its first event, until the test lets it go."""

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()
        self.heard = []

    @hookimpl
    def on_event(self, app, run, event):
        self.entered.set()
        self.release.wait(60)
        self.heard.append(event.seq)


def app_with(config, **listeners):
    host = PluginHost(sources=())
    for name, listener in listeners.items():
        host.add(listener, name)
    return open_installation(config, manifest=manifest_of([EchoTool]), plugins=host, connect=False)


@pytest.fixture
def agent(protege_db):
    return agent_granted([EchoTool])


def queued(agent, body="Echo this, please."):
    return queue_reply(record_inbound(agent, sender="jane@acme.com", body=body))


def trail(run):
    return [(event.seq, event.kind) for event in run.timeline()]


def no_dispatcher_thread():
    return not any(t.name == "protege-events" for t in threading.enumerate())


def test_listeners_hear_every_event_of_a_run_in_order_with_its_final_status(
    config, agent, scripted_model
):
    recorder = Recorder()
    app = app_with(config, recorder=recorder)
    queued(agent)
    scripted_model.script(tool_call("echo", text="hi"), say("Echoed."))
    (run,) = drain(app)
    assert run.status == "done"
    assert [(seq, kind) for _, seq, kind in recorder.heard] == trail(run)
    assert recorder.heard[-1] == ("done", *trail(run)[-1])
    assert {status for status, _, _ in recorder.heard[:-2]} == {"running"}
    assert no_dispatcher_thread()


def test_the_event_that_ends_a_failed_run_is_heard_with_the_failure(config, agent, scripted_model):
    recorder = Recorder()
    limited = attrs.evolve(config, runs=attrs.evolve(config.runs, max_model_turns=1))
    queued(agent)
    scripted_model.script(tool_call("echo", text="again"))
    (run,) = drain(app_with(limited, recorder=recorder))
    assert run.status == "failed"
    assert recorder.heard[-1] == ("failed", trail(run)[-1][0], "budget_exhausted")
    assert [(seq, kind) for _, seq, kind in recorder.heard] == trail(run)


def test_a_run_carried_out_alone_is_heard_whole_before_execute_returns(
    config, agent, scripted_model
):
    recorder = Recorder()
    app = app_with(config, recorder=recorder)
    scripted_model.script(say("Hello."))
    run = execute(queued(agent), app)  # as `protege runs start` and `retry` do
    assert [(seq, kind) for _, seq, kind in recorder.heard] == trail(run)
    assert no_dispatcher_thread()


def test_a_raising_and_a_slow_listener_neither_delay_nor_fail_the_run(
    config, agent, scripted_model, caplog
):
    blocked, recorder = Blocked(), Recorder()
    app = app_with(config, slow=blocked, raising=Raising(), recorder=recorder)
    scripted_model.script(tool_call("echo", text="hi"), say("Echoed."))
    try:
        with EventDispatcher(app, slow_seconds=0.0) as listeners:
            run = execute(queued(agent), app, listeners=listeners)
            assert run.status == "done"
            assert blocked.entered.wait(30)
            assert blocked.heard == []  # the run ended while its first event still waits
            blocked.release.set()
            assert listeners.flush(timeout=60)
    finally:
        blocked.release.set()
    assert blocked.heard == [seq for seq, _ in trail(run)]
    assert [(seq, kind) for _, seq, kind in recorder.heard] == trail(run)
    failed = [r for r in caplog.records if "on_event of plugin raising failed" in r.message]
    assert len(failed) == len(trail(run))
    assert failed[0].exc_info is not None
    assert any("on_event of plugin slow took" in r.message for r in caplog.records)
    assert no_dispatcher_thread()


def test_events_past_a_full_queue_are_dropped_counted_and_logged(
    config, agent, scripted_model, caplog
):
    blocked = Blocked()
    app = app_with(config, slow=blocked)
    scripted_model.script(tool_call("echo", text="one"), tool_call("echo", text="two"), say("."))
    try:
        with EventDispatcher(app, capacity=2) as listeners:
            run = execute(queued(agent), app, listeners=listeners)
            assert blocked.entered.wait(30)
            blocked.release.set()
    finally:
        blocked.release.set()
    everything = [seq for seq, _ in trail(run)]
    assert len(everything) > 3
    heard = blocked.heard
    assert heard == sorted(heard)
    assert set(heard) <= set(everything)
    assert listeners.dropped == len(everything) - len(heard) >= len(everything) - 3
    logged = " ".join(r.message for r in caplog.records if r.name == "protege.events")
    assert f"({listeners.dropped} dropped in all)" in logged
    assert no_dispatcher_thread()


def test_serving_workers_start_and_stop_the_dispatcher_with_them(config, agent, scripted_model):
    recorder = Recorder()
    app = app_with(config, recorder=recorder)
    queued(agent)
    scripted_model.script(say("Served."))
    finished = queue.Queue()
    pool = Workers(app, max_concurrent_runs=1, poll_interval=0.05, on_finished=finished.put)
    pool.start()
    try:
        run = finished.get(timeout=60)
    finally:
        pool.stop(grace=10)
    assert [(seq, kind) for _, seq, kind in recorder.heard] == trail(run)
    assert recorder.heard[-1][0] == "done"
    assert no_dispatcher_thread()


def test_what_a_listener_is_handed_is_a_copy_no_listener_can_change(config, agent, scripted_model):
    seen = []

    class Meddler:
        @hookimpl(tryfirst=True)
        def on_event(self, app, run, event):
            event.payload["forged"] = True
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                run.status = "forged"  # type: ignore[misc]

    class Reader:
        @hookimpl(trylast=True)
        def on_event(self, app, run, event):
            seen.append((run.status, event.payload.get("forged")))

    scripted_model.script(say("Hello."))
    queued(agent)
    (run,) = drain(app_with(config, meddler=Meddler(), reader=Reader()))
    assert len(seen) == len(trail(run))
    assert [forged for _, forged in seen] == [None] * len(seen)
    assert seen[-1][0] == "done"


def test_with_nothing_listening_no_thread_is_started(config, agent, scripted_model):
    app = app_with(config)
    dispatcher = EventDispatcher(app).start()
    assert not dispatcher.listening
    assert no_dispatcher_thread()
    dispatcher.close()


@pytest.fixture(autouse=True)
def _events_logged(caplog):
    caplog.set_level(logging.WARNING, logger="protege.events")


def test_an_installed_listener_that_raises_is_recorded_and_the_run_goes_on(
    config, agent, scripted_model, site
):
    site.add(
        "shaky-listener",
        "from protege import hookimpl\n\n"
        "@hookimpl\n"
        "def on_event(app, run, event):\n"
        "    raise LookupError('the metrics service did not answer')\n",
    )
    host = site.host()
    app = open_installation(config, manifest=manifest_of([EchoTool]), plugins=host, connect=False)
    scripted_model.script(say("Hello."))
    queued(agent)
    (run,) = drain(app)
    assert run.status == "done"
    (plugin,) = host.plugins
    assert plugin.failures["on_event"].count == len(trail(run))
    assert no_dispatcher_thread()


class Around:
    """A wrapper listener: what it notes before and after the other listeners."""

    def __init__(self, notes):
        self.notes = notes

    @hookimpl(wrapper=True)
    def on_event(self, app, run, event):
        self.notes.append(("before", event.seq))
        result = yield
        self.notes.append(("after", event.seq))
        return result


class Noting:
    def __init__(self, notes):
        self.notes = notes

    @hookimpl
    def on_event(self, app, run, event):
        self.notes.append(("heard", event.seq))


def test_a_wrapper_listener_runs_around_the_other_listeners_of_each_event(
    config, agent, scripted_model
):
    notes = []
    app = app_with(config, around=Around(notes), noting=Noting(notes))
    scripted_model.script(say("Done."))
    with EventDispatcher(app) as listeners:
        run = execute(queued(agent), app, listeners=listeners)
    expected = []
    for seq, _ in trail(run):
        expected += [("before", seq), ("heard", seq), ("after", seq)]
    assert notes == expected
