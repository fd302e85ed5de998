"""Running `protege serve` (or `scheduler`) as an operator does, and reading what it says."""

from __future__ import annotations

import os
import select
import subprocess
import sys


def start(run_protege, env: dict[str, str], *args: str) -> subprocess.Popen:
    """Start ``protege ARGS`` in the test's project folder; its output is piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "protege", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
        cwd=run_protege.project,
    )


def read_line(process: subprocess.Popen, timeout: float = 30) -> str:
    """The next line the process prints (a failure if none comes within ``timeout``)."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the command printed nothing in time"
    return process.stdout.readline().decode().rstrip("\n")
