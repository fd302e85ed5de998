"""A model endpoint that never finishes answering holds no run for ever: each model call has
a deadline as a whole, each run a wall-clock limit, and a cancel stops a run waiting on the
model. The endpoint is faked at the HTTP boundary: a real server on loopback that sends a
byte now and then and never the end of its answer."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import attrs
import pytest

from protege.models import Run
from protege.models.base import utcnow
from protege.testing import run_reply
from tests.harness.conftest import agent_granted, manifest_of

DRIP_FOR = 30.0  # seconds the server drips before it gives up (the test failed by then)


class Dripping(ThreadingHTTPServer):
    """Answers each request with a 200 whose body never ends: a space every tenth of a
    second, each one well within any read timeout."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Drip)
        self.asked = threading.Event()  # a request came and is being dripped to
        self.stop = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Drip(BaseHTTPRequestHandler):
    server: Dripping
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.server.asked.set()
        for _ in range(int(DRIP_FOR * 10)):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:  # the client gave up: as it should
                return
            if self.server.stop.wait(0.1):  # pacing the drip, not waiting for the test
                return

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def endpoint():
    server = Dripping()
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    yield server
    server.stop.set()
    server.shutdown()
    server.server_close()
    serving.join(30)


@pytest.fixture
def agent(protege_db):
    return agent_granted([])


def _dripped(config, endpoint, model=None, runs=None):
    settings = attrs.evolve(
        config.model,
        base_url=endpoint.base_url,
        max_retries=0,
        timeout=10,  # each read: a byte comes every tenth of a second
        **(model or {}),
    )
    return attrs.evolve(config, model=settings, runs=attrs.evolve(config.runs, **(runs or {})))


def test_a_model_call_that_never_finishes_ends_at_its_deadline_and_waits_in_the_queue(
    agent, config, endpoint
):
    dripped = _dripped(config, endpoint, model={"max_call_seconds": 1})
    run = run_reply(
        agent, sender="jane@acme.com", body="Hi", config=dripped, manifest=manifest_of([])
    )
    stored = Run.get_by_id(run.id)
    assert (stored.status, stored.attempts) == ("queued", 0)  # not failed, attempt given back
    (unavailable,) = [e.payload for e in run.timeline() if e.kind == "model_unavailable"]
    assert unavailable["error"] == (
        "the model endpoint did not finish answering within 1 s "
        "(raise max_call_seconds under [model])"
    )


def test_a_run_past_its_wall_clock_limit_fails_with_the_budget_named(agent, config, endpoint):
    dripped = _dripped(config, endpoint, runs={"max_run_seconds": 1})
    run = run_reply(
        agent, sender="jane@acme.com", body="Hi", config=dripped, manifest=manifest_of([])
    )
    assert (run.status, run.error) == ("failed", "budget exhausted: max_run_seconds (1)")
    assert [e.kind for e in Run.get_by_id(run.id).timeline()][-1] == "budget_exhausted"


def test_a_cancel_stops_a_run_waiting_on_the_model(agent, config, endpoint):
    dripped = _dripped(config, endpoint)  # the default deadlines: minutes away
    ran: list[Run] = []
    worker = threading.Thread(
        target=lambda: ran.append(
            run_reply(
                agent, sender="jane@acme.com", body="Hi", config=dripped, manifest=manifest_of([])
            )
        )
    )
    worker.start()
    assert endpoint.asked.wait(30)
    (running,) = Run.select().where(Run.status == "running")
    assert Run.request_cancel(running.id, utcnow()) == "running"
    worker.join(60)
    (ended,) = ran
    assert (ended.status, ended.error) == ("cancelled", "cancelled by an operator")
    assert [e.kind for e in Run.get_by_id(ended.id).timeline()][-2:] == [
        "model_request",
        "cancelled",
    ]
