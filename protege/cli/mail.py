"""``protege serve`` (the SMTP gateway and workers) and ``protege receive`` (mail from a file)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import click

from protege.cli.database import open_installation
from protege.cli.stopping import Stopper
from protege.errors import ProtegeError


@click.command()
@click.option("--host", help="Address to listen on (default: [mail] listen_host).")
@click.option("--port", type=int, help="Port to listen on (default: [mail] listen_port).")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="Runs carried at once by each process (default: [serve] max_concurrent_runs).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    help="Processes carrying runs (default: [serve] processes); with more than one, this "
    "process only takes mail and queues duties.",
)
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Leave responsibilities to a `protege scheduler` running elsewhere.",
)
@click.option(
    "--no-gateway",
    is_flag=True,
    help="Receive no mail: only carry out the runs in the database (another host's gateway).",
)
def serve(
    host: str | None,
    port: int | None,
    concurrency: int | None,
    processes: int | None,
    no_scheduler: bool,
    no_gateway: bool,
) -> None:
    """Receive mail by SMTP, queue due responsibilities, carry out the runs and send their
    mail, until interrupted (SIGTERM or Ctrl-C stops it gracefully)."""
    from protege.gateway.smtp import start_gateway
    from protege.scheduler import Scheduler
    from protege.worker import Workers

    installation = open_installation()
    config = installation.config
    if os.environ.get(PARENT_VARIABLE):  # a worker process of another serve
        _yield_cpu_to_mail(config.serve.worker_niceness)
    width = concurrency or config.serve.max_concurrent_runs
    count = processes or config.serve.processes
    # With several processes, this one only takes mail and queues duties, so that taking
    # mail never waits on runs; each of the others carries runs and sends their mail.
    pool = Workers(installation, max_concurrent_runs=width, on_finished=_report)
    helpers = _Helpers(count if count > 1 else 0, width)
    gateway = None
    if not no_gateway:
        try:
            gateway = start_gateway(
                config,
                host,
                port,
                on_mail=_mail_line(pool),
                on_refusal=_refusal_line,
                app=installation,
            )
        except OSError as error:
            where = f"{host or config.mail.listen_host}:{port or config.mail.listen_port}"
            raise ProtegeError(
                f"cannot listen for mail on {where}: {error.strerror or error}"
            ) from None
    if not helpers.count:
        pool.start()
    scheduler = None if no_scheduler else Scheduler(installation, on_line=_say)
    stopper = Stopper().install()  # before the announcement: it invites the signals
    _stop_with_parent(stopper)
    listening = (
        "receiving no mail"
        if gateway is None
        else f"listening for mail on {gateway.hostname}:{gateway.port}"
    )
    scheduling = "no scheduler" if scheduler is None else "the scheduler"
    _say(
        f"protege: {listening}, {width} run(s) at once in each of "
        f"{helpers.count or 1} process(es), {scheduling}; Ctrl-C stops"
    )
    helpers.start()
    if scheduler is not None:  # after the announcement, so that it comes first
        scheduler.start()
    stopper.wait()
    _say(
        f"protege: stopping (no more mail; runs in flight get "
        f"{config.serve.shutdown_seconds:g} s, then go back to the queue)"
    )
    if gateway is not None:
        gateway.stop()
    if scheduler is not None:
        scheduler.stop()
    helpers.stop(config.serve.shutdown_seconds)
    if not helpers.count:
        pool.stop()
    _say("protege: stopped")


PARENT_VARIABLE = "PROTEGE_SERVE_PARENT"


class _Helpers:
    """The worker processes of ``serve --processes N``: each carries runs and sends their
    mail (no gateway, no scheduler), and stops when this process goes, however it goes. One
    that dies is started again until serve stops; one that dies at once, again and again,
    is restarted less and less often (up to once a minute)."""

    def __init__(self, count: int, width: int) -> None:
        self.count = count
        self.width = width
        self._processes: list[subprocess.Popen] = []
        self._started: list[float] = []
        self._delay: list[float] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="protege-helpers", daemon=True)

    def _spawn(self) -> subprocess.Popen:
        command = [sys.executable, "-m", "protege", "serve", "--no-gateway", "--no-scheduler"]
        command += ["--processes", "1", "--concurrency", str(self.width)]
        environ = {**os.environ, PARENT_VARIABLE: str(os.getpid())}
        return subprocess.Popen(command, stdout=sys.stdout, stderr=sys.stderr, env=environ)

    def start(self) -> None:
        with self._lock:
            self._processes = [self._spawn() for _ in range(self.count)]
            self._started = [time.monotonic()] * self.count
            self._delay = [0.0] * self.count
        for process in self._processes:
            _say(f"protege: worker process {process.pid} started")
        if self._processes:
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):  # a supervisor's look, not a synchronisation
            with self._lock:  # stop() waits for a restart under way, then none follows
                for index, process in enumerate(self._processes):
                    if self._stopping.is_set() or process.poll() is None:
                        continue
                    lived = time.monotonic() - self._started[index]
                    if lived < 10:  # died at once: wait longer before each new try
                        self._delay[index] = min(60.0, max(1.0, self._delay[index] * 2))
                        if lived < self._delay[index]:
                            continue
                    else:
                        self._delay[index] = 0.0
                    self._processes[index] = self._spawn()
                    self._started[index] = time.monotonic()
                    _say(
                        f"protege: worker process {process.pid} ended ({process.returncode}); "
                        f"worker process {self._processes[index].pid} started"
                    )

    def stop(self, grace: float) -> None:
        self._stopping.set()
        with self._lock:
            processes = list(self._processes)
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(grace + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _yield_cpu_to_mail(steps: int) -> None:
    """Run this worker process ``steps`` below its serve's CPU priority, before it starts a
    thread (on Linux each thread has its own, and new threads take their creator's):
    measured with bench/serve.py, runs at the same priority cut the mail the serve takes in
    by half; below it, mail keeps its pace and runs lose almost nothing."""
    if not steps or not hasattr(os, "nice"):  # not on Windows
        return
    try:
        os.nice(steps)
    except OSError as error:
        _say(f"protege: could not lower this worker process's priority: {error}")


def _stop_with_parent(stopper: Stopper) -> None:
    """In a worker process of ``serve --processes``: stop when the process that started it
    is gone (killed with -9, say), instead of running on unsupervised."""
    parent = os.environ.get(PARENT_VARIABLE)
    if not parent or not parent.isdigit():
        return
    looked = threading.Event()  # never set: its timed wait paces the looks

    def watch() -> None:
        while not stopper.stopping:
            if os.getppid() != int(parent):  # gone already, or since the last look
                _say("protege: the serve that started this worker process is gone; stopping")
                stopper.stop()
                return
            looked.wait(1.0)  # a supervisor's look, not a synchronisation

    threading.Thread(target=watch, name="protege-parent", daemon=True).start()


def _mail_line(pool):
    def said(delivered) -> None:
        for item in delivered:
            queued = f", run {item.run.id} queued" if item.run is not None else ""
            detail = "" if item.reason == item.status else f" ({item.reason})"
            what = f"{item.status}{queued}{detail}"
            _say(f"mail {item.message.id} for {item.agent.name}: {what}")
        if any(item.run is not None for item in delivered):
            pool.wake()

    return said


def _refusal_line(refusal) -> None:
    from protege.harness.events import printable  # the addresses came from outside

    sender = refusal.sender or "an unnamed sender"
    to = f" for {', '.join(refusal.recipients)}" if refusal.recipients else ""
    _say(printable(f"mail from {sender}{to}: refused ({refusal.reply})"))


def _report(run) -> None:
    error = f" ({run.error})" if run.error else ""
    _say(f"run {run.id} ({run.agent.name}): {run.status}{error}")


def _say(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()  # a log reader (or a test) sees each line as it happens


@click.command()
@click.argument("file", type=click.File("rb"), default="-")
@click.option(
    "--to",
    "recipients",
    multiple=True,
    help="Deliver to this address (repeatable; default: the To, Cc and Delivered-To headers).",
)
@click.option("--run", "run_now", is_flag=True, help="Carry out the queued runs right away.")
def receive(file, recipients: tuple[str, ...], run_now: bool) -> None:
    """Take one email (an .eml FILE, or standard input) as if it had arrived by SMTP."""
    from protege.gateway.inbound import ingest
    from protege.worker import drain

    installation = open_installation()
    raw = file.read()
    delivered = ingest(
        raw,
        config=installation.config,
        recipients=list(recipients) or None,
        app=installation,
    )
    for item in delivered:
        queued = f" (run {item.run.id} queued)" if item.run is not None else ""
        flags = f" [{'; '.join(item.message.flags)}]" if item.message.flags else ""
        click.echo(f"{item.agent.name}: {item.status}{queued}: {item.reason}{flags}")
    if run_now:
        for run in drain(installation):
            click.echo(f"run {run.id}: {run.status}" + (f" ({run.error})" if run.error else ""))
    sys.stdout.flush()
