"""`protege runs`, against the scripted model, run in-process as an operator would type it
(click's test runner: the command's own code, without an interpreter per call)."""

import json
import re

import pytest

from protege.models import Agent
from protege.testing import say, tool_call


@pytest.fixture
def run_protege(protege_in_process):
    return protege_in_process


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


def test_start_retry_and_show_a_run_that_sent_mail(run_protege, env, scripted_model):
    from protege.models import Toolkit
    from protege.testing import http_error

    Agent.named("Sundae").grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), http_error(401))
    started = run_protege(
        "runs", "start", "Sundae", "--sender", "jane@acme.com", "--message", "Hi", env=env
    )
    assert started.returncode == 1, started.stderr  # failed after sending, and shown
    delivery = "   4   delivery queued to jane@acme.com, subject Re: <"
    assert any(line.startswith(delivery) for line in started.stdout.splitlines())
    assert started.stderr.startswith("mail from this run goes to the outbox ")

    scripted_model.script(say("Sent."))
    retried = run_protege("runs", "retry", "1", env=env)
    assert retried.returncode == 0, retried.stderr
    assert any(line.startswith(delivery) for line in retried.stdout.splitlines())

    shown = run_protege("runs", "show", "1", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == (
        "run 1: Sundae, reply (message from jane@acme.com), done"
    )
    assert any(line.startswith(delivery) for line in shown.stdout.splitlines())
    assert shown.stdout.splitlines()[-1].endswith(": sent")  # where the mail is now
    shown_json = json.loads(run_protege("runs", "show", "1", "--json", env=env).stdout)
    (queued,) = [e for e in shown_json["events"] if e["kind"] == "delivery"]
    assert (queued["status"], queued["to"]) == ("queued", ["jane@acme.com"])
    (mail,) = shown_json["mail"]
    assert (mail["status"], mail["message_id"]) == ("sent", queued["message_id"])


def test_show_renders_every_run_the_demo_makes(run_protege, tmp_path):
    folder = tmp_path / "scoop"
    demo = run_protege("demo", "--dir", str(folder), env={"OPENAI_API_KEY": ""})
    assert demo.returncode == 0, demo.stderr
    env = {"PROTEGE_DATABASE_URL": f"sqlite:///{folder / 'data' / 'protege.db'}"}
    for run_id, decided in ((1, "approved"), (2, "denied")):
        text = run_protege("runs", "show", str(run_id), env=env)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].startswith(f"run {run_id}: Sundae, reply (message from Jane <")
        assert lines[0].endswith(", done")
        # Jane's mail is not signed: the verdict says so, and why.
        assert lines[1].startswith("sender: not authenticated; dmarc none: nothing aligned")
        deliveries = [line for line in lines if line[5:].startswith("  delivery queued to ")]
        assert len(deliveries) == 2  # "it waits for the shop", then the outcome
        assert all("subject Re: Melted order <" in line for line in deliveries)
        asked = f"  approval {run_id} requested for process_refund from *@thescoop.com"
        assert any(line[5:].startswith(asked) for line in lines)
        answered = f"approval {run_id} for process_refund {decided} by mara@thescoop.com"
        assert any(line[5:].startswith(answered) for line in lines)
        mails = [line for line in lines if line.startswith("mail <")]
        assert len(mails) == 3  # the approval request and the two replies
        assert all(line.endswith(": sent") for line in mails)

        shown = json.loads(run_protege("runs", "show", str(run_id), "--json", env=env).stdout)
        assert shown["status"] == "done"
        assert shown["sender_verdict"]["authenticated"] is False
        assert shown["sender_verdict"]["from_domain"] == "acme.com"
        kinds = [e["kind"] for e in shown["events"]]
        assert kinds.count("delivery") == 2
        assert [k for k in kinds if k in ("waiting", "resumed", "approval_answered")] == [
            "waiting",
            "resumed",
            "approval_answered",
        ]
        assert lines[2].startswith("usage: ")
        assert len(kinds) == len(lines) - 3 - len(mails)  # heading, sender, usage, the mails
        assert [m["status"] for m in shown["mail"]] == ["sent"] * 3
    denied = run_protege("runs", "show", "2", env=env).stdout
    assert "after approval, failed (untrusted): " in denied


def test_show_survives_events_of_older_shapes_and_unknown_kinds(run_protege, env, scripted_model):
    from protege.models import Event, Run

    scripted_model.script(say("Hello."))
    run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    run = Run.get_by_id(1)
    odd = [
        ("delivery", '{"mail": {"to": ["j@acme.com"]}}'),
        ("tool_result", "{}"),
        ("escalation_requested", '{"approver": "boss@thescoop.com"}'),
        ("error", "null"),
    ]
    for seq, (kind, payload) in enumerate(odd, start=3):
        Event.create(run=run, seq=seq, kind=kind, payload_json=payload)
    shown = run_protege("runs", "show", "1", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[5:] == [
        "   3   delivery (status unknown)",
        "   4   unknown outcome: ",
        '   5 escalation_requested: {"approver": "boss@thescoop.com"}',
        "   6 error: no reason recorded",
    ]
    events = json.loads(run_protege("runs", "show", "1", "--json", env=env).stdout)["events"]
    assert events[-1] == {"seq": 6, "kind": "error", "payload": None}


def test_start_warns_about_a_host_module_that_fails_to_import_and_goes_on(
    run_protege, env, scripted_model
):
    (run_protege.project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (run_protege.project / "shop_tools.py").write_text("raise RuntimeError('no licence key')\n")
    scripted_model.script(say("Hello."))
    result = run_protege(
        "runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "warning: cannot import tool module shop_tools: RuntimeError: no licence key; "
        "its tools are not offered"
    )
    assert result.stdout.splitlines()[0].endswith(", done")


def test_runs_start_keeps_mail_in_the_outbox_unless_told_and_says_so(
    run_protege, env, scripted_model, tmp_path
):
    from protege.models import Toolkit

    Agent.named("Sundae").grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    # SMTP configured, towards a port nothing listens on: a real send would fail the call.
    (run_protege.project / "protege.toml").write_text(
        '[mail]\ntransport = "smtp"\nsmtp_host = "127.0.0.1"\nsmtp_port = 9\nsmtp_retries = 0\n'
    )
    data = tmp_path / "data"
    scripted_model.script(
        tool_call("send_email", mode="reply", body="Hello Jane"),
        say("Sent."),
    )
    result = run_protege(
        "runs",
        "start",
        "Sundae",
        "--sender",
        "jane@acme.com",
        "--message",
        "Hi",
        env={**env, "PROTEGE_DATA_DIR": str(data)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"mail from this run goes to the outbox {data / 'outbox'}, not sent; "
        "--transport configured sends it by SMTP through 127.0.0.1:9"
    )
    (sent,) = (data / "outbox").iterdir()
    assert b"Hello Jane" in sent.read_bytes()

    scripted_model.script(
        tool_call("send_email", mode="reply", body="Again"),
        say("Tried."),
    )
    real = run_protege(
        "runs",
        "start",
        "Sundae",
        "--sender",
        "jane@acme.com",
        "--message",
        "Hi",
        "--transport",
        "configured",
        "--json",
        env={**env, "PROTEGE_DATA_DIR": str(data)},
    )
    assert real.stderr.splitlines()[0] == (
        "mail from this run is sent by SMTP through 127.0.0.1:9 (--transport configured): "
        "people get it"
    )
    assert len(list((data / "outbox").iterdir())) == 1  # the second went to SMTP, not here
    json.loads(real.stdout)  # the note stays out of the JSON


def test_runs_list_shows_duration_tokens_and_times_with_their_zone(
    run_protege, env, scripted_model
):
    scripted_model.script(say("Hello."), say("Again."))
    for _ in range(2):
        run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    from protege.models import Run

    Run.update(status="failed").where(Run.id == 1).execute()
    rows = json.loads(run_protege("runs", "list", "--json", env=env).stdout)
    newest = rows[0]
    assert newest["created_at"].endswith("+00:00")
    assert newest["finished_at"].endswith("+00:00")
    assert newest["duration_seconds"] >= 0
    # The scripted model reports a quarter of the request's size, plus 10, as its usage.
    expected = len(json.dumps(scripted_model.requests[1]["messages"])) // 4 + 10
    assert newest["total_tokens"] == expected
    table = run_protege("runs", "list", env=env).stdout.splitlines()
    assert table[0].split() == [
        "RUN",
        "AGENT",
        "KIND",
        "STATUS",
        "CREATED",
        "DURATION",
        "TOKENS",
        "DUE",
        "ERROR",
    ]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d", table[1])

    failed = json.loads(run_protege("runs", "list", "--status", "failed", "--json", env=env).stdout)
    assert [r["id"] for r in failed] == [1]
    assert json.loads(run_protege("runs", "list", "--since", "1h", "--json", env=env).stdout)
    later = run_protege("runs", "list", "--since", "2999-01-01", "--json", env=env)
    assert json.loads(later.stdout) == []
    bad = run_protege("runs", "list", "--since", "yesterday", env=env)
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error: --since 'yesterday': give an age (30m, 2h, 7d)")


def test_usage_sums_tokens_per_agent_and_run_and_prices_them(run_protege, env, scripted_model):
    scripted_model.script(say("Hello."), say("Again."))
    for _ in range(2):
        run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    per_run = json.loads(run_protege("usage", "--by", "run", "--json", env=env).stdout)
    assert [r["id"] for r in per_run] == [2, 1]
    assert all(r["cost"] is None for r in per_run)
    (sundae,) = json.loads(run_protege("usage", "--json", env=env).stdout)
    assert sundae["runs"] == 2
    assert sundae["prompt_tokens"] == sum(r["prompt_tokens"] for r in per_run) > 0
    assert sundae["total_tokens"] == sundae["prompt_tokens"] + sundae["completion_tokens"]

    (run_protege.project / "protege.toml").write_text(
        "[model]\ninput_cost_per_million = 2.0\noutput_cost_per_million = 10.0\n"
    )
    (priced,) = json.loads(run_protege("usage", "--json", env=env).stdout)
    expected = (sundae["prompt_tokens"] * 2.0 + sundae["completion_tokens"] * 10.0) / 1e6
    assert priced["cost"] == round(expected, 6)
    table = run_protege("usage", env=env).stdout.splitlines()
    assert table[0].split() == ["AGENT", "RUNS", "PROMPT", "COMPLETION", "TOTAL", "COST"]


def test_cancel_ends_a_queued_run_and_refuses_an_ended_one(run_protege, env):
    from protege.mail import record_inbound
    from protege.models import Run
    from protege.queue import queue_reply

    run = queue_reply(record_inbound(Agent.named("Sundae"), sender="j@acme.com", body="Hi"))
    cancelled = run_protege("runs", "cancel", str(run.id), env=env)
    assert (cancelled.returncode, cancelled.stdout) == (
        0,
        f"run {run.id} cancelled (it had not started)\n",
    )
    assert Run.get_by_id(run.id).status == "cancelled"
    again = run_protege("runs", "cancel", str(run.id), env=env)
    assert (again.returncode, again.stderr) == (
        1,
        f"Error: run {run.id} is cancelled already: there is nothing to cancel\n",
    )
    missing = run_protege("runs", "cancel", "999", env=env)
    assert (missing.returncode, missing.stderr) == (1, "Error: there is no run 999\n")


def test_cancel_asks_a_running_run_to_stop_at_its_next_step(run_protege, env):
    from protege.mail import record_inbound
    from protege.models import Run
    from protege.models.base import utcnow
    from protege.queue import queue_reply

    run = queue_reply(record_inbound(Agent.named("Sundae"), sender="j@acme.com", body="Hi"))
    Run.claim(run.id, "some-worker", utcnow(), 60)
    result = run_protege("runs", "cancel", str(run.id), env=env)
    assert (result.returncode, result.stdout) == (0, f"run {run.id} will stop at its next step\n")
    assert Run.get_by_id(run.id).cancel_requested_at is not None


def test_a_cancel_is_in_the_audit_log_and_a_refused_one_is_not(run_protege, env):
    from protege.mail import record_inbound
    from protege.models import AuditEntry
    from protege.queue import queue_reply

    run = queue_reply(record_inbound(Agent.named("Sundae"), sender="j@acme.com", body="Hi"))
    assert run_protege("runs", "cancel", str(run.id), env=env).returncode == 0
    (entry,) = AuditEntry.select()
    assert (entry.action, entry.subject_kind, entry.subject) == (
        "cancel requested",
        "run",
        f"run {run.id} of Sundae",
    )
    assert entry.actor.startswith("cli:")
    assert (entry.before["status"], entry.after["status"]) == ("queued", "cancelled")
    assert run_protege("runs", "cancel", str(run.id), env=env).returncode == 1
    assert AuditEntry.select().count() == 1


def test_show_says_why_mail_waits_how_often_it_was_tried_and_when_it_is_tried_next(
    run_protege, env, scripted_model, tmp_path
):
    from protege.models import Toolkit

    Agent.named("Sundae").grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    # A relay nothing listens on: the recipient is deferred, to be tried again in a minute.
    (run_protege.project / "protege.toml").write_text(
        '[mail]\ntransport = "smtp"\nsmtp_host = "127.0.0.1"\nsmtp_port = 9\n'
        "smtp_starttls = false\nsmtp_retries = 3\nsmtp_backoff_seconds = 60\n"
    )
    scripted_model.script(tool_call("send_email", mode="reply", body="Hello"), say("Sent."))
    started = run_protege(
        "runs", "start", "Sundae", "--sender", "jane@acme.com", "--message", "Hi",
        "--transport", "configured", env=env,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    shown = run_protege("runs", "show", "1", env=env)
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.splitlines()[-1]
    assert re.fullmatch(
        r"mail <[^>]+>: pending, tried 1 time, still for jane@acme\.com, "
        r"next try \d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d; "
        r"deferred: jane@acme\.com \(ConnectionRefusedError: .+\)",
        line,
    ), line
    (mail,) = json.loads(run_protege("runs", "show", "1", "--json", env=env).stdout)["mail"]
    assert (mail["status"], mail["attempts"], mail["waiting"]) == ("pending", 1, ["jane@acme.com"])
    assert mail["next_attempt_at"].endswith("+00:00")
    assert mail["error"].startswith("deferred: jane@acme.com (ConnectionRefusedError")


def test_show_prints_a_senders_bidi_override_escaped(run_protege, env, scripted_model):
    from protege.models import Message

    scripted_model.script(say("Hello."))
    run_protege("runs", "start", "Sundae", "--sender", "j@acme.com", "--message", "Hi", env=env)
    # RFC 6532 lets a local part hold a right-to-left override, which would reorder the line.
    Message.update(sender="\u202egnp.exe@acme.com").execute()
    shown = run_protege("runs", "show", "1", env=env).stdout
    assert "\u202e" not in shown
    assert "\\u202egnp.exe@acme.com" in shown.splitlines()[0]
