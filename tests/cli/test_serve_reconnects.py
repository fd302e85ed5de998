"""`serve` on PostgreSQL goes on after the server ends its connections (a restart, a
failover, ``pg_terminate_backend``): mail keeps being taken, runs keep being carried out,
and nothing is lost. Before, the gateway answered every recipient with an error until serve
itself was restarted, and a relay in front bounced the mail."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import smtplib
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from protege.gateway.smtp import free_port
from protege.models import Agent, Message, Run, Toolkit
from protege.testing import say

from .serving import patience, read_line, start

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


def wait_for_runs(process: subprocess.Popen, count: int) -> None:
    """Read what serve prints until ``count`` runs have ended."""
    ended: set[str] = set()
    while len(ended) < count:
        line = read_line(process, WAIT)
        if line.startswith("run ") and line.endswith((": done", ": failed")):
            ended.add(line.split(" ")[1])


def stop(process: subprocess.Popen) -> None:
    """End serve, and show what it logged (pytest prints it when the test fails)."""
    process.send_signal(signal.SIGTERM)
    try:
        said = process.communicate(timeout=WAIT)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        said = process.communicate()[1]
    print(said.decode()[-6000:])


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
    # A run whose connection was ended under it goes on at once on a new one: it must not
    # wait for its lease to run out and another worker to take it over.
    (run_protege.project / "protege.toml").write_text("[runs]\nlease_seconds = 3600\n")
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "2")
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
        wait_for_runs(process, 6)
    finally:
        stop(process)
    assert refusals == [None] * 5  # each taken at once: the gateway tried on a new connection
    subjects = sorted(m.subject for m in Message.select().where(Message.direction == "inbound"))
    assert subjects == [f"Mail {n}" for n in range(1, 7)]  # nothing lost, nothing doubled
    assert [run.status for run in Run.select()] == ["done"] * 6


class PrivateCluster:
    """A PostgreSQL server of this test's own (initdb in a folder, on a free port), so that
    it can be restarted without disturbing the other tests' server."""

    def __init__(self, folder: Path) -> None:
        # Debian keeps the server's programs out of PATH, one folder per major version.
        bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)
        found = shutil.which("initdb")
        self.bin = bindirs[-1] if bindirs else Path(found or "initdb").parent
        self.folder = folder
        self.port = free_port()
        self.as_owner: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the cluster is the postgres user's
            self.as_owner = ["runuser", "-u", "postgres", "--"]
            shutil.chown(folder, "postgres")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/app"

    def create(self) -> None:
        """Make the cluster and its database, and start the server."""
        self._run("initdb", "-D", str(self.folder / "data"), "-U", "postgres", "-A", "trust")
        self.pg_ctl("start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "app")

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self.as_owner, str(self.bin / program), *args],
            capture_output=True,
            text=True,
            timeout=patience(120),
        )
        assert done.returncode == 0, f"{program} failed: {done.stderr}"

    def pg_ctl(self, action: str, *args: str) -> None:
        """Start, restart or stop the server, waiting until it has."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder}"
        self._run(
            "pg_ctl", "-D", str(self.folder / "data"), "-l", str(self.folder / "log"),
            "-w", "-m", "fast", "-o", options, action, *args,
        )  # fmt: skip

    def query(self, sql: str) -> list[tuple]:
        import psycopg2

        with (
            psycopg2.connect(self.url, connect_timeout=10) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
            rows = cursor.fetchall()
        connection.close()
        return rows


@pytest.fixture
def cluster():
    folder = Path(tempfile.mkdtemp(prefix="protege-pg-"))
    folder.chmod(0o755)
    made = PrivateCluster(folder)
    try:
        made.create()
        yield made
    finally:  # whatever happened, no server is left running
        if (folder / "data" / "postmaster.pid").exists():
            with contextlib.suppress(AssertionError, subprocess.SubprocessError):
                made.pg_ctl("stop")
        shutil.rmtree(folder, ignore_errors=True)


def test_serve_goes_on_after_postgresql_restarts(run_protege, scripted_model, cluster, tmp_path):
    env = {
        "PROTEGE_DATABASE_URL": cluster.url,
        "PROTEGE_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": scripted_model.base_url,
        "OPENAI_API_KEY": "k",
        "PROTEGE_MODEL": "scripted",
    }
    assert run_protege("migrate", env=env).returncode == 0
    made = run_protege(
        "agents", "create", "Sundae", "--address", "sundae@thescoop.example", env=env
    )
    assert made.returncode == 0, made.stderr
    scripted_model.script(*[say("Thanks!") for _ in range(20)])
    (run_protege.project / "protege.toml").write_text("[runs]\nlease_seconds = 3600\n")
    port = free_port()
    process = start(run_protege, env, "serve", "--port", str(port), "--concurrency", "2")
    try:
        assert read_line(process, WAIT).startswith("protege: listening for mail on ")
        assert send(port, 1) is None
        assert read_line(process, WAIT).startswith("mail ")
        cluster.pg_ctl("restart")  # every connection serve holds is ended by the server
        refusals = [send(port, number) for number in range(2, 6)]
        wait_for_runs(process, 5)
    finally:
        stop(process)
    assert refusals == [None] * 4  # taken at once, on new connections
    subjects = cluster.query(
        "SELECT subject FROM message WHERE direction = 'inbound' ORDER BY subject"
    )
    assert [s for (s,) in subjects] == [f"Mail {n}" for n in range(1, 6)]
    assert cluster.query("SELECT status FROM run") == [("done",)] * 5
