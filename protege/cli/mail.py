"""``protege serve`` (the SMTP gateway and workers) and ``protege receive`` (mail from a file)."""

from __future__ import annotations

import signal
import sys
import threading

import click

from protege.cli.database import open_installation
from protege.errors import ProtegeError


@click.command()
@click.option("--host", help="Address to listen on (default: [mail] listen_host).")
@click.option("--port", type=int, help="Port to listen on (default: [mail] listen_port).")
@click.option("--workers", type=int, help="Worker threads running queued runs.")
@click.option(
    "--no-scheduler",
    is_flag=True,
    help="Leave responsibilities to a `protege scheduler` running elsewhere.",
)
def serve(host: str | None, port: int | None, workers: int | None, no_scheduler: bool) -> None:
    """Receive mail by SMTP, queue due responsibilities, and carry out the runs, until
    interrupted."""
    from protege.gateway.smtp import start_gateway
    from protege.scheduler import Scheduler
    from protege.worker import Workers

    installation = open_installation()
    config = installation.config
    count = workers or config.mail.workers
    try:
        gateway = start_gateway(config, host, port)
    except OSError as error:
        where = (
            f"{host or config.mail.listen_host}:{config.mail.listen_port if port is None else port}"
        )
        raise ProtegeError(
            f"cannot listen for mail on {where}: {error.strerror or error}"
        ) from None
    pool = Workers(installation, count, on_finished=_report).start()
    scheduler = None if no_scheduler else Scheduler(installation, on_line=_say)
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # before the announcement: it invites them
        signal.signal(signum, lambda *_: stopped.set())
    scheduling = "no scheduler" if scheduler is None else "the scheduler"
    _say(
        f"protege: listening for mail on {gateway.hostname}:{gateway.port}, "
        f"{count} worker(s), {scheduling}; Ctrl-C stops"
    )
    if scheduler is not None:  # after the announcement, so that it comes first
        scheduler.start()
    stopped.wait()
    _say("protege: stopping (finishing current runs)")
    if scheduler is not None:
        scheduler.stop()
    gateway.stop()
    pool.stop()


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
    delivered = ingest(raw, config=installation.config, recipients=list(recipients) or None)
    for item in delivered:
        queued = f" (run {item.run.id} queued)" if item.run is not None else ""
        flags = f" [{'; '.join(item.message.flags)}]" if item.message.flags else ""
        click.echo(f"{item.agent.name}: {item.status}{queued}: {item.reason}{flags}")
    if run_now:
        for run in drain(installation):
            click.echo(f"run {run.id}: {run.status}" + (f" ({run.error})" if run.error else ""))
    sys.stdout.flush()
