"""The crash test: serve processes killed with SIGKILL, again and again, while mail comes in.

Several ``protege serve`` processes (each with its own SMTP port) share one database. Mail
comes in over SMTP, one message at a time to a random live process; each message's run calls
a slow tool (so kills land inside it), then ``send_email`` to reply, then answers, against a
fake model on loopback that takes a while to answer (so kills land during model calls). A
random process is killed with ``kill -9`` at random moments and started again, and every
process kills itself now and then between claiming a reply and handing it to the outbox
(``PROTEGE_FAILPOINTS``). Once every message has been taken in and every run has ended, the
verdict: each message has exactly one run and it is done, each reply is in the outbox
exactly once, nothing is left queued, running or pending.

    .venv/bin/python bench/crash.py --database-url postgresql://127.0.0.1:5432/test

runs it in full (1,000 messages) on a schema of its own, dropped afterwards; ``make
test-postgres`` runs a smaller one (60 messages, 6 kills). It is PostgreSQL's test: on SQLite,
processes sharing one file fail each other's writes ("database is locked").
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import email
import os
import random
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from email.message import EmailMessage
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).parent))

import fake_model

AGENT = "crash@protege.example"
SENDER = "jane@acme.example"
TOOLS = '''
import random
import time

from protege import Tool


class SlowStepTool(Tool):
    """Takes a while, as a tool that calls a slow service does (kills land inside it)."""

    description = "Looks the case up in a slow back office system."
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def use(self, context):
        time.sleep(random.uniform(0.05, 0.4))
        return self.success(found=True)
'''


@attrs.define
class Settings:
    """How big a crash test is."""

    messages: int = 1000
    processes: int = 3
    concurrency: int = 16
    kills: int = 60
    kill_gap: tuple[float, float] = (0.3, 2.0)
    failpoints: str = "delivery.handoff=0.03,run.tool_recorded=0.01"
    lease_seconds: float = 2.0
    latency: float = 0.05
    jitter: float = 0.3
    deadline: float = 1800.0
    senders: int = 3
    seed: int | None = None


@attrs.define
class Verdict:
    """What the crash test found: ``problems`` is empty when nothing was lost or doubled."""

    problems: list[str]
    messages: int
    killed: int  # by the test, with kill -9
    crashed: int  # by a failpoint
    takeovers: int
    seconds: float


class _Server:
    """One ``protege serve`` process, started again on the same port after it dies."""

    def __init__(self, project: Path, env: dict[str, str], concurrency: int, log: Path) -> None:
        self.port = _free_port()
        self.project, self.env, self.concurrency, self.log = project, env, concurrency, log
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        command = [sys.executable, "-m", "protege", "serve", "--port", str(self.port)]
        command += ["--concurrency", str(self.concurrency), "--no-scheduler"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=self.project, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def listening(self) -> bool:
        if not self.alive():
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(condition, deadline: float, what: str, every: float = 0.1) -> None:
    """Poll ``condition`` until it holds; ``TimeoutError`` naming ``what`` at ``deadline``."""
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(every)  # polling a condition, with a deadline: not a stand-in for one


def _mail(number: int) -> bytes:
    mail = EmailMessage()
    mail["From"] = f"Jane <{SENDER}>"
    mail["To"] = AGENT
    mail["Subject"] = f"Case {number}"
    mail["Message-ID"] = f"<case-{number}@acme.example>"
    mail.set_content(f"Please look into case {number}.")
    return bytes(mail)


def prepare(project: Path, settings: Settings) -> None:
    """The agent, its tools and the project folder the serve processes run in (the database
    must be bound and migrated)."""
    from protege.models import Agent, Toolkit

    agent = Agent.create(name="Crash", address=AGENT)
    agent.grant(Toolkit.create(name="Crash", member_tool_ids=["send_email", "slow_step"]))
    project.mkdir(parents=True, exist_ok=True)
    (project / "crash_tools.py").write_text(textwrap.dedent(TOOLS))
    (project / "protege.toml").write_text(
        textwrap.dedent(
            f"""\
            tool_modules = ["crash_tools"]

            [runs]
            lease_seconds = {settings.lease_seconds}
            max_attempts = 1000

            [serve]
            poll_interval = 0.2
            shutdown_seconds = 1

            # Every case comes from one sender, far more than a sender's default share
            # of runs an hour: no sender limits here, or most of the mail would be held.
            [limits]
            sender_runs_per_hour = 0
            sender_runs_per_day = 0
            agent_runs_per_hour = 0
            """
        )
    )


def crash(database_url: str, folder: Path, settings: Settings) -> Verdict:
    """Run the crash test against the migrated, empty database at ``database_url`` (also
    bound in this process) with its files in ``folder``; the verdict."""
    rng = random.Random(settings.seed)
    started = time.monotonic()
    deadline = started + settings.deadline
    project, data = folder / "project", folder / "data"
    prepare(project, settings)
    model, base_url = fake_model.start(settings.latency, "slow_step,send_email", settings.jitter)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "OPENAI_"))}
    env.update(
        PROTEGE_DATABASE_URL=database_url,
        PROTEGE_DATA_DIR=str(data),
        PROTEGE_MAIL_TRANSPORT="outbox",
        PROTEGE_BLOB_STORE="local",
        PROTEGE_MODEL="fake",
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="fake-key",
        PROTEGE_FAILPOINTS=settings.failpoints,
    )
    servers = [
        _Server(project, env, settings.concurrency, folder / f"serve-{n}.log")
        for n in range(settings.processes)
    ]
    counts = {"killed": 0, "crashed": 0}
    sending_done = threading.Event()
    stop = threading.Event()
    errors: list[str] = []
    try:
        for server in servers:
            server.start()
        _wait_for(lambda: all(s.listening() for s in servers), deadline, "serve to listen")
        keeper = threading.Thread(
            target=_keep_alive, args=(servers, counts, stop, rng, settings, deadline), daemon=True
        )
        keeper.start()
        numbers = collections.deque(range(1, settings.messages + 1))
        senders = [
            threading.Thread(
                target=_send_all, args=(numbers, servers, deadline, errors), daemon=True
            )
            for _ in range(settings.senders)
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        sending_done.set()
        if errors:
            return Verdict(errors, settings.messages, counts["killed"], counts["crashed"], 0, 0)
        _wait_for(lambda: _settled(settings.messages), deadline, "every run to end", 0.25)
        stop.set()
        keeper.join()
    finally:
        stop.set()
        for server in servers:
            with server.lock:
                if server.alive():
                    server.process.send_signal(signal.SIGTERM)
        for server in servers:
            if server.process is not None:
                try:
                    server.process.wait(30)
                except subprocess.TimeoutExpired:
                    server.process.kill()
        model.kill()
        model.wait()
    problems = check(settings.messages, data / "outbox")
    return Verdict(
        problems,
        settings.messages,
        counts["killed"],
        counts["crashed"],
        _takeovers(),
        time.monotonic() - started,
    )


def _send_all(numbers, servers: list[_Server], deadline: float, errors: list[str]) -> None:
    """Send messages until none is left, each to a random live process; a message whose
    sending broke off is sent again only if it was not stored."""
    from protege.models import Message

    while True:
        try:
            number = numbers.popleft()
        except IndexError:
            return
        raw, message_id = _mail(number), f"<case-{number}@acme.example>"
        while True:
            if time.monotonic() > deadline:
                errors.append(f"message {number} could not be sent in time")
                return
            server = random.choice(servers)
            try:
                with smtplib.SMTP("127.0.0.1", server.port, timeout=30) as client:
                    client.sendmail(SENDER, [AGENT], raw)
                    with contextlib.suppress(smtplib.SMTPException, OSError):
                        client.quit()
                break
            except (smtplib.SMTPException, OSError):
                # Killed mid-way: it may have stored the message before it died.
                if Message.select().where(Message.message_id == message_id).exists():
                    break
                time.sleep(0.05)  # another process, soon: a pause between tries


def _keep_alive(servers, counts, stop, rng, settings: Settings, deadline: float) -> None:
    """Kill a random live process now and then (until ``settings.kills``), and start again
    every process that died, by our hand or its failpoint."""
    next_kill = time.monotonic() + rng.uniform(*settings.kill_gap)
    while not stop.is_set() and time.monotonic() < deadline:
        for server in servers:
            with server.lock:
                if server.process is not None and server.process.poll() is not None:
                    if server.process.returncode == -signal.SIGKILL and not getattr(
                        server.process, "killed_by_us", False
                    ):
                        counts["crashed"] += 1
                    server.start()
        if counts["killed"] < settings.kills and time.monotonic() >= next_kill:
            live = [s for s in servers if s.alive()]
            if live:
                victim = rng.choice(live)
                with victim.lock:
                    if victim.alive():
                        victim.process.killed_by_us = True
                        victim.process.send_signal(signal.SIGKILL)
                        counts["killed"] += 1
            next_kill = time.monotonic() + rng.uniform(*settings.kill_gap)
        stop.wait(0.05)


def _settled(expected: int) -> bool:
    """Every message taken in, every run ended, no mail waiting."""
    from protege.db import database

    (inbound, unfinished, pending) = database.execute_sql(
        "SELECT (SELECT COUNT(*) FROM message WHERE direction = 'inbound'), "
        "(SELECT COUNT(*) FROM run WHERE status IN ('queued', 'running')), "
        "(SELECT COUNT(*) FROM message WHERE status = 'pending')"
    ).fetchone()
    return inbound >= expected and unfinished == 0 and pending == 0


def _takeovers() -> int:
    from protege.models import Event

    return Event.select().where(Event.kind == "resumed").count()


def check(expected: int, outbox: Path) -> list[str]:
    """What went wrong: every message has one run, done; every reply is in the outbox once."""
    from protege.models import Message, Run

    problems = []
    inbound = list(Message.select().where(Message.direction == "inbound"))
    ids = collections.Counter(m.message_id for m in inbound)
    wanted = {f"<case-{n}@acme.example>" for n in range(1, expected + 1)}
    if set(ids) != wanted:
        problems.append(f"messages stored: {len(ids)} of {expected}")
    problems += [f"{i} stored {n} times" for i, n in ids.items() if n > 1]
    runs = collections.defaultdict(list)
    for run in Run.select():
        runs[run.message_id].append(run)
    for message in inbound:
        found = runs.get(message.id, [])
        if [r.status for r in found] != ["done"]:
            what = ", ".join(f"run {r.id} {r.status} ({r.error})" for r in found) or "no run"
            problems.append(f"{message.message_id}: {what}")
    outbound = collections.Counter(
        m.status for m in Message.select().where(Message.direction == "outbound")
    )
    if outbound != {"sent": expected}:
        problems.append(f"replies in the database: {dict(outbound)}, expected {expected} sent")
    replies = collections.Counter()
    for path in outbox.glob("*.eml"):
        replies[email.message_from_bytes(path.read_bytes())["In-Reply-To"]] += 1
    problems += [f"{i}: {n} replies in the outbox" for i, n in replies.items() if n != 1]
    missing = wanted - set(replies)
    if missing:
        problems.append(f"{len(missing)} messages have no reply in the outbox")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("PROTEGE_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test"),
        help="the PostgreSQL server (a schema of its own is made there and dropped after)",
    )
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds, at most")
    options = parser.parse_args()
    from protege.testing.database import fresh_database

    settings = Settings(
        messages=options.messages,
        processes=options.processes,
        concurrency=options.concurrency,
        kills=options.kills,
        seed=options.seed,
        deadline=options.deadline,
    )
    with (
        tempfile.TemporaryDirectory() as folder,
        fresh_database(Path(folder), options.database_url) as made,
    ):
        verdict = crash(made.url, Path(folder), settings)
    print(
        f"{verdict.messages} messages, {settings.processes} "
        f"processes: {verdict.killed} killed with kill -9, {verdict.crashed} crashed at a "
        f"failpoint, {verdict.takeovers} runs taken over, {verdict.seconds:.0f} s"
    )
    for problem in verdict.problems:
        print(f"  PROBLEM: {problem}")
    print("ok: nothing lost, nothing doubled" if not verdict.problems else "FAILED")
    sys.exit(1 if verdict.problems else 0)


if __name__ == "__main__":
    main()
