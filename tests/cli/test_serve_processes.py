"""`serve --processes N` never leaves a worker process behind: not when it is stopped, not
when it is killed, and not when whoever read its output went away before it was stopped.

The last was found running: a serve whose log reader had gone (a closed pipe) failed on
its "stopping" line, before it stopped its workers, and its gateway's thread then held it
open; the workers, their parent still there, ran on for good.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from protege.gateway.smtp import free_port

from .serving import gone, patience, read_line, start, until

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads the process table in /proc"
)
WAIT = 90


@pytest.fixture
def env(protege_db, tmp_path):
    return {"PROTEGE_DATABASE_URL": protege_db.url, "PROTEGE_DATA_DIR": str(tmp_path / "d")}


def serving_with_workers(run_protege, env) -> tuple[subprocess.Popen, list[int]]:
    """A ``serve --processes 2``, and the ids of its worker processes (from its lines)."""
    process = start(run_protege, env, "serve", "--port", str(free_port()), "--processes", "2")
    workers: list[int] = []
    while len(workers) < 2:
        line = read_line(process, WAIT)
        assert line, "serve ended before it started its workers"
        if line.startswith("protege: worker process ") and line.endswith(" started"):
            workers.append(int(line.split()[3]))
    return process, workers


def ended(process: subprocess.Popen) -> int:
    try:
        return process.wait(patience(WAIT))
    except subprocess.TimeoutExpired:
        raise AssertionError("serve ran on after SIGTERM") from None


def test_sigterm_stops_serve_and_its_worker_processes(run_protege, env):
    process, workers = serving_with_workers(run_protege, env)
    process.send_signal(signal.SIGTERM)
    assert ended(process) == 0
    assert [pid for pid in workers if not gone(pid)] == []


def test_worker_processes_stop_when_serve_is_killed(run_protege, env):
    process, workers = serving_with_workers(run_protege, env)
    process.kill()  # kill -9: no chance to stop its workers itself
    process.wait()
    until(lambda: all(gone(pid) for pid in workers), WAIT, "a worker process ran on")


def test_sigterm_stops_the_worker_processes_after_the_output_reader_went_away(run_protege, env):
    process, workers = serving_with_workers(run_protege, env)
    process.stdout.close()  # the log reader is gone: every line from now on hits a closed pipe
    process.send_signal(signal.SIGTERM)
    code = ended(process)
    until(lambda: all(gone(pid) for pid in workers), WAIT, "a worker process ran on")
    assert code == 0
    assert "Traceback" not in process.stderr.read().decode()
