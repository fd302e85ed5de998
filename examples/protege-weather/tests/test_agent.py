"""The forecast tool in a real agent run: scripted model, fake forecast service on loopback."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from protege.models import Agent, Toolkit
from protege.testing import run_reply, say, tool_call
from protege_weather import BASE_URL_VARIABLE

FORECAST = {
    "daily": {
        "time": ["2026-11-30"],
        "temperature_2m_max": [7.5],
        "temperature_2m_min": [1.2],
        "precipitation_sum": [0.4],
    }
}


@pytest.fixture
def forecast_service(monkeypatch):
    """A stand-in for the forecast API, listening on loopback."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            data = json.dumps(FORECAST).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    monkeypatch.setenv(BASE_URL_VARIABLE, f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()
    server.server_close()


def test_an_agent_answers_with_the_forecast(protege_app, scripted_model, forecast_service):
    agent = Agent.create(name="Breeze", address="breeze@example.test")
    agent.grant(Toolkit.create(name="Weather", member_tool_ids=["get_forecast"]))
    scripted_model.script(
        tool_call("get_forecast", latitude=52.52, longitude=13.41, days=1),
        say("Mild, a little rain."),
    )

    run = run_reply(
        agent,
        sender="sam@example.org",
        body="Weather in Berlin tomorrow?",
        installation=protege_app,
    )

    assert run.status == "done"
    assert scripted_model.offered_tools(0) == ["get_forecast"]
    (result,) = [m["content"] for m in scripted_model.shown(1) if m["role"] == "tool"]
    assert result.startswith("<<<UNTRUSTED ")  # outside content is fenced
    assert '"high_c": 7.5' in result
