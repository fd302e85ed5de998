"""`serve` and `scheduler` end on a SIGTERM whichever of their threads the kernel hands it to.

Found when a serve on a loaded CI machine ran on after its SIGTERM: the signal had gone to
one of its other threads, and the main thread, blocked in ``Event.wait()`` for good, never
ran Python's handler.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from protege.cli.stopping import Stopper
from protege.gateway.smtp import free_port

from .serving import read_line, start

WAIT = 90  # seconds: generous, for a loaded machine


def to_another_thread(pid: int, signum: int) -> None:
    """Send ``signum`` to a thread of process ``pid`` that is not its main thread."""
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the process has no other thread"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, others[-1], signum) != 0:
        raise OSError(ctypes.get_errno(), "tgkill failed")


def blocked(pid: int) -> bool:
    """Whether the main thread of ``pid`` is asleep on a lock (the state the bug needs)."""
    return "futex" in Path(f"/proc/{pid}/task/{pid}/wchan").read_text()


def until(condition, seconds: float = WAIT) -> None:
    """Wait for ``condition()`` to hold, looking again as soon as it does not."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "it never happened"
        threading.Event().wait(0.05)  # a look at /proc, not a synchronisation


def ended(process: subprocess.Popen) -> int:
    try:
        process.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError("it ran on after SIGTERM") from None
    return process.returncode


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux only (tgkill)")
@pytest.mark.parametrize("command", [("serve", "--port", "PORT"), ("scheduler",)])
def test_sigterm_to_any_thread_stops_the_command(run_protege, protege_db, tmp_path, command):
    args = [str(free_port()) if a == "PORT" else a for a in command]
    env = {"PROTEGE_DATABASE_URL": protege_db.url, "PROTEGE_DATA_DIR": str(tmp_path / "d")}
    process = start(run_protege, env, *args)
    try:
        assert read_line(process, WAIT).startswith("protege: ")
        until(lambda: blocked(process.pid))
        to_another_thread(process.pid, signal.SIGTERM)
        code = ended(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert code == 0


def test_stop_from_another_thread_ends_the_wait():
    stopper = Stopper()
    threading.Timer(0.01, stopper.stop).start()
    stopper.wait()
    assert stopper.stopping
