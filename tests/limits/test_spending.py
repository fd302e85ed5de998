"""Spending as answers come: the ledger (``usage_day``) kept with the runs' trails, and runs
held at their next model call once a token or money budget is reached, resumed when
released without doing again what they did."""

import asyncio
import datetime
import queue
import threading

import attrs
import peewee
import pytest

from protege import Tool
from protege.config import load_config
from protege.harness.model import close_clients
from protege.harness.runner import carry_out
from protege.installation import open_installation
from protege.limit_settings import LimitSettings, ModelPrice
from protege.limits import spending
from protege.limits.holding import release, release_due
from protege.mail import record_inbound
from protege.models import Agent, Event, Run
from protege.models.limits import UsageDay
from protege.queue import queue_reply
from protege.testing import say, tool_call
from protege.worker import Workers
from tests.answers import answer
from tests.harness.conftest import agent_granted, manifest_of

DAY_ONE = datetime.datetime(2026, 3, 5, 9, 0)
DAY_TWO = datetime.datetime(2026, 3, 6, 9, 0)
NO_LIMITS = {
    "sender_runs_per_hour": 0,
    "sender_runs_per_day": 0,
    "agent_runs_per_hour": 0,
    "agent_tokens_per_day": 0,
    "agent_tokens_per_month": 0,
    "installation_tokens_per_day": 0,
}
CALLED: list[str] = []  # the labels the counted tool was called with, in order


class CountTool(Tool):
    """Notes each call, so a test can tell a call run twice."""

    description = "Counts."
    input_schema = {
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "required": ["label"],
    }

    def use(self, context, label):
        CALLED.append(label)
        return self.success(label=label)


TOGETHER = 4
BARRIER = threading.Barrier(TOGETHER, timeout=30)


class MeetTool(Tool):
    """Succeeds once every run is inside it at the same moment: their answers after it
    are recorded together."""

    description = "Waits for the others."
    timeout = 40

    def use(self, context):
        BARRIER.wait()
        return self.success()


TOOLS = [CountTool, MeetTool]


@pytest.fixture(autouse=True)
def _reset():
    CALLED.clear()
    BARRIER.reset()
    yield
    BARRIER.abort()  # no tool thread outlives its test waiting


@pytest.fixture
def agent(protege_db):
    return agent_granted(TOOLS)


def _config(tmp_path, limits, prices=None):
    config = load_config(tmp_path)  # the scripted model, from the fixture's environment
    return attrs.evolve(
        config,
        limits=LimitSettings(**{**NO_LIMITS, **limits}),
        model=attrs.evolve(config.model, prices=prices or {}),
    )


def _carried(run_id, installation, now):
    """Claim run ``run_id`` and carry it out with the clock at ``now``."""
    claim = Run.claim(run_id, "worker", now, 60)
    assert claim is not None

    async def carried():
        try:
            return await carry_out(Run.get_by_id(run_id), claim, installation, clock=lambda: now)
        finally:
            await close_clients()

    return asyncio.run(carried())


def _kinds(run):
    return [e.kind for e in Run.get_by_id(run.id).timeline()]


def _ledger():
    return {
        (row.agent_id, row.day, row.model): (
            row.responses,
            row.prompt_tokens,
            row.completion_tokens,
            row.cost_micros,
        )
        for row in UsageDay.select()
    }


PRICES = {"gpt-a": ModelPrice(input=10, output=20), "gpt-b": ModelPrice(input=1, output=2)}


@pytest.mark.parametrize(
    ("limits", "limit", "spent_elsewhere"),
    [
        ({"agent_tokens_per_day": 1000}, "agent_tokens_per_day", 0),
        ({"installation_tokens_per_day": 1500}, "installation_tokens_per_day", 500),
        # 600 * 10 + 100 * 20 micros, then 400 * 10 + 50 * 20: 0.008, then 0.013.
        ({"agent_cost_per_day": 0.01}, "agent_cost_per_day", 0),
    ],
    ids=["agent tokens", "installation tokens", "agent money"],
)
def test_a_budget_reached_mid_run_holds_it_at_its_next_model_call_and_it_resumes_once_released(
    agent, tmp_path, scripted_model, limits, limit, spent_elsewhere
):
    config = _config(tmp_path, limits, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    if spent_elsewhere:
        other = Agent.create(name="Other", address="other@thescoop.example")
        spending.record(other.id, "2026-03-05", "gpt-b", spent_elsewhere, 0, 0)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(
        answer("gpt-a", 600, 100, call="first"), answer("gpt-a", 400, 50, call="second")
    )

    held = _carried(run.id, installation, DAY_ONE)

    stored = Run.get_by_id(run.id)
    assert (held.status, stored.status) == ("held", "held")
    assert stored.held_until == datetime.datetime(2026, 3, 6)
    assert (stored.lease_owner, stored.lease_expires_at, stored.error) == (None, None, None)
    assert len(scripted_model.requests) == 2  # no third call was made
    trail = stored.timeline()
    assert trail[-1].kind == "limit_reached"
    assert trail[-1].payload["limit"] == limit == stored.held_reason.split()[0]
    assert trail[-1].payload["until"] == "2026-03-06T00:00:00"
    assert CALLED == ["first", "second"]
    assert _ledger()[(agent.id, "2026-03-05", "gpt-a")] == (2, 1000, 150, 8000 + 5000)

    # Not before its window reopens: the scheduler's pass leaves it held.
    assert release_due(DAY_ONE, config.limits).queued == []

    # The next day, the scheduler's pass lets it into the queue, and it goes on.
    assert release_due(DAY_TWO, config.limits).queued == [run.id]
    scripted_model.script(answer("gpt-b", 700, 30, text="Counted twice."))
    done = _carried(run.id, installation, DAY_TWO)

    assert done.status == "done"
    assert CALLED == ["first", "second"]  # nothing answered was run again
    kinds = _kinds(run)
    assert kinds.count("limit_reached") == 1
    assert kinds.count("tool_call") == 2
    turns = [e.payload["turn"] for e in done.timeline() if e.kind == "model_response"]
    assert turns == [1, 2, 3]  # held turns were not counted against the budget
    resumed = [e.payload["reason"] for e in done.timeline() if e.kind == "resumed"]
    assert len(resumed) == 1
    assert resumed[0].startswith(f"released after it was held: {limit} reached")
    shown = scripted_model.shown(-1)
    assert [m["role"] for m in shown[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert _ledger()[(agent.id, "2026-03-06", "gpt-b")] == (1, 700, 30, 700 + 60)
    _assert_ledger_matches_events(agent)


def test_an_operator_who_releases_a_run_a_limit_stopped_lets_it_go_past_that_limit(
    agent, tmp_path, scripted_model
):
    config = _config(tmp_path, {"agent_tokens_per_day": 1000}, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(
        answer("gpt-a", 600, 100, call="first"), answer("gpt-a", 400, 50, call="second")
    )
    assert _carried(run.id, installation, DAY_ONE).status == "held"

    assert release([run.id], DAY_ONE, by="mara@thescoop.com") == [run.id]
    scripted_model.script(answer("gpt-a", 700, 30, text="Counted twice."))
    done = _carried(run.id, installation, DAY_ONE)

    assert done.status == "done"  # the same day, over the budget: the operator said so
    resumed = [e.payload["reason"] for e in done.timeline() if e.kind == "resumed"]
    assert resumed == [
        "released by mara@thescoop.com, past the limit after it was held: "
        + Run.get_by_id(run.id).timeline()[-4].payload["reason"]
    ]
    # The next run of the agent is held again: the release was for that run alone.
    other = queue_reply(record_inbound(agent, sender="jane@acme.com", body="More"), now=DAY_ONE)
    assert _carried(other.id, installation, DAY_ONE).status == "held"


def _assert_ledger_matches_events(agent):
    """The ledger holds exactly what the agent's runs' answers say, priced by model."""
    expected: dict[str, list[int]] = {}
    for event in (
        Event.select().join(Run).where((Run.agent == agent) & (Event.kind == "model_response"))
    ):
        usage = event.payload["usage"]
        row = expected.setdefault(event.payload["model"], [0, 0, 0])
        row[0] += 1
        row[1] += usage["prompt_tokens"]
        row[2] += usage["completion_tokens"]
    found: dict[str, list[int]] = {}
    for row in UsageDay.select().where(UsageDay.agent == agent):
        totals = found.setdefault(row.model, [0, 0, 0])
        totals[0] += row.responses
        totals[1] += row.prompt_tokens
        totals[2] += row.completion_tokens
    assert found == expected


def test_no_spending_limit_means_no_hold_and_the_ledger_still_counts(
    agent, tmp_path, scripted_model
):
    config = _config(tmp_path, {})
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    spending.record(agent.id, "2026-03-05", "gpt-a", 10**12, 0, 0)  # more than any default
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(answer("gpt-a", 5, 1, call="one"), answer("gpt-a", 7, 2, text="ok"))

    assert _carried(run.id, installation, DAY_ONE).status == "done"

    # No price for gpt-a: tokens counted, no money.
    assert _ledger()[(agent.id, "2026-03-05", "gpt-a")] == (3, 10**12 + 12, 3, 0)


def test_a_run_admitted_before_the_budget_ran_out_is_held_before_its_first_call(
    agent, tmp_path, scripted_model
):
    config = _config(tmp_path, {"agent_tokens_per_month": 100})
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    spending.record(agent.id, "2026-03-01", "gpt-a", 100, 0, 0)

    assert _carried(run.id, installation, DAY_ONE).status == "held"

    assert scripted_model.requests == []
    stored = Run.get_by_id(run.id)
    assert stored.held_until == datetime.datetime(2026, 4, 1)
    assert _kinds(run) == ["limit_reached"]
    assert stored.attempts == 0  # holding is not a failed attempt


def test_a_worker_that_lost_its_lease_records_no_spending(agent, tmp_path, scripted_model):
    config = _config(tmp_path, {"agent_tokens_per_day": 10**6}, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    first = Run.claim(run.id, "worker-a", DAY_ONE, 2)
    later = DAY_ONE + datetime.timedelta(seconds=10)
    assert Run.claim_next("worker-b", later, 2).taken_over
    scripted_model.script(answer("gpt-a", 600, 100, call="first"))

    async def carried():
        try:
            return await carry_out(run, first, installation, clock=lambda: DAY_ONE)
        finally:
            await close_clients()

    asyncio.run(carried())

    assert len(scripted_model.requests) == 1  # the model answered; the answer was not kept
    assert _kinds(run) == []
    assert CALLED == []
    assert _ledger() == {}


def test_runs_recording_spending_at_once_on_sqlite_do_not_trip_over_each_other(
    agent, tmp_path, scripted_model
):
    config = _config(tmp_path, {"agent_tokens_per_day": 10**9}, PRICES)
    app = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    runs = [
        queue_reply(record_inbound(agent, sender=f"s{n}@acme.com", body=f"run-{n}"))
        for n in range(TOGETHER)
    ]
    for n in range(TOGETHER):
        scripted_model.script_for(f"run-{n}", tool_call("meet"), say("met"))
    finished: queue.Queue = queue.Queue()
    pool = Workers(app, max_concurrent_runs=TOGETHER, poll_interval=0.05, on_finished=finished.put)
    pool.start()
    try:
        ended = [finished.get(timeout=60) for _ in range(TOGETHER)]
    finally:
        pool.stop(grace=10)

    assert sorted(r.id for r in ended) == sorted(r.id for r in runs)
    assert {(r.status, r.error) for r in ended} == {("done", None)}
    (row,) = UsageDay.select()
    assert row.responses == 2 * TOGETHER
    _assert_ledger_matches_events(agent)


def test_operators_are_alerted_once_when_a_run_is_held_part_way(agent, tmp_path, scripted_model):
    from protege.models import Message

    config = _config(tmp_path, {"agent_tokens_per_day": 1000}, PRICES)
    config = attrs.evolve(
        config, limits=attrs.evolve(config.limits, alert_to="ops@thescoop.example")
    )
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    runs = [
        queue_reply(record_inbound(agent, sender="jane@acme.com", body=f"Count {n}"), now=DAY_ONE)
        for n in range(2)
    ]
    scripted_model.script(
        answer("gpt-a", 600, 100, call="first"), answer("gpt-a", 400, 50, call="second")
    )
    assert [_carried(run.id, installation, DAY_ONE).status for run in runs] == ["held", "held"]
    alerts = list(Message.select().where(Message.direction == "outbound"))
    assert [m.to_addresses for m in alerts] == [["ops@thescoop.example"]]
    assert alerts[0].subject == f"Limit reached: agent_tokens_per_day ({agent.name})"


@pytest.mark.parametrize(
    ("prompt", "completion"),
    [(10**19, 0), (1e30, 5), (9.2e18, 9.2e18)],
    ids=["an int past 64 bits", "a huge float", "twice near the 64-bit limit"],
)
def test_an_absurd_usage_count_is_clamped_and_logged_and_the_run_ends_properly(
    agent, tmp_path, scripted_model, caplog, prompt, completion
):
    config = _config(tmp_path, {"agent_cost_per_day": 10**6}, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(
        answer("gpt-a", prompt, completion, call="one"), answer("gpt-a", 1, 1, text="ok")
    )

    with caplog.at_level("WARNING", logger="protege.limits.spending"):
        done = _carried(run.id, installation, DAY_ONE)

    assert (done.status, Run.get_by_id(run.id).status) == ("done", "done")
    most = spending.MAX_TOKENS_PER_ANSWER
    clamped = (min(int(prompt), most), min(int(completion), most))
    cost = clamped[0] * 10 + clamped[1] * 20 + 1 * 10 + 1 * 20
    assert _ledger()[(agent.id, "2026-03-05", "gpt-a")] == (
        2,
        clamped[0] + 1,
        clamped[1] + 1,
        cost,
    )
    suspect = [r for r in caplog.records if "suspect" in r.getMessage()]
    assert len(suspect) == 1  # once for the answer, however many of its counts are absurd
    # The agent is not held for a month by a count no endpoint could mean.
    later = queue_reply(record_inbound(agent, sender="jane@acme.com", body="More"), now=DAY_ONE)
    scripted_model.script(answer("gpt-a", 1, 1, text="ok"))
    assert _carried(later.id, installation, DAY_ONE).status == "done"


def test_a_spend_is_bounded_whatever_its_price():
    huge = ModelPrice(input=1e300, output=float("inf"))
    spend = spending.spend_of("gpt-a", {"prompt_tokens": 10, "completion_tokens": 10}, huge)
    assert spend.cost_micros == spending.MAX_COST_MICROS_PER_ANSWER
    assert spending.tokens_of({"prompt_tokens": -5, "completion_tokens": 2.9}) == (0, 2)
    # Bounded so that a day of answers cannot pass a signed 64-bit column (SQLite's
    # INTEGER, PostgreSQL's BIGINT) short of millions of absurd answers.
    assert spending.MAX_COST_MICROS_PER_ANSWER * 1_000_000 < 2**63
    assert spending.MAX_TOKENS_PER_ANSWER * 1_000_000 < 2**63


def test_a_ledger_that_refuses_an_answer_does_not_leave_its_run_running(
    agent, tmp_path, scripted_model, caplog
):
    from protege.db import database

    if not isinstance(database.obj, peewee.SqliteDatabase):
        pytest.skip("the refusing trigger is written in SQLite's dialect")
    config = _config(tmp_path, {}, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(answer("gpt-a", 5, 1, call="one"), answer("gpt-a", 7, 2, text="ok"))
    database.execute_sql(
        "CREATE TRIGGER refuse_usage BEFORE INSERT ON usage_day "
        "BEGIN SELECT RAISE(ABORT, 'the ledger is refusing'); END"
    )
    try:
        with caplog.at_level("ERROR", logger="protege.limits.spending"):
            done = _carried(run.id, installation, DAY_ONE)
    finally:
        database.execute_sql("DROP TRIGGER refuse_usage")

    assert (done.status, Run.get_by_id(run.id).status) == ("done", "done")
    assert _kinds(run).count("model_response") == 2
    assert CALLED == ["one"]
    assert _ledger() == {}
    assert len([r for r in caplog.records if "ledger" in r.getMessage()]) == 2


def test_under_a_money_limit_an_answer_of_a_model_without_a_price_is_charged_the_highest(
    agent, tmp_path, scripted_model, caplog
):
    config = _config(tmp_path, {"agent_cost_per_month": 1000}, PRICES)
    installation = open_installation(config, manifest=manifest_of(TOOLS), connect=False)
    run = queue_reply(record_inbound(agent, sender="jane@acme.com", body="Count"), now=DAY_ONE)
    scripted_model.script(
        answer("openai/GPT-A:latest", 100, 10, call="one"), answer("mystery", 100, 10, text="ok")
    )

    with caplog.at_level("WARNING", logger="protege.limits.spending"):
        assert _carried(run.id, installation, DAY_ONE).status == "done"

    ledger = _ledger()
    assert ledger[(agent.id, "2026-03-05", "openai/GPT-A:latest")] == (1, 100, 10, 1000 + 200)
    # No price for "mystery": the highest input (gpt-a's 10) and output (gpt-a's 20).
    assert ledger[(agent.id, "2026-03-05", "mystery")] == (1, 100, 10, 1000 + 200)
    warned = [r.getMessage() for r in caplog.records if "no price" in r.getMessage()]
    assert len(warned) == 1
    assert "'mystery'" in warned[0]
