"""`protege approvals` and `protege grants configure --approval-by`, and a run waiting on
approval across a restart of `protege serve`, in real subprocesses."""

import datetime
import json
import signal
import smtplib
import subprocess
import threading
from email.message import EmailMessage

import pytest

from protege.access import checked_policy
from protege.gateway.smtp import free_port
from protege.models import Agent, AgentToolkit, Approval, AuditEntry, Message, Run, Toolkit
from protege.testing import DkimKey, say, tool_call

from .serving import read_line, start

SHOP_TOOLS = """
from pathlib import Path

from protege import Tool


class IssueRefundTool(Tool):
    description = "Refunds an order in full."
    input_schema = {
        "type": "object",
        "required": ["order_number"],
        "properties": {"order_number": {"type": "string"}},
    }

    def use(self, context, order_number):
        with Path("refunds.log").open("a") as log:
            log.write(order_number + "\\n")
        return self.success(refunded=order_number)
"""


# The Scoop's mail server signs its people's mail; serve finds the key pinned, offline.
SCOOP_KEY = DkimKey.generate("thescoop.com", "mail")
SETTINGS = f"""tool_modules = ["shop_tools"]

[mail.authentication]
offline = true

[mail.authentication.dns]
"{SCOOP_KEY.name}" = "{SCOOP_KEY.record}"
"""


@pytest.fixture
def run_protege(protege_in_process):
    """Commands run in-process (click's test runner); `serve` still runs as a process."""
    return protege_in_process


@pytest.fixture
def env(protege_db, scripted_model, run_protege, tmp_path):
    (run_protege.project / "protege.toml").write_text(SETTINGS)
    (run_protege.project / "shop_tools.py").write_text(SHOP_TOOLS)
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    finance = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["issue_refund"]))
    finance.require_approval(["*@thescoop.com"], ["mara@thescoop.com"])
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }


def refunds(run_protege) -> list[str]:
    log = run_protege.project / "refunds.log"
    return log.read_text().splitlines() if log.exists() else []


def jane_asks(run_protege, env, scripted_model):
    scripted_model.script(tool_call("issue_refund", order_number="SCP-1042"), say("Asked Mara."))
    result = run_protege(
        "runs", "start", "Sundae", "--sender", "jane@acme.com", "--message", "Refund!", env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "run 1: Sundae, reply (message from jane@acme.com), waiting"
    )
    return result


def test_runs_show_tells_the_approval_story(run_protege, env, scripted_model):
    shown = jane_asks(run_protege, env, scripted_model).stdout
    assert "approval 1 requested for issue_refund from *@thescoop.com (mailed to " in shown
    assert "waiting for approval: " in shown
    assert "   8 waiting for approval (1)" in shown.splitlines()


def test_the_approvals_list_shows_text_from_outside_escaped(run_protege, env, scripted_model):
    jane_asks(run_protege, env, scripted_model)
    # A sender's local part may hold a right-to-left override (RFC 6532 addresses).
    Approval.update(requested_by="\u202egnp.exe@acme.com").execute()
    listed = run_protege("approvals", "list", env=env).stdout
    assert "\u202e" not in listed
    assert "\\u202egnp.exe@acme.com" in listed


def test_list_and_approve_from_the_command_line(run_protege, env, scripted_model):
    jane_asks(run_protege, env, scripted_model)
    listed = run_protege("approvals", "list", "--json", env=env)
    (item,) = json.loads(listed.stdout)
    assert (item["id"], item["tool"], item["requested_by"], item["status"]) == (
        1,
        "issue_refund",
        "jane@acme.com",
        "pending",
    )
    scripted_model.script(say("Refunded."))
    approved = run_protege("approvals", "approve", "1", "--run", env=env)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines() == [
        "approval 1 (issue_refund) approved; run 1 is queued again",
        "run 1: done",
    ]
    assert refunds(run_protege) == ["SCP-1042"]
    again = run_protege("approvals", "deny", "1", env=env)
    assert (again.returncode, again.stderr) == (1, "Error: approval 1 was approved already\n")
    assert run_protege("approvals", "list", env=env).stdout == "no approvals are waiting\n"
    (approval,) = Approval.select()
    assert approval.answered_by.startswith("cli:")


def test_deny_from_the_command_line_reaches_the_model(run_protege, env, scripted_model):
    jane_asks(run_protege, env, scripted_model)
    scripted_model.script(say("Told Jane no."))
    denied = run_protege("approvals", "deny", "1", "--reason", "no photo", "--run", env=env)
    assert denied.returncode == 0, denied.stderr
    assert refunds(run_protege) == []
    note = scripted_model.shown(-1)[-1]["content"]
    assert "denied your call" in note
    assert "no photo" in note


def test_approving_past_the_deadline_is_a_one_line_error_and_the_approval_expires(
    run_protege, env, scripted_model
):
    jane_asks(run_protege, env, scripted_model)
    Approval.update(expires_at=datetime.datetime(2000, 1, 1)).execute()  # before any pass
    late = run_protege("approvals", "approve", "1", env=env)
    assert (late.returncode, late.stderr) == (1, "Error: approval 1 had expired: nothing decided\n")
    (approval,) = Approval.select()
    assert (approval.status, approval.answered_by) == ("expired", "nobody (it expired)")
    assert refunds(run_protege) == []


def test_unknown_approval_is_a_one_line_error(run_protege, env):
    result = run_protege("approvals", "approve", "7", env=env)
    assert (result.returncode, result.stderr) == (
        1,
        "Error: no approval 7 (see `protege approvals list`)\n",
    )


def test_grants_configure_sets_and_clears_the_approval_policy(run_protege, env):
    result = run_protege(
        "grants",
        "configure",
        "Sundae",
        "Finance",
        "--approval-by",
        "*@TheScoop.com",
        "--approval-to",
        "Boss@thescoop.com",
        "--approval-timeout",
        "90m",
        "--no-self-approval",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "Finance's tools wait for approval by *@thescoop.com on Sundae's runs (requests to "
        "boss@thescoop.com; refused after 90m unanswered; someone other than the asker must "
        "approve)\n"
    )
    grant = AgentToolkit.get()
    assert grant.approval == checked_policy(
        ["*@thescoop.com"], ["boss@thescoop.com"], 5400, self_approval=False
    )
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).get()
    assert entry.action == "approval required"
    cleared = run_protege("grants", "configure", "Sundae", "Finance", "--no-approval", env=env)
    assert cleared.stdout == "Finance's tools run without approval for Sundae\n"
    assert AgentToolkit.get().approval is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ["--approval-by", "*@thescoop.com", "--approval-to", "jane@acme.com"],
            "Error: jane@acme.com is not among the approvers (*@thescoop.com)\n",
        ),
        (
            ["--approval-by", "*@thescoop.com"],
            "Error: say where approval requests go (--approval-to ADDRESS): no approver "
            "pattern is a plain address\n",
        ),
        (
            ["--approval-by", "mara@thescoop.com", "--approval-timeout", "soon"],
            "Usage error: Invalid value: 'soon' is not a duration such as 90m, 72h or 3d\n",
        ),
    ],
)
def test_grants_configure_refuses_a_policy_that_cannot_work(run_protege, env, options, error):
    before = AgentToolkit.get().approval
    result = run_protege("grants", "configure", "Sundae", "Finance", *options, env=env)
    if error.startswith("Usage error: "):
        assert result.returncode == 2
        assert result.stderr.endswith(error.removeprefix("Usage error: "))
    else:
        assert (result.returncode, result.stderr) == (1, error)
    assert AgentToolkit.get().approval == before


def test_a_run_waiting_on_approval_survives_a_restart_of_serve(run_protege, env, scripted_model):
    port = free_port()
    scripted_model.script(tool_call("issue_refund", order_number="SCP-1042"), say("Asked Mara."))
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "1")
    try:
        assert read_line(process).startswith("protege: listening for mail on ")
        _send(port, _mail("Jane <jane@acme.com>", "sundae@thescoop.example", "Refund SCP-1042"))
        assert read_line(process) == "mail 1 for Sundae: accepted, run 1 queued"
        assert read_line(process) == "run 1 (Sundae): waiting"
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert Run.get_by_id(1).status == "waiting"

    (approval,) = Approval.select()
    request = Message.get(Message.subject.startswith("Approval needed"))
    forged = _mail(
        "Mara <mara@thescoop.com>",
        f"sundae+approve-{approval.token}@thescoop.example",
        "approve",
        request.message_id,
    )
    answer = SCOOP_KEY.sign(forged)  # the same answer, as Mara's own server sends it
    scripted_model.script(say("Refunded SCP-1042."))
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "1")
    try:
        assert read_line(process).startswith("protege: listening for mail on ")
        _send(port, forged)  # the right token, but nothing proves it is Mara's
        assert read_line(process) == (
            "mail 3 for Sundae: ignored (approval 1: the sender is not authenticated)"
        )
        _send(port, answer)
        assert read_line(process) == (
            "mail 4 for Sundae: answer, run 1 queued (approval 1 approved by mara@thescoop.com)"
        )
        assert read_line(process) == "run 1 (Sundae): done"
        _send(port, answer)  # delivered twice
        assert read_line(process) == (
            "mail 5 for Sundae: ignored (approval 1 was approved already)"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert refunds(run_protege) == ["SCP-1042"]


def _mail(sender: str, to: str, body: str, in_reply_to: str | None = None) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = "Refund"
    message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    message.set_content(body)
    return message.as_bytes()


def _send(port: int, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.sendmail("someone@example.com", ["sundae@thescoop.example"], raw)


def test_a_waiting_run_is_cancelled_at_once_and_a_late_answer_resumes_nothing(
    run_protege, env, scripted_model
):
    jane_asks(run_protege, env, scripted_model)
    cancelled = run_protege("runs", "cancel", "1", env=env)
    assert cancelled.stdout == "run 1 cancelled (it was waiting for approval)\n"
    approved = run_protege("approvals", "approve", "1", env=env)
    assert approved.stdout == "approval 1 (issue_refund) approved; run 1 is cancelled\n"
    assert Run.get_by_id(1).status == "cancelled"
    assert refunds(run_protege) == []


def test_runs_asking_for_approval_at_once_all_wait_on_sqlite(run_protege, env, scripted_model):
    """Eight mails at once to an agent whose tool needs approval: each run asks and waits.
    On SQLite the request used to read, then write, in one deferred transaction, and all
    but the first writer failed with "database is locked"."""
    orders = [f"SCP-2{n:03d}" for n in range(8)]
    for order in orders:
        scripted_model.script_for(
            order, tool_call("issue_refund", order_number=order), say("Asked.")
        )
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "8")
    try:
        assert read_line(process, 90).startswith("protege: listening for mail on ")
        senders = [
            threading.Thread(
                target=_send,
                args=(port, _mail(f"c{n}@acme.com", "sundae@thescoop.example", f"Refund {order}")),
            )
            for n, order in enumerate(orders)
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        finished = []
        while len(finished) < len(orders):
            line = read_line(process, 90)
            if line.startswith("run "):
                finished.append(line)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    assert all(line.endswith(": waiting") for line in finished), finished
    assert sorted(a.arguments for a in Approval.select()) == sorted(
        json.dumps({"order_number": order}) for order in orders
    )
