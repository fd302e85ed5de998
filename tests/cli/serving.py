"""Running `protege serve` (or `scheduler`) as an operator does, and reading what it says."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time


def start(run_protege, env: dict[str, str], *args: str) -> subprocess.Popen:
    """Start ``protege ARGS`` in the test's project folder; its output is piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "protege", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        cwd=run_protege.project,
    )


_PENDING: dict[int, bytearray] = {}  # what each process printed and was not read yet


def read_line(process: subprocess.Popen, timeout: float = 30) -> str:
    """The next line the process prints (a failure if none comes within ``timeout``; ``""``
    once the process closed its output).

    Read from the pipe itself into a buffer of our own: ``select`` on a file object says
    nothing of lines its reader has buffered already, so two lines printed at once left
    the second unread and the test waiting for it (a flake under load).
    """
    pending = _PENDING.setdefault(process.pid, bytearray())
    deadline = time.monotonic() + timeout
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
