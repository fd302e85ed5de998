"""The workers of ``protege serve``: many runs at once on one loop, a tool that blocks
holds up nobody else, and a graceful stop hands unfinished runs back to the queue."""

import asyncio
import logging
import queue
import threading

import attrs
import pytest

from protege import Tool
from protege.config import load_config
from protege.installation import open_installation
from protege.mail import record_inbound
from protege.models import Run
from protege.queue import queue_reply
from protege.testing import say, tool_call
from protege.worker import Workers, drain
from tests.conftest import sql_run
from tests.harness.conftest import agent_granted, manifest_of
from tests.looping import TURNS, ends, protege_threads, turns, until

TOGETHER = 6
BARRIER = threading.Barrier(TOGETHER, timeout=20)
RELEASE = threading.Event()
HOLDING = threading.Event()


class MeetTool(Tool):
    """Succeeds only when every run is inside it at the same moment."""

    description = "Waits for the others."
    timeout = 30

    def use(self, context):
        try:
            BARRIER.wait()
        except threading.BrokenBarrierError:
            return self.failure("the others never came")
        return self.success()


class BlockLoopTool(Tool):
    """An async tool that makes a blocking call, as a careless plugin might."""

    description = "Blocks its event loop."
    timeout = 60

    async def use(self, context):
        HOLDING.set()
        RELEASE.wait(30)  # blocking, inside async def: the mistake under test
        return self.success()


class HoldTool(Tool):
    """Holds its run until the test lets it go."""

    description = "Holds."
    timeout = 60

    def use(self, context):
        HOLDING.set()
        RELEASE.wait(30)
        return self.success()


REFUNDS = []


class RefundTool(Tool):
    """A side effect that must happen once: money moves."""

    description = "Refunds."

    def use(self, context):
        REFUNDS.append(context.correlation_id)
        return self.success(refunded=True)


class HoldAfterRefundTool(Tool):
    """Holds its run once the refund of the same turn is on record."""

    description = "Holds, after the refund."
    timeout = 60

    def use(self, context):
        from protege.models import Event

        recorded = threading.Event()
        while not recorded.wait(0.02):  # a database condition: nothing to be woken by
            if Event.select().where(Event.kind == "tool_result").exists():
                recorded.set()
        HOLDING.set()
        RELEASE.wait(30)
        return self.success()


IN_TOOL: queue.Queue = queue.Queue()  # correlation ids of runs waiting in their tool
SAW_CANCEL: queue.Queue = queue.Queue()  # and of those whose tool saw their cancel


class StopWhenCancelledTool(Tool):
    """Works until its run is cancelled (at most half a minute)."""

    description = "Works until told to stop."
    timeout = 60

    def use(self, context):
        IN_TOOL.put(context.correlation_id)
        saw = context.cancellation.wait(30)
        if saw:
            SAW_CANCEL.put(context.correlation_id)
        return self.success(stopped_early=saw)


TOOLS = [MeetTool, BlockLoopTool, HoldTool, RefundTool, HoldAfterRefundTool, StopWhenCancelledTool]


@pytest.fixture
def app(tmp_path, scripted_model, protege_db):
    config = load_config(tmp_path)  # the scripted model, from the fixture's environment
    return open_installation(config, manifest=manifest_of(TOOLS), connect=False)


@pytest.fixture
def agent(protege_db):
    return agent_granted(TOOLS)


@pytest.fixture(autouse=True)
def _reset():
    BARRIER.reset()
    RELEASE.clear()
    HOLDING.clear()
    yield
    RELEASE.set()  # no tool thread outlives its test waiting


def _queue(agent, body):
    return queue_reply(record_inbound(agent, sender="jane@acme.com", body=body))


def _ended(finished, count):
    return [finished.get(timeout=60) for _ in range(count)]


def test_one_process_carries_many_runs_at_once(agent, app, scripted_model):
    runs = [_queue(agent, f"run-{n}") for n in range(TOGETHER)]
    for n in range(TOGETHER):
        scripted_model.script_for(f"run-{n}", tool_call("meet"), say("met"))
    finished = queue.Queue()
    pool = Workers(app, max_concurrent_runs=TOGETHER, poll_interval=0.05, on_finished=finished.put)
    pool.start()
    try:
        ended = _ended(finished, TOGETHER)
    finally:
        pool.stop(grace=10)
    assert sorted(r.id for r in ended) == sorted(r.id for r in runs)
    assert {r.status for r in ended} == {"done"}
    failed = [
        e for r in ended for e in r.timeline() if e.kind == "tool_result" and not e.payload["ok"]
    ]
    assert failed == []  # all six were inside the tool together


class _Heard(logging.Handler):
    """Sets ``heard`` when a record with ``text`` is logged, from whatever thread."""

    def __init__(self, text):
        super().__init__(logging.WARNING)
        self.text = text
        self.heard = threading.Event()

    def emit(self, record):
        if self.text in record.getMessage():
            self.heard.set()


def test_an_async_tool_that_blocks_holds_up_no_other_run_and_is_reported(
    agent, app, scripted_model
):
    report = _Heard("async tool block_loop is blocking its event loop")
    logging.getLogger("protege.run").addHandler(report)
    blocking = _queue(agent, "alpha")
    other = _queue(agent, "bravo")
    scripted_model.script_for("alpha", tool_call("block_loop"), say("a done"))
    scripted_model.script_for("bravo", say("b done"))
    finished = queue.Queue()
    pool = Workers(app, max_concurrent_runs=2, poll_interval=0.05, on_finished=finished.put)
    pool.start()
    try:
        assert HOLDING.wait(30)
        (first,) = _ended(finished, 1)
        assert (first.id, first.status) == (other.id, "done")  # while the tool still blocks
        assert report.heard.wait(30)  # the watchdog names the tool while it blocks
        RELEASE.set()
        (second,) = _ended(finished, 1)
    finally:
        pool.stop(grace=10)
        logging.getLogger("protege.run").removeHandler(report)
    assert (second.id, second.status) == (blocking.id, "done")


def test_a_graceful_stop_hands_unfinished_runs_back_and_they_resume(agent, app, scripted_model):
    run = _queue(agent, "hold on")
    scripted_model.script(tool_call("hold"), say("held"))
    pool = Workers(app, max_concurrent_runs=1, poll_interval=0.05).start()
    assert HOLDING.wait(30)
    pool.stop(grace=0)  # the run is inside its tool: no time to finish
    handed_back = Run.get_by_id(run.id)
    assert (handed_back.status, handed_back.attempts, handed_back.lease_owner) == (
        "queued",
        0,
        None,
    )
    RELEASE.set()
    (resumed,) = drain(app)
    assert (resumed.id, resumed.status) == (run.id, "done")
    kinds = [e.kind for e in resumed.timeline()]
    assert kinds.count("tool_call") == 1
    assert kinds.count("tool_result") == 1


def test_a_stop_with_time_to_spare_lets_the_run_finish(agent, app, scripted_model):
    run = _queue(agent, "quick")
    scripted_model.script(tool_call("hold"), say("held"))
    finished = queue.Queue()
    pool = Workers(app, max_concurrent_runs=1, poll_interval=0.05, on_finished=finished.put)
    pool.start()
    assert HOLDING.wait(30)
    stopping = threading.Thread(target=pool.stop, kwargs={"grace": 60})
    stopping.start()
    RELEASE.set()
    stopping.join(60)
    assert not stopping.is_alive()
    assert Run.get_by_id(run.id).status == "done"


def test_a_cancel_reaches_only_its_own_run_s_tool_within_a_check_of_the_worker(
    agent, app, scripted_model
):
    from protege.models.base import utcnow

    # Leases renewed every twenty minutes: only the workers' cancel watch tells the tool.
    rare = attrs.evolve(app.config, runs=attrs.evolve(app.config.runs, lease_seconds=3600))
    first, second = _queue(agent, "run-first"), _queue(agent, "run-second")
    for marker in ("run-first", "run-second"):
        scripted_model.script_for(marker, tool_call("stop_when_cancelled"), say("stopped"))
    finished = queue.Queue()
    pool = Workers(
        attrs.evolve(app, config=rare), max_concurrent_runs=2, on_finished=finished.put
    ).start()
    try:
        assert {IN_TOOL.get(timeout=30), IN_TOOL.get(timeout=30)} == {
            first.correlation_id,
            second.correlation_id,
        }
        assert Run.request_cancel(first.id, utcnow()) == "running"
        ended = finished.get(timeout=60)
        assert (ended.id, ended.status) == (first.id, "cancelled")
        assert SAW_CANCEL.get_nowait() == first.correlation_id
        assert SAW_CANCEL.empty()  # the other run's tool works on
        assert Run.get_by_id(second.id).status == "running"
        assert Run.request_cancel(second.id, utcnow()) == "running"
        assert finished.get(timeout=60).id == second.id
    finally:
        pool.stop(grace=0)
    assert SAW_CANCEL.get_nowait() == second.correlation_id


def test_workers_stopped_take_no_more_runs(agent, app, scripted_model):
    pool = Workers(app, max_concurrent_runs=1, poll_interval=0.05).start()
    pool.stop(grace=1)
    run = _queue(agent, "late")
    assert drain(app)[0].id == run.id  # still queued: only this drain took it


def test_a_call_that_ended_is_not_run_again_when_its_turn_is_handed_back(
    agent, app, scripted_model
):
    from protege.testing import tool_calls

    REFUNDS.clear()
    run = _queue(agent, "refund")
    scripted_model.script(tool_calls([("refund", {}), ("hold_after_refund", {})]), say("done"))
    pool = Workers(app, max_concurrent_runs=1, poll_interval=0.05).start()
    assert HOLDING.wait(30)  # the refund is on record; the other call is still under way
    pool.stop(grace=0)
    RELEASE.set()
    (resumed,) = drain(app)
    assert (resumed.id, resumed.status) == (run.id, "done")
    assert len(REFUNDS) == 1


class LeakyTool(Tool):
    """Writes inside a transaction it never closes (a bug, or on purpose)."""

    description = "Leaks a transaction."

    def use(self, context):
        from protege.db import database
        from protege.models import Toolkit

        database.atomic().__enter__()
        Toolkit.create(name="Leaked", member_tool_ids=[])
        return self.success()


class StuckTool(Tool):
    """Never ends within its timeout (a socket with no timeout, say)."""

    description = "Hangs."
    timeout = 0.5

    def use(self, context):
        RELEASE.wait(60)
        return self.success()


class QuickTool(Tool):
    description = "Answers at once."

    def use(self, context):
        return self.success()


HOSTILE = [LeakyTool, StuckTool, QuickTool]


@pytest.fixture
def hostile_app(tmp_path, scripted_model, protege_db):
    config = load_config(tmp_path)
    one_thread = attrs.evolve(config, runs=attrs.evolve(config.runs, tool_threads=1))
    return open_installation(one_thread, manifest=manifest_of(HOSTILE), connect=False)


def test_a_transaction_a_tool_left_open_is_rolled_back_and_holds_nothing(
    hostile_app, scripted_model
):
    from protege.models import Toolkit

    agent = agent_granted(HOSTILE)
    scripted_model.script_for("leak", tool_call("leaky"), tool_call("quick"), say("ok"))
    _queue(agent, "leak")
    (done,) = drain(hostile_app)
    assert done.status == "done"  # its own writes were not blocked by the open transaction
    assert not Toolkit.select().where(Toolkit.name == "Leaked").exists()


def test_a_tool_stuck_past_its_timeout_gives_up_its_thread_slot(hostile_app, scripted_model):
    agent = agent_granted(HOSTILE)
    scripted_model.script_for("first", tool_call("stuck"), say("gave up"))
    scripted_model.script_for("second", tool_call("quick"), say("ok"))
    _queue(agent, "first")
    _queue(agent, "second")
    first, second = drain(hostile_app)  # one slot in all: the stuck tool must let it go
    results = [e.payload for r in (first, second) for e in r.timeline() if e.kind == "tool_result"]
    assert [r["ok"] for r in results] == [False, True]
    assert "did not finish within 0.5 s" in results[0]["content"]


def test_a_turn_of_tool_calls_is_committed_as_each_answers_and_not_again(
    agent, app, scripted_model
):
    scripted_model.script_for("one call", tool_call("refund"), say("refunded"))
    _queue(agent, "one call")
    with sql_run() as statements:
        (done,) = drain(app)
    assert done.status == "done"
    assert [e.kind for e in done.timeline()].count("tool_result") == 1
    renewals = [sql for sql in statements if sql.startswith("UPDATE run SET lease_expires")]
    assert len(renewals) == 2  # the call on record before it runs; its answer as it came


def test_a_busy_worker_claims_straight_away_and_looks_at_everything_once_the_queue_empties(
    agent, app, scripted_model
):
    runs = [_queue(agent, f"busy-{n}") for n in range(5)]
    for n in range(5):
        scripted_model.script_for(f"busy-{n}", say("ok"))
    finished = queue.Queue()
    # A poll interval no test outlasts: every look below is one the queue itself asked for.
    pool = Workers(app, max_concurrent_runs=8, poll_interval=3600, on_finished=finished.put)
    with sql_run() as statements:
        pool.start()
        try:
            ended = _ended(finished, len(runs))
        finally:
            pool.stop(grace=10)
    assert sorted(r.id for r in ended) == sorted(r.id for r in runs)
    looks = [sql for sql in statements if sql.startswith("SELECT 1 FROM run WHERE")]
    claims = [sql for sql in statements if sql.startswith("UPDATE run SET status = 'running'")]
    expired = [sql for sql in claims if "status = 'running' AND (lease_expires_at" in sql]
    queued = [sql for sql in claims if "WHERE status = 'queued' ORDER BY turn, id" in sql]
    assert len(looks) == 2  # when it started, and when a claim found the queue empty
    assert len(expired) == 1  # only with the first look: the second found nothing to claim
    assert len(queued) == 6  # five runs, then the claim that found none


@pytest.mark.parametrize("after", range(TURNS))
def test_workers_cancelled_just_after_a_wake_stop(app, after):
    # Python 3.11's asyncio.wait_for returned, swallowing the cancel, when it landed in the
    # turn the wake completed the wait: the workers then ran on, cancelled.
    async def serve():
        pool = Workers(app, max_concurrent_runs=1, poll_interval=3600)
        serving = asyncio.create_task(pool.serve())
        try:
            await until(lambda: pool.waiting)  # nothing queued: they wait for a wake
            pool.wake()
            await turns(after)
            serving.cancel()
            stopped = await ends(serving)
        finally:
            pool.stop_soon(grace=0)
            await asyncio.wait({serving})
        return stopped, serving.cancelled()

    assert asyncio.run(serve()) == (True, True)
    assert protege_threads() == []


def test_workers_cancelled_hand_their_runs_back_to_the_queue(agent, app, scripted_model):
    run = _queue(agent, "held")
    scripted_model.script(tool_call("hold"), say("held"))

    async def serve():
        pool = Workers(app, max_concurrent_runs=1, poll_interval=3600)
        serving = asyncio.create_task(pool.serve())
        try:
            assert await asyncio.to_thread(HOLDING.wait, 30)  # the run is inside its tool
            serving.cancel()
            RELEASE.set()  # the tool's thread ends; the run does not go on
            return await ends(serving, 60), serving.cancelled()
        finally:
            pool.stop_soon(grace=0)
            await asyncio.wait({serving})

    assert asyncio.run(serve()) == (True, True)
    assert Run.get_by_id(run.id).status == "queued"  # handed back: it resumes elsewhere
