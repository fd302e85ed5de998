"""`protege usage --cost` and `protege runs show` price each answer by the model that gave
it, say which models have no price, and agree with the spending ledger."""

import json

import pytest

from protege.models import Agent
from protege.models.limits import UsageDay
from tests.answers import answer

TOML = """\
[model.prices]
"gpt-a" = { input = 10, output = 20 }
"gpt-b" = { input = 1, output = 2 }

[limits]
agent_tokens_per_month = 2000
"""
# gpt-a: 600 * 10 + 100 * 20 micros; gpt-b: 700 * 1 + 30 * 2; gpt-c has no price.
RUN_ONE_MICROS = 8000 + 760


@pytest.fixture
def run_protege(protege_in_process):
    (protege_in_process.project / "protege.toml").write_text(TOML)
    return protege_in_process


@pytest.fixture
def env(protege_db, scripted_model):
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


def _start(run_protege, env, *extra):
    return run_protege(
        "runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", *extra, env=env
    )


@pytest.fixture
def two_runs(run_protege, env, scripted_model):
    """Run 1 answered by gpt-a (a call) then gpt-b; run 2 by gpt-c, which has no price."""
    scripted_model.script(
        answer("gpt-a", 600, 100, call="first", tool="lookup_order"),
        answer("gpt-b", 700, 30, text="Done."),
        answer("gpt-c", 600, 10, text="Hello."),
    )
    for _ in range(2):
        assert _start(run_protege, env).returncode == 0


def test_usage_prices_each_answer_by_its_model_and_names_those_without_a_price(
    run_protege, env, two_runs
):
    per_run = json.loads(run_protege("usage", "--by", "run", "--json", env=env).stdout)
    second, first = per_run
    assert first["cost"] == RUN_ONE_MICROS / 1e6
    assert first["unpriced_models"] == []
    assert first["models"]["gpt-a"] == {
        "responses": 1,
        "prompt_tokens": 600,
        "completion_tokens": 100,
        "cost": 0.008,
    }
    assert first["models"]["gpt-b"]["cost"] == 0.00076
    assert (second["cost"], second["unpriced_models"]) == (None, ["gpt-c"])
    assert second["models"]["gpt-c"]["cost"] is None

    (sundae,) = json.loads(run_protege("usage", "--json", env=env).stdout)
    assert (sundae["runs"], sundae["responses"]) == (2, 3)
    assert sundae["cost"] == RUN_ONE_MICROS / 1e6  # the priced part, and it says what is not
    assert sundae["unpriced_models"] == ["gpt-c"]
    assert sundae["prompt_tokens"] == 1900

    # The same numbers the ledger kept as the answers came.
    ledger = {row.model: row for row in UsageDay.select()}
    assert sum(row.cost_micros for row in ledger.values()) == RUN_ONE_MICROS
    for model, share in sundae["models"].items():
        row = ledger[model]
        assert (row.responses, row.prompt_tokens, row.completion_tokens) == (
            share["responses"],
            share["prompt_tokens"],
            share["completion_tokens"],
        )

    table = run_protege("usage", "--cost", env=env)
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "RUNS", "MODEL", "ANSWERS", "PROMPT", "COMPLETION", "COST"]
    assert [line.split() for line in lines[1:]] == [
        ["Sundae", "2", "gpt-a", "1", "600", "100", "0.0080"],
        ["Sundae", "2", "gpt-b", "1", "700", "30", "0.0008"],
        ["Sundae", "2", "gpt-c", "1", "600", "10", "no", "price"],
    ]
    assert table.stderr.strip() == (
        "No price for gpt-c: its answers are not in the cost (give prices under [model.prices])."
    )
    plain = run_protege("usage", env=env).stdout.splitlines()
    assert plain[1].split()[-1] == "0.0088*"  # marked: some answers had no price
    by_run = run_protege("usage", "--by", "run", "--cost", env=env).stdout.splitlines()
    assert by_run[0].split()[:3] == ["RUN", "AGENT", "STATUS"]
    assert len(by_run) == 4


def test_runs_show_gives_a_run_s_tokens_and_cost(run_protege, env, two_runs):
    shown = json.loads(run_protege("runs", "show", "1", "--json", env=env).stdout)
    assert shown["usage"]["cost"] == RUN_ONE_MICROS / 1e6
    assert shown["usage"]["total_tokens"] == 1430
    assert sorted(shown["usage"]["models"]) == ["gpt-a", "gpt-b"]
    text = run_protege("runs", "show", "1", env=env).stdout.splitlines()
    assert text[2] == (
        "usage: 1,430 tokens (prompt 1,300, completion 130) in 2 answers; cost 0.0088 "
        "(gpt-a 0.0080, gpt-b 0.0008)"
    )
    other = run_protege("runs", "show", "2", env=env).stdout.splitlines()
    assert (
        other[2]
        == "usage: 610 tokens (prompt 600, completion 10) in 1 answer; cost - (gpt-c no price)"
    )


def test_a_run_started_over_its_budget_is_held_and_shows_why(
    run_protege, env, scripted_model, two_runs
):
    # 2,040 tokens this month already: the month's budget of 2,000 is spent.
    held = _start(run_protege, env)
    assert held.returncode == 0, held.stdout  # held is not a failure: it resumes later
    lines = held.stdout.splitlines()
    assert lines[0].endswith(", held")
    assert lines[2].startswith(
        "held: agent_tokens_per_month reached by the agent (2,040 of 2,000); held until "
    )
    assert lines[3].startswith(
        "   1 limit reached, the run is held: agent_tokens_per_month reached by the agent"
    )
    assert len(scripted_model.requests) == 3  # no call was made for it
    shown = json.loads(run_protege("runs", "show", "3", "--json", env=env).stdout)
    assert shown["status"] == "held"
    assert shown["held_reason"].startswith("agent_tokens_per_month reached")
    assert shown["events"][0]["kind"] == "limit_reached"
    assert shown["events"][0]["used"] == 2040
    assert shown["usage"]["responses"] == 0
