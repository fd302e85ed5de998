"""The model endpoint's circuit breaker, against the scripted OpenAI-compatible endpoint
answering 500s, then a 429 with Retry-After, then answering again: the circuit opens, the
workers take no run while it is open, one run probes, and no run is failed or worn out."""

import asyncio
import datetime
import queue

import attrs
import pytest

from protege.config import load_config
from protege.installation import open_installation
from protege.limits.circuit import Breaker, describe, endpoint_of, summary
from protege.mail import record_inbound
from protege.models import Event, Message, Run
from protege.models.limits import CLOSED, HALF_OPEN, OPEN, Circuit
from protege.queue import queue_reply
from protege.testing import http_error, say
from protege.worker import Workers, drain
from tests.conftest import sql_run
from tests.harness.conftest import agent_granted, manifest_of
from tests.looping import until

START = datetime.datetime(2026, 3, 2, 9, 0, 0)
OPS = "ops@thescoop.example"


class Clock:
    """The time the workers, leases and circuit are told: moved by the test alone."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock():
    return Clock()


def _config(tmp_path, **limits):
    config = load_config(tmp_path)  # the scripted model, from the fixture's environment
    settings = {
        "circuit_failures": 3,
        "circuit_backoff_seconds": 30.0,
        "circuit_max_backoff_seconds": 120.0,
        "alert_to": OPS,
        **limits,
    }
    return attrs.evolve(
        config,
        model=attrs.evolve(config.model, max_retries=0),  # no sleeping between retries
        limits=attrs.evolve(config.limits, **settings),
    )


@pytest.fixture
def app(tmp_path, scripted_model, protege_db):
    return open_installation(_config(tmp_path), manifest=manifest_of([]), connect=False)


@pytest.fixture
def agent(protege_db):
    return agent_granted([])


def _queue(agent, sender, body):
    return queue_reply(record_inbound(agent, sender=sender, body=body))


def _circuit(app):
    return Circuit.get(Circuit.endpoint == endpoint_of(app.config.model))


def _alerts():
    outbound = Message.select().where(Message.direction == "outbound")
    return [m for m in outbound if m.to_addresses == [OPS]]


def _kinds(run):
    return [e.kind for e in Run.get_by_id(run.id).timeline()]


def test_a_failing_endpoint_opens_the_circuit_and_runs_wait_until_it_answers(
    app, agent, scripted_model, clock
):
    first = _queue(agent, "jane@acme.com", "first")
    second = _queue(agent, "joe@acme.com", "second")
    scripted_model.script(*[http_error(500, "the server broke")] * 3)

    drain(app, clock=clock)

    # Three failures in a row: the circuit opened, and the drain took nothing more.
    assert len(scripted_model.requests) == 3
    circuit = _circuit(app)
    assert (circuit.state, circuit.failures, circuit.opened) == (OPEN, 3, 1)
    assert circuit.failing_since == START
    assert circuit.open_until == START + datetime.timedelta(seconds=30)
    assert "the server broke" in circuit.last_error
    runs = [Run.get_by_id(r.id) for r in (first, second)]
    assert [(r.status, r.attempts) for r in runs] == [("queued", 0), ("queued", 0)]
    (alert,) = _alerts()
    assert alert.agent_id == agent.id
    assert alert.run_id == first.id
    assert "no runs are taken until 2026-03-02 09:00:30Z" in alert.subject

    # While open, nothing is taken: not at once, not a second before its end.
    drain(app, clock=clock)
    clock.advance(29)
    drain(app, clock=clock)
    assert len(scripted_model.requests) == 3

    # Past it, one run probes; the endpoint now rate limits and asks for 100 s, longer
    # than the doubled backoff (60 s).
    clock.advance(1)
    scripted_model.script(http_error(429, "slow down", retry_after=100))
    drain(app, clock=clock)
    assert len(scripted_model.requests) == 4
    circuit = _circuit(app)
    assert (circuit.state, circuit.failures, circuit.opened) == (OPEN, 4, 2)
    assert circuit.open_until == clock.now + datetime.timedelta(seconds=100)
    clock.advance(60)
    drain(app, clock=clock)
    assert len(scripted_model.requests) == 4  # Retry-After honoured past the backoff

    # It answers again: the probe closes the circuit and the other run follows.
    clock.advance(40)
    scripted_model.script(say("Hello Jane."), say("Hello Joe."))
    drain(app, clock=clock)
    assert len(scripted_model.requests) == 6
    runs = [Run.get_by_id(r.id) for r in (first, second)]
    assert [(r.status, r.attempts, r.error) for r in runs] == [
        ("done", 1, None),
        ("done", 1, None),
    ]
    circuit = _circuit(app)
    assert (circuit.state, circuit.failures, circuit.opened) == (CLOSED, 0, 0)
    assert (circuit.failing_since, circuit.open_until) == (None, None)
    assert describe(clock.now) is None
    assert len(_alerts()) == 1  # one alert for the outage, not one per opening

    # Every failed call went back to the queue with its reason (each time behind the other
    # run, which made the next try); none used up the turns.
    unavailable = [
        (e.run_id, e.payload)
        for e in Event.select().where(Event.kind == "model_unavailable").order_by(Event.id)
    ]
    assert [run_id for run_id, _ in unavailable] == [first.id, second.id, first.id, second.id]
    # (the scripted endpoint asks for a millisecond unless told otherwise)
    assert [u["retry_after"] for _, u in unavailable] == [0.001, 0.001, 0.001, 100.0]
    assert [u["circuit"] for _, u in unavailable] == [CLOSED, CLOSED, OPEN, OPEN]
    assert [u["alone"] for _, u in unavailable] == [True, False, False, False]
    for run in (first, second):
        trail = Run.get_by_id(run.id).timeline()
        assert {e.payload["turn"] for e in trail if e.kind == "model_request"} == {1}
        assert "error" not in _kinds(run)


def test_a_success_while_healthy_writes_nothing_to_the_circuit(app, agent, scripted_model, clock):
    scripted_model.script(say("One."), say("Two."))
    _queue(agent, "jane@acme.com", "one")
    _queue(agent, "jane@acme.com", "two")
    with sql_run() as statements:
        done = drain(app, clock=clock)
    assert [r.status for r in done] == ["done", "done"]
    writes = [s for s in statements if "circuit" in s and not s.startswith("SELECT")]
    assert writes == []
    assert Circuit.select().count() == 0


def test_a_refused_api_key_still_fails_the_run_at_once(app, agent, scripted_model, clock):
    run = _queue(agent, "jane@acme.com", "hello")
    scripted_model.script(http_error(401, "Incorrect API key provided"))
    drain(app, clock=clock)
    run = Run.get_by_id(run.id)
    assert run.status == "failed"
    assert run.error.startswith("the model endpoint refused the API key (401)")
    assert "model_unavailable" not in _kinds(run)
    assert Circuit.select().count() == 0
    assert describe(clock.now) is None


def test_a_bad_request_is_the_run_s_own_failure_not_the_endpoint_s(
    app, agent, scripted_model, clock
):
    run = _queue(agent, "jane@acme.com", "hello")
    scripted_model.script(http_error(400, "messages: too long"))
    drain(app, clock=clock)
    assert Run.get_by_id(run.id).status == "failed"
    assert Circuit.select().count() == 0


def test_runs_in_flight_failing_past_the_limit_open_the_circuit_once(
    app, agent, scripted_model, clock
):
    # A breaker per process, both on the database: four failures, one opening.
    here, there = Breaker.of(app.config, clock=clock), Breaker.of(app.config, clock=clock)
    openings = [b.failed("the model endpoint answered 502: bad gateway") for b in (here, there)]
    openings += [b.failed("the model endpoint answered 502: bad gateway") for b in (here, there)]
    assert [o is not None for o in openings] == [False, False, True, False]
    assert _circuit(app).opened == 1


def test_the_backoff_doubles_per_reopening_up_to_its_maximum(app, clock):
    breaker = Breaker.of(app.config, clock=clock)
    for _ in range(3):
        breaker.failed("down")
    waits = []
    for _ in range(4):
        waits.append((breaker.known().open_until - clock.now).total_seconds())
        clock.advance(waits[-1])
        assert breaker.gate().probe
        breaker.failed("still down")  # the probe failed: open again, for longer
    assert waits == [30, 60, 120, 120]


def test_retry_after_longer_than_the_backoff_keeps_the_circuit_open_longer(app, clock):
    breaker = Breaker.of(app.config, clock=clock)
    for _ in range(3):
        breaker.failed("down")
    assert breaker.known().open_until == clock.now + datetime.timedelta(seconds=30)
    breaker.failed("a run in flight was told to wait", retry_after=90)
    assert breaker.known().open_until == clock.now + datetime.timedelta(seconds=90)
    breaker.failed("and a shorter wait changes nothing", retry_after=5)
    assert breaker.known().open_until == clock.now + datetime.timedelta(seconds=90)


def test_only_one_process_takes_the_probe(app, clock):
    here, there = Breaker.of(app.config, clock=clock), Breaker.of(app.config, clock=clock)
    for _ in range(3):
        here.failed("down")
    assert not there.gate().take  # it reads the open circuit on its first look
    clock.advance(30)
    gates = [here.gate(), there.gate()]
    assert [(g.take, g.probe) for g in gates] == [(True, True), (False, False)]
    assert _circuit(app).state == HALF_OPEN
    # The other waits while the probe may take, as long as a model call may.
    probe_deadline = clock.now + datetime.timedelta(seconds=app.config.model.max_call_seconds)
    assert gates[1].until == probe_deadline
    # A probe whose worker died is taken by another once that time has passed.
    clock.advance(app.config.model.max_call_seconds)
    assert there.gate().probe
    # A probe that found no run is given up: the next look probes again.
    there.probe_unused()
    assert _circuit(app).state == OPEN
    assert here.gate().probe


def test_a_success_closes_the_circuit_another_process_opened(app, clock):
    here, there = Breaker.of(app.config, clock=clock), Breaker.of(app.config, clock=clock)
    there.refresh()  # it saw the circuit closed, before the failures
    for _ in range(3):
        here.failed("down")
    there.refresh()
    there.succeeded()  # one of its runs in flight got an answer
    assert (_circuit(app).state, _circuit(app).failures) == (CLOSED, 0)
    assert here.refresh().healthy


def test_workers_take_no_run_while_the_circuit_is_open_and_resume_on_their_own(
    app, agent, scripted_model, clock
):
    run = _queue(agent, "jane@acme.com", "hello")
    scripted_model.script(*[http_error(503, "overloaded")] * 3)
    finished = queue.Queue()
    # A poll interval no test outlasts: the workers act on the wakes alone.
    pool = Workers(app, poll_interval=3600, on_finished=finished.put, clock=clock)

    async def main():
        serving = asyncio.create_task(pool.serve())
        try:
            await until(lambda: pool.paused)
            assert len(scripted_model.requests) == 3  # the run failed thrice, then no more
            assert Run.get_by_id(run.id).status == "queued"
            scripted_model.script(say("Hello Jane."))
            clock.advance(30)
            pool.wake()
            await until(lambda: not finished.empty())
        finally:
            pool.stop_soon(grace=10)
            await serving

    asyncio.run(main())
    done = finished.get_nowait()
    assert (done.id, done.status) == (run.id, "done")
    assert Run.get_by_id(run.id).attempts == 1
    assert _circuit(app).state == CLOSED
    assert not pool.paused


def test_describe_says_since_when_the_endpoint_fails_and_until_when_runs_wait(app, clock):
    breaker = Breaker.of(app.config, clock=clock)
    breaker.failed("the model endpoint answered 500: boom")
    clock.advance(5)
    described = describe(clock.now)
    assert described["state"] == CLOSED
    assert described["failures"] == 1
    assert summary(described) == (
        "model endpoint failing since 2026-03-02 09:00:00Z, 1 failed call(s) in a row, "
        "circuit closed (last error: the model endpoint answered 500: boom)"
    )
    breaker.failed("the model endpoint answered 500: boom")
    breaker.failed("the model endpoint answered 500: boom")
    described = describe(clock.now)
    assert described == {
        "endpoint": endpoint_of(app.config.model),
        "state": OPEN,
        "failures": 3,
        "opened": 1,
        "failing_since": "2026-03-02 09:00:00Z",
        "open_until": "2026-03-02 09:00:35Z",
        "seconds_left": 30.0,
        "last_error": "the model endpoint answered 500: boom",
    }
    assert summary(described) == (
        "model endpoint failing since 2026-03-02 09:00:00Z, circuit open until "
        "2026-03-02 09:00:35Z (last error: the model endpoint answered 500: boom)"
    )


def test_a_run_whose_own_calls_keep_failing_is_failed_and_keeps_nobody_waiting(
    app, agent, scripted_model, clock
):
    # A mail that makes the endpoint refuse its call every time (a request too large for
    # the provider's rate limit), among mail it answers. Each time, the run goes to the
    # back of the queue: the others are answered, and once its own calls failed
    # max_attempts times while the endpoint answered the rest, it is failed.
    too_large = http_error(429, "Request too large for gpt-4o on tokens per min (TPM)")
    scripted_model.script_for("POISON", *[too_large] * 10)
    poison = _queue(agent, "mallory@evil.example", "POISON " * 50)
    quiet = [_queue(agent, f"q{n}@acme.example", f"quiet {n}") for n in range(3)]
    for n in range(3):
        scripted_model.script_for(f"quiet {n}", say("ok"))
    scripted_model.script_for("later", *[say("ok")] * 10)
    for _ in range(4):
        drain(app, clock=clock)
        _queue(agent, "later@acme.example", "later")  # others keep writing meanwhile
        clock.advance(200)
    drain(app, clock=clock)
    assert [Run.get_by_id(r.id).status for r in quiet] == ["done"] * 3
    failed = Run.get_by_id(poison.id)
    assert failed.status == "failed"
    assert failed.error.startswith(
        "the model endpoint failed this run's call 3 times while it answered other calls"
    )
    unavailable = [e.payload for e in failed.timeline() if e.kind == "model_unavailable"]
    # Alone in the queue, its calls make a streak that opens the circuit like an outage;
    # only those made after the endpoint had answered others count against it.
    assert sum(u["alone"] for u in unavailable) == 3
    assert unavailable[-1]["alone"]
    assert Run.select().where(Run.status == "queued").count() == 0
    assert _circuit(app).state == CLOSED


def test_an_outage_fails_no_run_however_long_it_lasts(app, agent, scripted_model, clock):
    scripted_model.script(*[http_error(503, "overloaded")] * 40)
    run = _queue(agent, "jane@acme.example", "hello")
    for _ in range(12):  # a dozen openings of the circuit, each probed by the one run
        drain(app, clock=clock)
        clock.advance(200)
    waiting = Run.get_by_id(run.id)
    assert waiting.status == "queued"
    unavailable = [e.payload for e in waiting.timeline() if e.kind == "model_unavailable"]
    assert len(unavailable) >= 12
    assert sum(u["alone"] for u in unavailable) == 1  # only the outage's first failure


def test_a_circuit_opened_thousands_of_times_still_waits_its_maximum(app, clock):
    breaker = Breaker.of(app.config, clock=clock)
    for _ in range(3):
        breaker.failed("down")
    Circuit.update(opened=5000).where(Circuit.endpoint == breaker.endpoint).execute()
    clock.advance(30)
    breaker.refresh()
    assert breaker.gate().probe

    assert breaker.failed("still down") is not None  # no OverflowError: it opens again

    assert breaker.known().open_until == clock.now + datetime.timedelta(seconds=120)


@pytest.mark.parametrize(
    ("base_url", "key"),
    [
        (
            "https://user:sk-secret@llm.example:8443/v1/?key=sk-secret#part",
            "https://llm.example:8443/v1",
        ),
        ("http://sk-secret@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://llm.example/v1?api-key=sk-secret", "https://llm.example/v1"),
        ("https://[::1]:9000/openai/v1/", "https://[::1]:9000/openai/v1"),
    ],
)
def test_the_circuit_s_endpoint_keeps_no_user_password_or_query(base_url, key):
    from protege.config import ModelSettings

    assert endpoint_of(ModelSettings(base_url=base_url)) == key
