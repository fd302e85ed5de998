"""The worker processes of ``protege serve --processes N``, and their side of the bargain.

A ``Supervisor`` starts the processes that carry runs for a serve (each a ``protege serve
--no-gateway --no-scheduler``), starts again one that dies, and stops them when it stops. A
worker process knows its serve by ``PARENT_VARIABLE`` and stops when that process is gone,
however it went (``watch_parent``): no worker runs on unsupervised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from protege.config import (
    BLOB_STORE_VARIABLE,
    CONFIG_VARIABLE,
    DATA_DIR_VARIABLE,
    DATABASE_URL_VARIABLE,
    MAIL_TRANSPORT_VARIABLE,
    Config,
    load_config,
)
from protege.errors import ConfigError

logger = logging.getLogger(__name__)

PARENT_VARIABLE = "PROTEGE_SERVE_PARENT"
"""The environment variable that tells a worker process the id of the serve it works for."""

LOOK_SECONDS = 1.0  # between a supervisor's looks at its processes (and a worker's at its parent)
QUICK_DEATH_SECONDS = 10.0  # a process that dies sooner is restarted less and less often
MOST_DELAY_SECONDS = 60.0


def worker_command(width: int) -> list[str]:
    """The command of one worker process carrying ``width`` runs at once."""
    return [
        sys.executable,
        *("-m", "protege", "serve", "--no-gateway", "--no-scheduler"),
        *("--processes", "1", "--concurrency", str(width)),
    ]


def worker_environment(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker process of the installation ``config`` describes:
    ``environ`` (by default this process's) naming its ``protege.toml``, database, data
    directory, mail transport and blob store, which the worker reads before the file's."""
    made = dict(os.environ if environ is None else environ)
    if config.path is not None:
        made[CONFIG_VARIABLE] = str(config.path)
    else:  # the worker looks for one from its root, as loading this configuration did
        made.pop(CONFIG_VARIABLE, None)
    made[DATABASE_URL_VARIABLE] = config.database_url
    made[DATA_DIR_VARIABLE] = str(config.data_dir)
    made[MAIL_TRANSPORT_VARIABLE] = config.mail.transport
    made[BLOB_STORE_VARIABLE] = config.blobs.store
    return made


def unreproducible(config: Config, environ: Mapping[str, str]) -> str | None:
    """Why a worker process started in ``config.root`` with ``environ`` would not work
    with the installation ``config`` describes, reading its ``protege.toml`` and the
    environment (``it would read another [mail] listen_port``, the first setting that
    differs, never its value), or None when it would. The plugins' tables are left aside: a
    worker checks them against its plugins as this process did."""
    try:
        rebuilt = load_config(config.root, environ=environ)
    except ConfigError as error:
        return f"it could not: {error}"
    differing = _first_difference(config, rebuilt, "")
    return None if differing is None else f"it would read another {differing}"


_UNCOMPARED = frozenset({"plugins", "blob_store"})


def _first_difference(mine: Any, theirs: Any, section: str) -> str | None:
    for field in attrs.fields(type(mine)):
        if field.name in _UNCOMPARED or not field.eq:
            continue
        ours, other = getattr(mine, field.name), getattr(theirs, field.name)
        if ours == other:
            continue
        if attrs.has(type(ours)) and type(ours) is type(other):
            inner = f"{section}.{field.name}" if section else field.name
            return _first_difference(ours, other, inner) or f"[{inner}]"
        return f"[{section}] {field.name}" if section else field.name
    return None


class Supervisor:
    """Runs ``count`` worker processes (``command``, by default ``worker_command(width)``)
    until ``stop``: one that dies is started again; one that dies at once, again and again,
    is restarted less and less often (up to once a minute). They run in ``cwd`` (by
    default this process's) with ``environ`` (by default this process's environment;
    ``worker_environment`` makes one for an installation). Their output goes to
    ``stdout`` and ``stderr`` (by default this process's). ``on_line`` hears a line when a
    process starts or ends (from the supervisor's thread); a failing ``on_line`` is logged
    and never stops the supervision."""

    def __init__(
        self,
        count: int,
        width: int,
        *,
        command: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.count = count
        self.width = width
        self.command = list(command) if command is not None else worker_command(width)
        self.environ = dict(os.environ if environ is None else environ)
        self.cwd = cwd
        self.stdout = stdout
        self.stderr = stderr
        self.on_line = on_line
        self._processes: list[subprocess.Popen] = []
        self._started: list[float] = []
        self._delay: list[float] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="protege-helpers", daemon=True)

    @property
    def pids(self) -> list[int]:
        """The ids of the worker processes now."""
        with self._lock:
            return [process.pid for process in self._processes]

    def start(self) -> Supervisor:
        """Start the processes, and the thread that watches them."""
        with self._lock:
            self._processes = [self._spawn() for _ in range(self.count)]
            self._started = [time.monotonic()] * self.count
            self._delay = [0.0] * self.count
        for process in self._processes:
            self._say(f"protege: worker process {process.pid} started")
        if self._processes:
            self._watcher.start()
        return self

    def stop(self, grace: float) -> None:
        """Restart none, send each process SIGTERM, give it ``grace`` seconds (and ten more)
        to end, kill it if it did not, and return once all ended."""
        self._stopping.set()
        with self._lock:  # a restart under way ends first; none follows
            processes = list(self._processes)
        for process in processes:
            with contextlib.suppress(OSError):  # gone already
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(grace + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._watcher.is_alive():
            self._watcher.join()

    def _spawn(self) -> subprocess.Popen:
        environ = {**self.environ, PARENT_VARIABLE: str(os.getpid())}
        stdout = sys.stdout if self.stdout is None else self.stdout
        stderr = sys.stderr if self.stderr is None else self.stderr
        return subprocess.Popen(
            self.command, stdout=stdout, stderr=stderr, env=environ, cwd=self.cwd
        )

    def _watch(self) -> None:
        while not self._stopping.wait(LOOK_SECONDS):  # a supervisor's look, not a sync
            with self._lock:
                for index, process in enumerate(self._processes):
                    if self._stopping.is_set() or process.poll() is None:
                        continue
                    lived = time.monotonic() - self._started[index]
                    if lived < QUICK_DEATH_SECONDS:  # wait longer before each new try
                        delay = min(MOST_DELAY_SECONDS, max(1.0, self._delay[index] * 2))
                        self._delay[index] = delay
                        if lived < delay:
                            continue
                    else:
                        self._delay[index] = 0.0
                    try:
                        self._processes[index] = self._spawn()
                    except OSError as error:  # no fork, say: tried again at the next look
                        logger.error("could not start a worker process: %s", error)
                        continue
                    self._started[index] = time.monotonic()
                    self._say(
                        f"protege: worker process {process.pid} ended ({process.returncode}); "
                        f"worker process {self._processes[index].pid} started"
                    )

    def _say(self, line: str) -> None:
        logger.info("%s", line)
        if self.on_line is not None:
            try:
                self.on_line(line)
            except Exception:
                logger.exception("on_line failed")


def supervising_pid(environ: Mapping[str, str] | None = None) -> int | None:
    """The id of the serve this process is a worker process of, or None."""
    value = (os.environ if environ is None else environ).get(PARENT_VARIABLE, "")
    return int(value) if value.isdigit() else None


def watch_parent(parent: int, on_gone: Callable[[], None]) -> threading.Thread:
    """Call ``on_gone`` (once, from a thread of its own) when process ``parent``, the serve
    this one works for, is no longer this process's parent: killed with -9, say. The thread
    is a daemon: it never keeps the process alive."""

    def watch() -> None:
        paced = threading.Event()  # never set: its timed wait paces the looks
        while os.getppid() == parent:
            paced.wait(LOOK_SECONDS)  # a supervisor's look, not a synchronisation
        on_gone()

    thread = threading.Thread(target=watch, name="protege-parent", daemon=True)
    thread.start()
    return thread


def lower_priority(steps: int) -> str | None:
    """Run this worker process ``steps`` below its serve's CPU priority, before it starts a
    thread (on Linux each thread has its own, and new threads take their creator's):
    measured with bench/serve.py, runs at the same priority cut the mail the serve takes in
    by half; below it, mail keeps its pace and runs lose almost nothing. Returns why it
    could not, or None."""
    if not steps or not hasattr(os, "nice"):  # not on Windows
        return None
    try:
        os.nice(steps)
    except OSError as error:
        return f"could not lower this worker process's priority: {error}"
    return None
