"""`protege runs release`, `protege runs list --held` and what `protege status` shows of
held mail and limits, on mail the real gateway held (in-process: click's runner)."""

from __future__ import annotations

import json
from email.message import EmailMessage

import attrs
import pytest

from protege.config import load_config
from protege.gateway.inbound import ingest
from protege.limit_settings import LimitSettings
from protege.models import Agent, AuditEntry, Run
from protege.models.base import utcnow
from protege.models.limits import UsageDay

SUNDAE = "sundae@thescoop.example"
SCOUT = "scout@thescoop.example"


@pytest.fixture
def run_protege(protege_in_process):
    return protege_in_process


@pytest.fixture
def env(protege_db):
    Agent.create(name="Sundae", address=SUNDAE)
    Agent.create(name="Scout", address=SCOUT)
    return {"PROTEGE_DATABASE_URL": protege_db.url}


class Gateway:
    """Stores mail as the gateway does, under one run per sender and agent an hour."""

    def __init__(self, tmp_path) -> None:
        config = load_config(tmp_path)
        self.config = attrs.evolve(config, limits=LimitSettings(sender_runs_per_hour=1))
        self.count = 0

    def send(self, sender: str, to: str = SUNDAE) -> Run:
        self.count += 1
        message = EmailMessage()
        message["From"] = sender
        message["To"] = to
        message["Subject"] = f"Question {self.count}"
        message["Message-ID"] = f"<q{self.count}@example.com>"
        message.set_content("Is mango in stock?")
        (delivered,) = ingest(message.as_bytes(), config=self.config)
        return delivered.run


@pytest.fixture
def held(env, tmp_path):
    """Three held runs: two of Jane's and one of Bob's for Sundae, one of Jane's for Scout
    (each sender's first mail went into the queue)."""
    gateway = Gateway(tmp_path)
    runs = {}
    for name, sender, to in (
        ("jane", "Jane <jane@acme.com>", SUNDAE),
        ("jane held", "Jane <jane@acme.com>", SUNDAE),
        ("jane held again", "Jane <jane+orders@acme.com>", SUNDAE),
        ("bob", "bob@acme.com", SUNDAE),
        ("bob held", "bob@acme.com", SUNDAE),
        ("jane at scout", "jane@acme.com", SCOUT),
        ("jane held at scout", "jane@acme.com", SCOUT),
    ):
        runs[name] = gateway.send(sender, to).id
    assert Run.select().where(Run.status == "held").count() == 4
    return runs


def status_of(*run_ids: int) -> list[str]:
    return [Run.get_by_id(run_id).status for run_id in run_ids]


def test_runs_named_are_released_and_recorded(run_protege, env, held):
    shown = run_protege("runs", "release", str(held["jane held"]), env=env)
    assert shown.returncode == 0, shown.output
    assert shown.stdout == f"run {held['jane held']} released: it is queued\n"
    assert status_of(held["jane held"], held["jane held again"]) == ["queued", "held"]
    released = Run.get_by_id(held["jane held"])
    assert (released.held_until, released.held_reason) == (None, None)
    (entry,) = AuditEntry.select().where(AuditEntry.action == "held runs released")
    assert entry.actor.startswith("cli:")
    assert entry.subject == f"run {held['jane held']}"


def test_a_run_that_is_not_held_is_refused_and_nothing_is_released(run_protege, env, held):
    queued, waiting = held["jane"], held["jane held"]
    shown = run_protege("runs", "release", str(waiting), str(queued), env=env)
    assert shown.returncode == 1
    assert shown.stderr == (
        f"Error: run {queued} is queued, not held: there is nothing to release\n"
    )
    assert status_of(waiting) == ["held"]
    missing = run_protege("runs", "release", "404", env=env)
    assert (missing.returncode, missing.stderr) == (1, "Error: there is no run 404\n")
    assert AuditEntry.select().count() == 0


def test_releasing_by_agent_leaves_other_agents_runs_held(run_protege, env, held):
    shown = run_protege("runs", "release", "--agent", "Sundae", env=env)
    assert shown.returncode == 0, shown.output
    ids = [held["jane held"], held["jane held again"], held["bob held"]]
    assert shown.stdout == (
        f"3 held runs of Sundae released, queued: runs {', '.join(map(str, ids))}\n"
    )
    assert status_of(*ids, held["jane held at scout"]) == ["queued"] * 3 + ["held"]


def test_releasing_by_sender_compares_routing_keys(run_protege, env, held):
    shown = run_protege("runs", "release", "--sender", "JANE+x@Acme.com", "--json", env=env)
    assert shown.returncode == 0, shown.output
    ids = [held["jane held"], held["jane held again"], held["jane held at scout"]]
    assert json.loads(shown.stdout) == {"released": ids}
    assert status_of(held["bob held"]) == ["held"]


def test_releasing_all_and_then_nothing_is_held(run_protege, env, held):
    assert run_protege("runs", "release", "--all", env=env).returncode == 0
    assert Run.select().where(Run.status == "held").count() == 0
    again = run_protege("runs", "release", "--all", env=env)
    assert (again.returncode, again.stdout) == (0, "nothing released: no runs are held\n")


@pytest.mark.parametrize(
    "arguments",
    [(), ("1", "--all"), ("--agent", "Sundae", "--all"), ("1", "--sender", "jane@acme.com")],
)
def test_release_needs_exactly_one_way_of_choosing(run_protege, env, held, arguments):
    shown = run_protege("runs", "release", *arguments, env=env)
    assert shown.returncode == 1
    assert shown.stderr.startswith("Error: say which held runs to release")
    assert Run.select().where(Run.status == "held").count() == 4


def test_release_of_an_unknown_agent_says_so(run_protege, env, held):
    shown = run_protege("runs", "release", "--agent", "Nobody", env=env)
    assert shown.returncode == 1
    assert "Nobody" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_cancel_held_of_an_agent_from_a_sender_discards_them_and_is_recorded(
    run_protege, env, held
):
    shown = run_protege(
        "runs", "cancel", "--held", "--agent", "Sundae", "--sender", "JANE+x@Acme.com", env=env
    )
    assert shown.returncode == 0, shown.output
    ids = [held["jane held"], held["jane held again"]]
    assert shown.stdout == (
        f"2 held runs of Sundae from jane@acme.com cancelled: runs {ids[0]}, {ids[1]}\n"
    )
    others = [held["bob held"], held["jane held at scout"], held["jane"]]
    assert status_of(*ids, *others) == ["cancelled"] * 2 + ["held", "held", "queued"]
    cancelled = Run.get_by_id(ids[0])
    assert cancelled.error == "cancelled by an operator while it was held"
    assert cancelled.finished_at is not None
    (entry,) = AuditEntry.select().where(AuditEntry.action == "held runs cancelled")
    assert entry.actor.startswith("cli:")
    assert entry.subject == "2 held runs of Sundae from jane@acme.com"
    # A release later finds nothing of them to let into the queue.
    assert run_protege("runs", "release", "--all", env=env).returncode == 0
    assert status_of(*ids) == ["cancelled"] * 2


def test_cancel_held_alone_takes_every_held_run_then_finds_none(run_protege, env, held):
    assert run_protege("runs", "cancel", "--held", env=env).stdout.startswith("4 held runs")
    assert Run.select().where(Run.status == "held").count() == 0
    again = run_protege("runs", "cancel", "--held", env=env)
    assert (again.returncode, again.stdout) == (0, "nothing cancelled: no runs are held\n")
    assert AuditEntry.select().where(AuditEntry.action == "held runs cancelled").count() == 1


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (("1", "--held"), "give a run id, or --held"),
        ((), "give a run id, or --held"),
        (("1", "--agent", "Sundae"), "--agent and --sender choose held runs: add --held"),
    ],
)
def test_cancel_takes_a_run_id_or_held_runs_not_both(run_protege, env, held, arguments, said):
    shown = run_protege("runs", "cancel", *arguments, env=env)
    assert shown.returncode == 2
    assert said in shown.stderr
    assert Run.select().where(Run.status == "held").count() == 4


def test_runs_list_held_shows_sender_reason_and_until(run_protege, env, held):
    shown = run_protege("runs", "list", "--held", "--json", env=env)
    assert shown.returncode == 0, shown.output
    rows = json.loads(shown.stdout)
    assert [row["id"] for row in rows] == sorted(
        [held["jane held"], held["jane held again"], held["bob held"], held["jane held at scout"]],
        reverse=True,
    )
    (bob,) = [row for row in rows if row["id"] == held["bob held"]]
    run = Run.get_by_id(held["bob held"])
    assert bob["sender"] == "bob@acme.com"
    assert bob["agent"] == "Sundae"
    assert bob["reason"] == run.held_reason
    assert "sender_runs_per_hour reached by bob@acme.com (unproven) (1 of 1)" in bob["reason"]
    assert bob["held_until"] == run.held_until.isoformat() + "+00:00"
    table = run_protege("runs", "list", "--held", env=env).stdout.splitlines()
    assert table[0].split() == ["RUN", "AGENT", "SENDER", "HELD", "UNTIL", "CREATED", "REASON"]
    assert len(table) == 5
    assert any("bob@acme.com" in line and "sender_runs_per_hour" in line for line in table)
    run_protege("runs", "release", "--all", env=env)
    assert run_protege("runs", "list", "--held", env=env).stdout == "No held runs.\n"


def test_status_shows_held_runs_and_the_limits_in_force(run_protege, env, held):
    (run_protege.project / "protege.toml").write_text(
        "[limits]\n"
        "sender_runs_per_hour = 1\n"
        "agent_tokens_per_day = 1000\n"
        "agent_cost_per_day = 2.5\n"
        "installation_tokens_per_day = 5000\n"
        "[limits.agents.Scout]\n"
        "agent_runs_per_hour = 7\n"
    )
    today = utcnow().strftime("%Y-%m-%d")
    sundae = Agent.get(Agent.name == "Sundae")
    UsageDay.create(
        agent=sundae,
        day=today,
        model="gpt-4o",
        responses=3,
        prompt_tokens=900,
        completion_tokens=300,
        cost_micros=1_250_000,
    )
    shown = run_protege("status", "--json", env=env)
    assert shown.returncode == 0, shown.output
    status = json.loads(shown.stdout)
    agents = {row["agent"]: row for row in status["agents"]}
    assert set(agents) == {"Scout", "Sundae"}
    sundae_row, scout_row = agents["Sundae"], agents["Scout"]
    assert (sundae_row["queued"], sundae_row["held"]) == (2, 3)
    assert (scout_row["queued"], scout_row["held"]) == (1, 1)
    limits = sundae_row["limits"]
    assert limits["agent_tokens_per_day"]["allowed"] == 1000
    assert limits["agent_tokens_per_day"]["used"] == 1200
    assert limits["agent_tokens_per_day"]["reached"] is True
    assert limits["agent_cost_per_day"] == {
        **limits["agent_cost_per_day"],
        "allowed": 2.5,
        "used": 1.25,
        "reached": False,
    }
    assert limits["agent_runs_per_hour"]["used"] == 2  # Jane's and Bob's first mail
    assert limits["sender_runs_per_hour"]["allowed"] == 1
    assert limits["sender_runs_per_hour"]["used"] is None  # each sender's own count
    assert scout_row["limits"]["agent_runs_per_hour"]["allowed"] == 7
    assert sundae_row["limits"]["agent_runs_per_hour"]["allowed"] == 500  # the default
    assert sundae_row["usage"]["runs_this_hour"] == 2
    assert sundae_row["usage"]["tokens_today"] == 1200
    held_mail = {group["sender"]: group for group in sundae_row["held_mail"]}
    assert held_mail["jane@acme.com"]["runs"] == 2
    assert held_mail["jane@acme.com"]["first_run"] == held["jane held"]
    assert held_mail["bob@acme.com"]["runs"] == 1
    assert "sender_runs_per_hour" in held_mail["bob@acme.com"]["reason"]
    installation = status["installation"]
    assert installation["usage"]["tokens_today"] == 1200
    assert installation["limits"]["installation_tokens_per_day"]["allowed"] == 5000
    assert installation["limits"]["installation_tokens_per_day"]["used"] == 1200
    text = run_protege("status", env=env).stdout
    assert "held mail" in text
    assert "2 runs from jane@acme.com (unproven) held until" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["Sundae", "agent_tokens_per_day", "1,200", "(reached)", "1,000"] in [
        row[:5] for row in rows
    ]
    assert ["(installation)", "installation_tokens_per_day", "1,200", "5,000"] in [
        row[:4] for row in rows
    ]
