"""`protege doctor` and `protege status` on real mailboxes (tests/mailservers.py): doctor
logs in and changes nothing; status shows who reads each mailbox and its lag; neither
prints a password."""

from __future__ import annotations

import datetime
import json

import pytest

from protege.models import Agent
from protege.models.base import utcnow
from protege.models.mailboxes import MailboxCheckpoint
from tests.mailservers import AGENT
from tests.mailservers import order_mail as mail


@pytest.fixture
def project(protege_in_process, submission, protege_db, tmp_path):
    dovecot = submission.dovecot
    Agent.create(name="Support", address=AGENT.address)
    (protege_in_process.project / "protege.toml").write_text(
        f"""
[model]
model = "test-model"

[mail]
transport = "submission"

[mail.submission]
host = "{submission.host}"
port = {submission.starttls_port}
ca_file = "{submission.ca_file}"
username = "{AGENT.address}"
password_env = "AGENT_PASSWORD"

[mail.imap.support]
agent = "{AGENT.address}"
host = "{dovecot.host}"
port = {dovecot.imaps_port}
ca_file = "{dovecot.ca_file}"
username = "{AGENT.address}"
password_env = "AGENT_PASSWORD"
done = "move"
move_to = "Taken"
sent_folder = "Sent"
"""
    )
    dovecot.create_folder(AGENT.address, "Taken")
    env = {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "AGENT_PASSWORD": AGENT.password,
    }
    return protege_in_process, env, dovecot


def test_doctor_logs_in_to_the_mailbox_and_the_submission_server_and_changes_nothing(project):
    run, env, dovecot = project
    dovecot.append(AGENT.address, mail(1))
    before = dovecot.messages(AGENT.address)

    result = run("doctor", "--json", env=env)

    report = json.loads(result.stdout)
    (box,) = report["mailboxes"]
    assert box["idle"] is True
    assert {"INBOX", "Taken", "Sent"} <= set(box["folders"])
    assert box["messages"] == 1
    assert report["submission"]["auth"]
    assert [p for p in report["problems"] if p["kind"] == "mail"] == []
    assert dovecot.messages(AGENT.address) == before  # no flag set, nothing moved
    assert AGENT.password not in result.stdout
    text = run("doctor", env=env).stdout
    assert "mailbox: support for agent@example.test" in text
    assert "submission: " in text
    assert "logged in as agent@example.test" in text


def test_doctor_reports_a_wrong_password_and_a_missing_folder_in_one_line_each(project):
    run, env, _ = project
    wrong = {**env, "AGENT_PASSWORD": "not it"}

    result = run("doctor", env=wrong)

    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem: ")]
    assert any("refused the login of agent@example.test" in line for line in problems)
    assert any("submission" in line and "refused the login" in line for line in problems)
    assert "not it" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr

    toml = run.project / "protege.toml"
    toml.write_text(toml.read_text().replace('move_to = "Taken"', 'move_to = "Archive"'))
    result = run("doctor", env=env)
    assert "problem: mailbox support: move_to 'Archive' is not a folder there" in result.stdout


def test_doctor_reports_a_mailbox_for_no_agent(project):
    run, env, _ = project
    Agent.update(archived_at=utcnow()).execute()
    result = run("doctor", env=env)
    assert "is for agent@example.test, which is no agent's address" in result.stdout


def test_status_shows_the_reader_and_the_lag_of_each_mailbox(project):
    run, env, _ = project
    now = utcnow()
    MailboxCheckpoint.create(
        name="support",
        source="x",
        uidvalidity=7,
        last_uid=3,
        taken=3,
        waiting=2,
        oldest_waiting_at=now - datetime.timedelta(minutes=5),
        checked_at=now,
        holder="host:123:abc",
        lease_expires_at=now + datetime.timedelta(minutes=1),
        last_error="mailbox support: the server did not answer in time",
    )

    found = json.loads(run("status", "--json", env=env).stdout)["mailboxes"]

    (box,) = found
    assert box["reader"] == "host:123:abc"
    assert box["waiting"] == 2
    assert 295 <= box["lag_seconds"] <= 400
    assert box["taken"] == 3
    text = run("status", env=env).stdout
    assert "mailboxes ([mail.imap]):" in text
    assert "host:123:abc" in text
    assert "did not answer in time" in text
