"""`protege status`: what waits on the workers, per agent (in-process: click's runner)."""

import datetime
import json

import pytest

from protege.gateway.outbound import queue_mail
from protege.mail import record_inbound
from protege.models import Agent, Run
from protege.models.base import utcnow
from protege.queue import queue_reply


@pytest.fixture
def run_protege(protege_in_process):
    """The commands run in-process (click's test runner): none here needs a process."""
    return protege_in_process


def test_status_counts_queued_running_stuck_failed_runs_and_pending_mail(
    run_protege, protege_db, tmp_path
):
    from protege.config import load_config

    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    Agent.create(name="Scout", address="scout@thescoop.example")  # nothing to show
    runs = [queue_reply(record_inbound(sundae, sender="j@acme.com", body=str(n))) for n in range(5)]
    Run.update(status="waiting").where(Run.id == runs[4].id).execute()  # on an approval
    now = utcnow()
    Run.claim(runs[1].id, "alive", now, 600)
    Run.claim(runs[2].id, "dead", now - datetime.timedelta(hours=1), 60)  # stuck
    Run.claim(runs[3].id, "ended", now, 60)
    Run.get_by_id(runs[3].id).finish("failed", "the model said no", owner="ended")
    queue_mail(agent=sundae, run=None, config=load_config(tmp_path), mail={"to": ["j@acme.com"]})
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    shown = run_protege("status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [
        "agent   queued  running  stuck  failed  waiting  held  pending mail",
        "Sundae  1       1        1      1       1        0     1",
    ]
    as_json = json.loads(run_protege("status", "--json", env=env).stdout)
    rows = as_json["agents"]
    assert [row["agent"] for row in rows] == ["Scout", "Sundae"]  # every agent, with limits
    counted = ("queued", "running", "stuck", "failed", "waiting", "held", "pending_mail")
    assert {name: rows[1][name] for name in counted} == {
        "queued": 1,
        "running": 1,
        "stuck": 1,
        "failed": 1,
        "waiting": 1,
        "held": 0,
        "pending_mail": 1,
    }
    assert {name: rows[0][name] for name in counted} == dict.fromkeys(counted, 0)
    assert rows[1]["limits"]["agent_runs_per_hour"]["used"] == 5  # admitted this hour
    assert any(
        line.split()[:4] == ["Sundae", "agent_runs_per_hour", "5", "500"]
        for line in shown.stdout.splitlines()
    )
    assert as_json["model_endpoint"] is None


def test_status_with_nothing_waiting_says_so(run_protege, protege_db):
    shown = run_protege("status", env={"PROTEGE_DATABASE_URL": protege_db.url})
    assert (shown.returncode, shown.stdout.splitlines()[0]) == (
        0,
        "nothing queued, running, stuck, failed, waiting, held or pending",
    )


def test_status_says_the_model_endpoint_is_failing_and_until_when_runs_wait(
    run_protege, protege_db, tmp_path
):
    import attrs

    from protege.config import load_config
    from protege.limits.circuit import Breaker

    config = load_config(tmp_path)
    config = attrs.evolve(config, limits=attrs.evolve(config.limits, circuit_failures=2))
    since = utcnow().replace(microsecond=0)
    breaker = Breaker.of(config, clock=lambda: since)
    breaker.failed("the model endpoint answered 503: overloaded")
    breaker.failed("the model endpoint answered 503: overloaded", retry_after=120)
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    until = since + datetime.timedelta(seconds=120)
    shown = run_protege("status", env=env)
    assert shown.stdout.splitlines()[:2] == [
        f"model endpoint failing since {since.isoformat(sep=' ')}Z, circuit open until "
        f"{until.isoformat(sep=' ')}Z (last error: the model endpoint answered 503: overloaded)",
        "nothing queued, running, stuck, failed, waiting, held or pending",
    ]
    endpoint = json.loads(run_protege("status", "--json", env=env).stdout)["model_endpoint"]
    assert {k: endpoint[k] for k in ("state", "failures", "failing_since", "open_until")} == {
        "state": "open",
        "failures": 2,
        "failing_since": f"{since.isoformat(sep=' ')}Z",
        "open_until": f"{until.isoformat(sep=' ')}Z",
    }
    assert endpoint["last_error"] == "the model endpoint answered 503: overloaded"


def test_status_shows_the_endpoint_s_error_as_text_a_terminal_prints_as_it_is(
    run_protege, protege_db, tmp_path
):
    import attrs

    from protege.config import load_config
    from protege.limits.circuit import Breaker

    config = load_config(tmp_path)
    config = attrs.evolve(config, limits=attrs.evolve(config.limits, circuit_failures=1))
    Breaker.of(config).failed("answered 500: \x1b]0;pwned\x07\x1b[2Jgone\nfake: line")

    shown = run_protege("status", env={"PROTEGE_DATABASE_URL": protege_db.url}).stdout

    assert "\x1b" not in shown
    assert "\x07" not in shown
    line = shown.splitlines()[0]
    assert line.endswith("(last error: answered 500: \\x1b]0;pwned\\x07\\x1b[2Jgone\\nfake: line)")


def test_status_reset_circuit_closes_an_open_circuit_and_records_it(
    run_protege, protege_db, tmp_path
):
    import attrs

    from protege.config import load_config
    from protege.limits.circuit import Breaker
    from protege.models import AuditEntry

    config = load_config(tmp_path)
    config = attrs.evolve(config, limits=attrs.evolve(config.limits, circuit_failures=1))
    breaker = Breaker.of(config)
    breaker.failed("the model endpoint answered 429", retry_after=86_400)
    assert breaker.refresh().state == "open"
    env = {"PROTEGE_DATABASE_URL": protege_db.url}

    shown = run_protege("status", "--reset-circuit", env=env)

    assert shown.returncode == 0, shown.output
    assert shown.stdout == f"circuit closed, runs are taken again: {breaker.endpoint}\n"
    assert breaker.refresh().healthy
    assert breaker.gate().take
    (entry,) = AuditEntry.select()
    assert (entry.action, entry.subject) == ("model circuit reset", breaker.endpoint)
    assert entry.actor.startswith("cli:")
    assert (entry.before["state"], entry.after["state"]) == ("open", "closed")
    again = run_protege("status", "--reset-circuit", env=env)
    assert again.stdout == "nothing to reset: no model endpoint's circuit is open or failing\n"
    assert AuditEntry.select().count() == 1
    assert "model endpoint failing" not in run_protege("status", env=env).stdout
