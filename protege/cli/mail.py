"""``protege serve`` (the SMTP gateway and workers) and ``protege receive`` (mail from a file)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sys
import threading

import click

from protege.cli.database import open_installation
from protege.cli.stopping import SLICE, Stopper
from protege.errors import ProtegeError
from protege.plugins import error_line


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
    from protege.serving import Server
    from protege.supervisor import lower_priority, supervising_pid, watch_parent

    installation = open_installation()
    config = installation.config
    parent = supervising_pid()
    if parent is not None:  # a worker process of another serve
        trouble = lower_priority(config.serve.worker_niceness)
        if trouble:
            _say(f"protege: {trouble}")

    def started(server: Server) -> None:
        address = server.smtp_address
        listening = (
            "receiving no mail"
            if address is None
            else f"listening for mail on {address[0]}:{address[1]}"
        )
        scheduling = "the scheduler" if server.scheduler else "no scheduler"
        _say(
            f"protege: {listening}, {server.concurrency} run(s) at once in each of "
            f"{server.processes} process(es), {scheduling}; Ctrl-C stops"
        )

    server = Server(
        installation,
        host=host,
        port=port,
        concurrency=concurrency,
        processes=processes,
        gateway=not no_gateway,
        scheduler=not no_scheduler,
        on_line=_say,
        on_started=started,
    )
    stopper = Stopper().install()  # before the announcement: it invites the signals
    if parent is not None:

        def gone() -> None:
            if not stopper.stopping:
                _say("protege: the serve that started this worker process is gone; stopping")
            stopper.stop()

        watch_parent(parent, gone)
    running = _Serving(server, stopper).start()
    try:
        stopper.wait()
        if running.failure is None:
            _say(
                f"protege: stopping (no more mail; runs in flight get "
                f"{server.grace:g} s, then go back to the queue)"
            )
    finally:
        running.stop()  # whatever saying so did: a reader gone must not leave workers behind
    if running.failure is not None:
        raise running.failure
    _say("protege: stopped")


class _Serving:
    """The server, on an event loop in a thread of its own: the main thread waits for the
    signals in slices (``Stopper``), which a thread blocked in a loop's poll would not."""

    def __init__(self, server, stopper: Stopper) -> None:
        self.server = server
        self.stopper = stopper
        self.failure: ProtegeError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asked: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="protege-serve", daemon=True)

    def start(self) -> _Serving:
        self._thread.start()
        while not self._started.wait(SLICE):  # in slices: a signal is heard meanwhile
            pass
        if self.failure is not None and not self.server.running:
            self._thread.join()
            raise self.failure
        return self

    def stop(self) -> None:
        loop, asked = self._loop, self._asked
        if loop is not None and asked is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(asked.set)
        while self._thread.is_alive():
            self._thread.join(SLICE)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except ProtegeError as error:
            self.failure = error
        except BaseException as error:  # shown as one line, as any command's error
            self.failure = ProtegeError(f"serve failed: {error_line(error)}")
        finally:
            self._started.set()
            self.stopper.stop()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._asked = asyncio.Event()
        await self.server.start()
        self._started.set()
        forever = asyncio.ensure_future(self.server.serve_forever())
        asked = asyncio.ensure_future(self._asked.wait())
        await asyncio.wait({forever, asked}, return_when=asyncio.FIRST_COMPLETED)
        asked.cancel()
        await self.server.stop()
        await forever  # raises what failed, if anything did


def _say(line: str) -> None:
    """Print ``line`` at once (a log reader, or a test, sees each line as it happens). Once
    the reader is gone (a broken pipe), the rest goes nowhere: serve carries on, and stops
    as it should, instead of failing on its next line."""
    try:
        click.echo(line)
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_output()
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        _discard_output()


def _discard_output() -> None:
    # Python's advice for a broken pipe: point the descriptor at /dev/null, so that neither
    # this process nor the worker processes it starts later fail writing to it (the flush
    # at exit included).
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


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
