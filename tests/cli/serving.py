"""Running `protege serve` (or `scheduler`) as an operator does, and reading what it says."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

STARTED: list[subprocess.Popen] = []  # ended, with all they started, after each test
MOST_PATIENCE = 6  # a wait stretches at most this much on a loaded machine


def patience(seconds: float) -> float:
    """``seconds`` stretched by how loaded the machine is (the load average per CPU, at
    least 1, at most ``MOST_PATIENCE``): a wait for a process is a bound on a hang, not a
    speed test, and a busy machine is slow, not broken."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return seconds * min(MOST_PATIENCE, max(1.0, load))


def start(run_protege, env: dict[str, str], *args: str) -> subprocess.Popen:
    """Start ``protege ARGS`` in the test's project folder; its output is piped. It runs in
    a process group of its own, which ``end_all`` kills whole (workers of ``serve
    --processes`` included) after the test, whether the test passed or not."""
    process = subprocess.Popen(
        [sys.executable, "-m", "protege", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        cwd=run_protege.project,
        start_new_session=True,
    )
    STARTED.append(process)
    return process


def end_all() -> None:
    """Kill every process group ``start`` made that still has a process in it."""
    while STARTED:
        process = STARTED.pop()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole group ended already
        except PermissionError:  # the leader is gone and its id taken: only it can be checked
            pass
        if process.poll() is None:
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        _PENDING.pop(process.pid, None)


_PENDING: dict[int, bytearray] = {}  # what each process printed and was not read yet


def read_line(process: subprocess.Popen, timeout: float = 30) -> str:
    """The next line the process prints (a failure if none comes within ``timeout``; ``""``
    once the process closed its output).

    Read from the pipe itself into a buffer of our own: ``select`` on a file object says
    nothing of lines its reader has buffered already, so two lines printed at once left
    the second unread and the test waiting for it (a flake under load).
    """
    pending = _PENDING.setdefault(process.pid, bytearray())
    deadline = time.monotonic() + patience(timeout)
    fd = process.stdout.fileno()
    while b"\n" not in pending:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        assert ready, f"the command printed nothing in time (so far: {bytes(pending)!r})"
        chunk = os.read(fd, 65536)
        if not chunk:  # the pipe closed: what is left is the last line, then ""
            last = bytes(pending).decode()
            pending.clear()
            return last
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


def until(condition, seconds: float = 60, what: str = "it never happened") -> None:
    """Wait for ``condition()`` to hold (a failure if it does not within ``seconds``,
    stretched by ``patience``), looking again as soon as it does not."""
    deadline = time.monotonic() + patience(seconds)
    while not condition():
        assert time.monotonic() < deadline, what
        select.select([], [], [], 0.05)  # a look at the process table, not a synchronisation


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie, ended and not reaped yet, counts)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    except OSError:  # not Linux: ask the kernel whether it is there at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")
