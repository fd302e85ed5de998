"""`protege serve` reading a real Dovecot mailbox (tests/mailservers.py) as operators run
it: killed with kill -9 between fetching a mail and storing it, and between storing it and
marking it done; and two serve processes on one mailbox, one of them killed."""

from __future__ import annotations

import os
import subprocess

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Message
from protege.models.mailboxes import MailboxCheckpoint

from ..mailservers import AGENT
from ..mailservers import order_mail as mail
from .serving import patience, start, until

WAIT = 90


@pytest.fixture
def project(run_protege, dovecot, protege_db, tmp_path):
    """A project reading the agent's Dovecot mailbox; the environment to serve it with."""
    Agent.create(name="Support", address=AGENT.address)
    (run_protege.project / "protege.toml").write_text(
        f"""
[runs]
lease_seconds = 2

[mail.imap.support]
agent = "{AGENT.address}"
host = "{dovecot.host}"
port = {dovecot.imaps_port}
ca_file = "{dovecot.ca_file}"
username = "{AGENT.address}"
password_env = "AGENT_IMAP_PASSWORD"
poll_seconds = 3600
"""
    )
    return {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "PROTEGE_DNS_OFFLINE": "1",
        "AGENT_IMAP_PASSWORD": AGENT.password,
    }


def serving(run_protege, env, **extra) -> subprocess.Popen:
    return start(
        run_protege, {**env, **extra}, "serve", "--port", str(free_port()), "--concurrency", "1"
    )


def stored() -> list[str]:
    return [
        m.subject
        for m in Message.select().where(Message.direction == "inbound").order_by(Message.id)
    ]


def reading_begun() -> None:
    def looked() -> bool:
        row = MailboxCheckpoint.get_or_none(MailboxCheckpoint.name == "support")
        return row is not None and row.checked_at is not None

    until(looked, WAIT, "serve never looked at the mailbox")


def killed(process: subprocess.Popen) -> int:
    return process.wait(patience(WAIT))


def test_killed_between_fetching_and_storing_the_mail_is_taken_on_restart(
    run_protege, project, dovecot
):
    first = serving(run_protege, project, PROTEGE_FAILPOINTS="imap.fetched=1")
    reading_begun()  # the first look finds nothing, so no failpoint yet
    dovecot.append(AGENT.address, mail(1))
    assert killed(first) == -9
    assert stored() == []
    assert "\\Seen" not in dovecot.messages(AGENT.address)[0].flags

    serving(run_protege, project)  # takes the lease once the dead one's runs out
    until(lambda: stored() == ["Order 1"], WAIT, "the mail was not taken after the restart")
    until(lambda: "\\Seen" in dovecot.messages(AGENT.address)[0].flags, WAIT)


def test_killed_between_storing_and_marking_the_mail_is_marked_and_not_taken_again(
    run_protege, project, dovecot
):
    first = serving(run_protege, project, PROTEGE_FAILPOINTS="imap.stored=1")
    reading_begun()
    dovecot.append(AGENT.address, mail(1))
    assert killed(first) == -9
    assert stored() == ["Order 1"]
    assert "\\Seen" not in dovecot.messages(AGENT.address)[0].flags

    serving(run_protege, project)
    until(lambda: "\\Seen" in dovecot.messages(AGENT.address)[0].flags, WAIT)
    dovecot.append(AGENT.address, mail(2))
    until(lambda: len(stored()) == 2, WAIT)
    assert stored() == ["Order 1", "Order 2"]


def test_two_serve_processes_read_one_mailbox_once_and_one_takes_over_when_the_other_dies(
    run_protege, project, dovecot
):
    processes = [serving(run_protege, project), serving(run_protege, project)]
    reading_begun()
    dovecot.append_many(AGENT.address, [mail(n) for n in range(1, 11)])
    until(lambda: len(stored()) >= 10, WAIT, "the first mails were not all taken")

    holder = MailboxCheckpoint.get(MailboxCheckpoint.name == "support").holder
    pid = int(holder.split(":")[1])
    (reader,) = [p for p in processes if p.pid == pid]
    reader.kill()
    reader.wait()
    dovecot.append_many(AGENT.address, [mail(n) for n in range(11, 16)])

    until(lambda: len(stored()) >= 15, WAIT, "the other process did not take over")
    assert stored() == [f"Order {n}" for n in range(1, 16)]  # each once, in order
    new_holder = MailboxCheckpoint.get(MailboxCheckpoint.name == "support").holder
    assert new_holder is not None
    assert int(new_holder.split(":")[1]) != pid
    assert int(new_holder.split(":")[1]) in {p.pid for p in processes}
    assert os.getpid() != pid
