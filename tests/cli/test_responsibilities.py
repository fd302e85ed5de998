"""`protege responsibilities`, `protege scheduler` and the scheduler in `protege serve`, as an
operator runs them (real subprocesses, the scripted model)."""

import datetime
import json
import signal

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Responsibility, Run, Toolkit
from protege.scheduler import Scheduler
from protege.testing import say, tool_call

from .serving import read_line, start

UTC = datetime.UTC


@pytest.fixture
def run_protege(protege_in_process):
    """Commands run in-process (click's test runner); `serve` still runs as a process."""
    return protege_in_process


@pytest.fixture
def env(protege_db, scripted_model):
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    scout.grant(
        Toolkit.create(name="Operations", member_tool_ids=["send_email"]), allow_proactive=True
    )
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


def test_the_round_trip_add_list_show_edit_disable_enable_delete(run_protege, env):
    def protege(*args):
        result = run_protege("responsibilities", *args, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout

    added = protege(
        "add",
        "Scout",
        "morning stock",
        "--schedule",
        "0  7 1 1 *",
        "--timezone",
        "Europe/Berlin",
        "--instructions",
        "Check the stock and mail Mara.",
    )
    year = _next_new_year()
    assert added == (
        "added Scout's responsibility 'morning stock': 0 7 1 1 * (Europe/Berlin), "
        f"next due {year}-01-01 07:00 CET\n"
    )
    (row,) = json.loads(protege("list", "--json"))
    assert row == {
        "agent": "Scout",
        "name": "morning stock",
        "schedule": "0 7 1 1 *",
        "timezone": "Europe/Berlin",
        "enabled": True,
        "next_due": f"{year}-01-01 07:00 CET",
    }
    shown = json.loads(protege("show", "morning stock", "--count", "3", "--json"))
    assert shown["instructions"] == "Check the stock and mail Mara."
    assert shown["due"] == [f"{year + n}-01-01 07:00 CET" for n in range(3)]
    assert "next due:\n  " in protege("show", "morning stock")

    edited = protege("edit", "morning stock", "--schedule", "@daily", "--timezone", "UTC")
    assert edited.startswith("changed Scout's responsibility 'morning stock': @daily (UTC)")
    assert protege("disable", "morning stock") == "disabled Scout's 'morning stock'\n"
    assert json.loads(protege("list", "--json"))[0]["next_due"] is None
    assert protege("enable", "morning stock") == "enabled Scout's 'morning stock'\n"
    assert protege("delete", "morning stock", "--yes") == (
        "deleted Scout's responsibility 'morning stock'\n"
    )
    assert (
        protege("list")
        == "No responsibilities yet: `protege responsibilities add AGENT NAME ...`.\n"
    )
    logged = json.loads(run_protege("audit", "--kind", "responsibility", "--json", env=env).stdout)
    assert [e["action"] for e in logged[::-1]] == [
        "responsibility added",
        "responsibility edited",
        "disabled",
        "enabled",
        "responsibility deleted",
    ]
    assert logged[-2]["before"]["schedule"] == "0 7 1 1 *"
    assert logged[-2]["after"]["schedule"] == "@daily"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--schedule", "61 * * * *"],
            "Error: '61 * * * *' is not a valid cron expression: "
            "[61 * * * *] is not acceptable, out of range",
        ),
        (
            ["--schedule", "0 7 * *"],
            "Error: '0 7 * *' has 4 fields; a schedule has five: minute hour day-of-month "
            "month day-of-week (e.g. '0 7 * * 1-5')",
        ),
        (
            ["--schedule", "@daily", "--timezone", "Europe/Atlantis"],
            "Error: unknown time zone 'Europe/Atlantis': use an IANA name such as "
            "Europe/Berlin or UTC",
        ),
    ],
)
def test_a_bad_schedule_is_one_clear_line_and_nothing_is_saved(run_protege, env, args, error):
    result = run_protege(
        "responsibilities", "add", "Scout", "report", *args, "--instructions", "Go.", env=env
    )
    assert (result.returncode, result.stderr.rstrip("\n")) == (1, error)
    assert Responsibility.select().count() == 0


def test_instructions_must_be_given_once_and_be_text(run_protege, env, tmp_path):
    def add(*args):
        return run_protege("responsibilities", "add", "Scout", "report", *args, env=env)

    assert add().stderr == (
        "Error: give the instructions: --instructions TEXT or --instructions-file F\n"
    )
    binary = tmp_path / "prompt.bin"
    binary.write_bytes(b"\xff\xfe\x00not text")
    assert add("--instructions-file", str(binary)).stderr == f"Error: {binary} is not UTF-8 text\n"
    written = tmp_path / "prompt.txt"
    written.write_text("Count the tubs.\nMail Mara.\n")
    assert add("--instructions-file", str(written)).returncode == 0
    assert Responsibility.get().prompt == "Count the tubs.\nMail Mara.\n"
    assert add("--instructions", "Again.").stderr == (
        "Error: Scout already has a responsibility named 'report'\n"
    )


def test_a_name_two_agents_share_needs_agent(run_protege, env):
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    for agent in (Agent.named("Scout"), sundae):
        Responsibility.create(agent=agent, name="report", prompt="Report.")
    result = run_protege("responsibilities", "show", "report", env=env)
    assert result.stderr == (
        "Error: several agents have a responsibility named 'report': say whose with --agent\n"
    )
    shown = run_protege("responsibilities", "show", "report", "--agent", "Sundae", env=env)
    assert shown.stdout.startswith("Sundae: report\n")


def test_run_now_and_the_runs_of_a_responsibility(run_protege, env, scripted_model, protege_app):
    Responsibility.create(
        agent=Agent.named("Scout"),
        name="report",
        prompt="Mail Mara the stock.",
        schedule="0 7 * * *",
        scheduled_from=datetime.datetime(2026, 3, 1, 12),
    )
    Responsibility.create(agent=Agent.named("Scout"), name="other", prompt="Something else.")
    (queued,) = (
        Scheduler(protege_app, clock=lambda: datetime.datetime(2026, 3, 2, 7, tzinfo=UTC))
        .tick()
        .queued
    )
    scripted_model.script(
        tool_call("send_email", mode="new", to=["mara@thescoop.com"], subject="Stock", body="Ok."),
        say("Mailed Mara."),
    )
    result = run_protege("responsibilities", "run", "report", env=env)
    assert result.returncode == 1  # the scheduler's run is still queued: no second one
    assert result.stderr == "Error: 'report' has run 1 queued already; wait for it to end\n"
    Run.update(status="done").where(Run.id == queued.id).execute()
    result = run_protege("responsibilities", "run", "report", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "run 2: Scout, scheduled (report), done"
    assert scripted_model.offered_tools(0) == ["send_email"]
    rows = json.loads(
        run_protege("runs", "list", "--responsibility", "report", "--json", env=env).stdout
    )
    assert [(r["id"], r["status"], r["due_at"]) for r in rows] == [
        (2, "done", None),
        (1, "done", "2026-03-02T07:00:00+00:00"),
    ]
    table = run_protege("runs", "list", "--responsibility", "other", env=env)
    assert table.stdout == "No runs yet.\n"
    missing = run_protege("runs", "list", "--responsibility", "nope", env=env)
    assert missing.stderr == "Error: no responsibility named 'nope'\n"


def test_scheduler_once_queues_what_is_due(run_protege, env):
    now = datetime.datetime.now(UTC).replace(tzinfo=None)
    Responsibility.create(
        agent=Agent.named("Scout"),
        name="every minute",
        prompt="Look around.",
        schedule="* * * * *",
        scheduled_from=now - datetime.timedelta(minutes=5),
    )
    result = run_protege("scheduler", "--once", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("run 1 queued: Scout's 'every minute', due ")
    (run,) = Run.select()
    assert (run.status, run.kind) == ("queued", "scheduled")
    assert run_protege("scheduler", "--once", env=env).stdout == ""  # that due time is taken


def test_serve_queues_due_responsibilities_and_runs_them(run_protege, env, scripted_model):
    Responsibility.create(
        agent=Agent.named("Scout"),
        name="every minute",
        prompt="Look around.",
        schedule="* * * * *",
        scheduled_from=datetime.datetime.now(UTC).replace(tzinfo=None)
        - datetime.timedelta(minutes=5),
    )
    scripted_model.script(say("All quiet."))
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "1")
    try:
        assert read_line(process).endswith(
            "1 run(s) at once in each of 1 process(es), the scheduler; Ctrl-C stops"
        )
        assert read_line(process).startswith("run 1 queued: Scout's 'every minute', due ")
        assert read_line(process) == "run 1 (Scout): done"
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    asked = scripted_model.shown(0)[-1]
    assert asked["role"] == "user"
    assert asked["content"].startswith("Look around.\n\n(protege: this is the run due at ")
    assert asked["content"].endswith(" UTC for the responsibility 'every minute'.)")


def _next_new_year():
    now = datetime.datetime.now(UTC)
    # 07:00 in Berlin on 1 January is 06:00 UTC
    this_year = datetime.datetime(now.year, 1, 1, 6, tzinfo=UTC)
    return now.year if now < this_year else now.year + 1


def test_the_scheduler_alone_queues_until_stopped(run_protege, env):
    Responsibility.create(
        agent=Agent.named("Scout"),
        name="every minute",
        prompt="Look around.",
        schedule="* * * * *",
        scheduled_from=datetime.datetime.now(UTC).replace(tzinfo=None)
        - datetime.timedelta(minutes=5),
    )
    process = start(run_protege, env, "scheduler")
    try:
        assert read_line(process) == (
            "protege: scheduler looking for due responsibilities every 15s; Ctrl-C stops"
        )
        assert read_line(process).startswith("run 1 queued: Scout's 'every minute', due ")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert Run.get_by_id(1).status == "queued"  # the scheduler alone runs nothing
