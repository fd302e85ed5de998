"""`protege runs`, against the scripted model, in a real subprocess."""

import json

import pytest

from protege.models import Agent
from protege.testing import say, tool_call


@pytest.fixture
def env(protege_db, scripted_model, monkeypatch):
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


def test_runs_start_runs_the_agent_and_prints_the_trail(run_protege, env, scripted_model):
    scripted_model.script(tool_call("process_refund", order_number="1"), say("Sorry, I can't."))
    result = run_protege(
        "runs",
        "start",
        "Sundae",
        "--sender",
        "jane@acme.com",
        "--message",
        "Refund please",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "run 1: Sundae, reply (message from jane@acme.com), done"
    assert (
        "   4   REFUSED process_refund: the tool 'process_refund' is not available in this run"
        in (lines)
    )
    assert any("model says Sorry, I can't." in line for line in lines)
    assert "Refund please" in scripted_model.shown(0)[-1]["content"]


def test_runs_list_and_show_json(run_protege, env, scripted_model):
    scripted_model.script(say("Hello."))
    run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    (row,) = json.loads(run_protege("runs", "list", "--json", env=env).stdout)
    assert (row["id"], row["agent"], row["status"], row["attempts"]) == (1, "Sundae", "done", 1)
    shown = json.loads(run_protege("runs", "show", "1", "--json", env=env).stdout)
    assert [e["kind"] for e in shown["events"]] == ["model_request", "model_response"]
    assert shown["events"][1]["content"] == "Hello."


def test_a_failed_run_exits_1_with_its_error(run_protege, env, scripted_model):
    from protege.testing import http_error

    scripted_model.script(http_error(401))
    result = run_protege(
        "runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env
    )
    assert result.returncode == 1
    assert "error: the model endpoint refused the API key (401)" in result.stdout


def test_a_sender_the_agent_refuses_is_not_run(run_protege, env):
    Agent.named("Sundae").add_access_rule("deny", "*@acme.com")
    result = run_protege(
        "runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: j@acme.com may not write to Sundae: deny rule *@acme.com matches"
    )


def test_no_model_configured(run_protege, protege_db):
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    result = run_protege(
        "runs",
        "start",
        "Sundae",
        "--sender",
        "j@acme.com",
        "--message",
        "Hi",
        env={"PROTEGE_DATABASE_URL": protege_db.url},
    )
    assert result.returncode == 1
    assert 'error: no model is configured: set model = "..." under [model]' in result.stdout


def test_show_unknown_run(run_protege, env):
    result = run_protege("runs", "show", "99", env=env)
    assert result.stderr.strip() == "Error: no run 99"


def test_retry_runs_a_failed_run_again(run_protege, env, scripted_model):
    from protege.testing import http_error

    scripted_model.script(http_error(401))
    run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    scripted_model.script(say("Better now."))
    result = run_protege("runs", "retry", "1", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "run 1: Sundae, reply (message from j@acme.com), done"
    again = run_protege("runs", "retry", "1", env=env)
    assert again.returncode == 1
    assert again.stderr.strip() == "Error: run 1 is done: only failed or stuck runs are retried"


def test_runs_list_for_one_agent(run_protege, env, scripted_model):
    Agent.create(name="Scout", address="scout@thescoop.example")
    scripted_model.script(say("a"), say("b"))
    for agent in ("Sundae", "Scout"):
        run_protege("runs", "start", agent, "--sender", "j@acme.com", "--message", "Hi", env=env)
    rows = json.loads(run_protege("runs", "list", "--agent", "Scout", "--json", env=env).stdout)
    assert [(r["id"], r["agent"]) for r in rows] == [(2, "Scout")]
