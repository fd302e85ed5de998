"""`protege serve` with every write path busy at once: eight mail runs in flight (leases,
events, replies queued for delivery), responsibilities falling due (the scheduler), the
delivery loop sending, and an operator changing access meanwhile (the audit log). On
SQLite, the default, none may fail with "database is locked" (as approvals did when their
transactions read before they wrote); on PostgreSQL (`make test-postgres`) the same holds.
Nothing may be lost."""

import datetime
import signal
import smtplib
import subprocess
import threading
from email.message import EmailMessage
from pathlib import Path

from protege import audit
from protege.gateway.smtp import free_port
from protege.models import Agent, AuditEntry, Responsibility, Run, Toolkit
from protege.testing import say, tool_call

from .serving import read_line, start

MAILS = 8
DUTIES = 4
CHANGES = 24  # audited changes an operator makes while serve works


def _mail(sender: str, body: str) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "sundae@thescoop.example"
    message["Subject"] = "Question"
    message.set_content(body)
    return message.as_bytes()


def _send(port: int, sender: str, body: str) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.sendmail(sender, ["sundae@thescoop.example"], _mail(sender, body))


def test_every_write_path_holds_with_eight_runs_in_flight(
    protege_db, scripted_model, run_protege, tmp_path
):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]), allow_proactive=True)
    agent.grant(Toolkit.create(name="Spare"))  # the operator's changes go to this grant
    an_hour_ago = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(
        hours=1
    )
    for n in range(DUTIES):
        Responsibility.create(
            agent=agent,
            name=f"digest {n}",
            prompt=f"Write digest-{n}.",
            schedule="*/5 * * * *",
            scheduled_from=an_hour_ago,
        )
    questions = [f"question-{n}" for n in range(MAILS)]
    for question in questions:
        scripted_model.script_for(
            question, tool_call("send_email", mode="reply", body=f"About {question}."), say("ok")
        )
    for n in range(DUTIES):
        scripted_model.script_for(f"digest-{n}", say(f"digest {n} written"))
    data = tmp_path / "data"
    env = {
        "PROTEGE_DATABASE_URL": protege_db.url,
        "PROTEGE_DATA_DIR": str(data),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "8")
    try:
        assert read_line(process, 120).startswith("protege: listening for mail on ")
        grant = agent.grant_of(Toolkit.named("Spare"))
        failed: list[BaseException] = []

        def operator(n: int) -> None:
            try:
                for m in range(CHANGES // 4):
                    with audit.change("cli:ops", "rule added", grant):
                        grant.add_rule("deny", f"spam{n}-{m}@example.com")
            except BaseException as error:  # reported below, in the test's own thread
                failed.append(error)

        writers = [
            *(
                threading.Thread(target=_send, args=(port, f"c{n}@acme.com", q))
                for n, q in enumerate(questions)
            ),
            *(threading.Thread(target=operator, args=(n,)) for n in range(4)),
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        ended = []
        while len(ended) < MAILS + DUTIES:
            line = read_line(process, 120)
            if line.startswith("run ") and ": " in line and " queued" not in line:
                ended.append(line)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, errors = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate()
    assert failed == []
    assert all(line.endswith(": done") for line in ended), ended
    assert b"locked" not in errors, errors.decode(errors="replace")
    runs = list(Run.select())
    assert len(runs) == MAILS + DUTIES
    assert {run.status for run in runs} == {"done"}
    assert sum(1 for run in runs if run.responsibility_id) == DUTIES
    assert AuditEntry.select().where(AuditEntry.action == "rule added").count() == CHANGES
    # Each reply was handed to the transport (the outbox) once.
    sent = sorted(Path(data, "outbox").glob("*.eml"))
    bodies = sorted(
        next(q for q in questions if f"About {q}." in path.read_text()) for path in sent
    )
    assert bodies == sorted(questions)
