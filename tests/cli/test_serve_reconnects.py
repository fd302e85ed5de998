"""`serve` on PostgreSQL goes on after the server ends its connections (a restart, a
failover, ``pg_terminate_backend``): mail keeps being taken, runs keep being carried out,
and nothing is lost. Before, the gateway answered every recipient with an error until serve
itself was restarted, and a relay in front bounced the mail."""

from __future__ import annotations

import signal
import smtplib
import subprocess
import uuid

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Message, Run, Toolkit
from protege.testing import say

from .serving import read_line, start

pytestmark = pytest.mark.skipif(
    "not __import__('os').environ.get('PROTEGE_TEST_DATABASE_URL')",
    reason="PostgreSQL only; make test-postgres runs it",
)
WAIT = 90


def send(port: int, number: int) -> tuple[int, bytes] | None:
    """Send mail ``number``; the refusal (code, text), or None when it was taken."""
    raw = (
        f"From: jane@acme.com\r\nTo: sundae@thescoop.example\r\nSubject: Mail {number}\r\n"
        f"Message-ID: <m{number}@acme.com>\r\n\r\nHello {number}.\r\n"
    ).encode()
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
            client.sendmail("jane@acme.com", ["sundae@thescoop.example"], raw)
    except smtplib.SMTPRecipientsRefused as refused:
        return next(iter(refused.recipients.values()))
    except smtplib.SMTPDataError as refused:
        return refused.smtp_code, refused.smtp_error
    return None


def test_serve_goes_on_after_postgresql_ends_its_connections(
    run_protege, protege_db, scripted_model, tmp_path
):
    from protege.db import database

    Agent.create(name="Sundae", address="sundae@thescoop.example").grant(
        Toolkit.create(name="Support", member_tool_ids=[])
    )
    # More answers than runs: a run whose connection was ended under it is tried again.
    scripted_model.script(*[say("Thanks!") for _ in range(20)])
    name = f"serve-{uuid.uuid4().hex[:8]}"  # so that only this serve's connections are ended
    env = {
        "PROTEGE_DATABASE_URL": f"{protege_db.url}&application_name={name}",
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "2")
    said = b""
    try:
        assert read_line(process, WAIT).startswith("protege: listening for mail on ")
        assert send(port, 1) is None
        ended = database.execute_sql(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (name,),
        ).fetchone()[0]
        assert ended >= 1
        refusals = [send(port, number) for number in range(2, 7)]
        ended_runs: set[str] = set()
        while len(ended_runs) < 6:
            line = read_line(process, WAIT)
            if line.startswith("run ") and line.endswith((": done", ": failed")):
                ended_runs.add(line.split(" ")[1])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            said = process.communicate(timeout=WAIT)[1]
        except subprocess.TimeoutExpired:
            process.kill()
            said = process.communicate()[1]
        print(said.decode()[-6000:])  # shown when the test fails: what serve logged
    assert refusals == [None] * 5  # each taken at once: the gateway tried on a new connection
    subjects = sorted(m.subject for m in Message.select().where(Message.direction == "inbound"))
    assert subjects == [f"Mail {n}" for n in range(1, 7)]  # nothing lost, nothing doubled
    assert [run.status for run in Run.select()] == ["done"] * 6
