"""Running an installation as a server, on the host's own event loop.

``serve(installation)`` is what ``protege serve`` runs, as a library call: the SMTP gateway
taking mail, the workers carrying out runs (and the delivery loop sending their mail), and
the scheduler queueing responsibilities as they fall due, all on the running event loop;
database work, tool calls and mail hand-offs happen in thread pools of their own. With
``processes`` above one, worker processes carry the runs instead (a ``Supervisor``) and
this process only takes mail and queues duties.

    async with serve(installation, port=0) as server:
        host, port = server.smtp_address
        ...  # leaving the block stops everything, gracefully
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from protege.errors import ProtegeError
from protege.gateway.inbound import Delivered
from protege.gateway.mailbox import MailboxReader, readers
from protege.gateway.smtp import Gateway, RefusedMail, serve_gateway
from protege.harness.events import printable
from protege.models import Run
from protege.scheduler import Scheduler
from protege.supervisor import Supervisor, unreproducible, worker_environment
from protege.worker import Workers

if TYPE_CHECKING:
    from protege.installation import Installation

logger = logging.getLogger(__name__)

__all__ = ["ServeError", "Server", "serve"]

MAILBOX_STOP_SECONDS = 10.0


class ServeError(ProtegeError):
    """The server could not start (the SMTP port is taken, say), or a part of it failed."""


class Server:
    """An installation serving: the gateway, the workers and the scheduler, as ``serve``
    describes them. ``await start()`` and ``await stop()``, or ``async with``."""

    def __init__(
        self,
        installation: Installation,
        *,
        host: str | None = None,
        port: int | None = None,
        concurrency: int | None = None,
        processes: int | None = None,
        gateway: bool = True,
        scheduler: bool = True,
        grace: float | None = None,
        on_line: Callable[[str], None] | None = None,
        on_mail: Callable[[list[Delivered]], None] | None = None,
        on_refusal: Callable[[RefusedMail], None] | None = None,
        on_finished: Callable[[Run], None] | None = None,
        on_started: Callable[[Server], None] | None = None,
    ) -> None:
        settings = installation.config.serve
        self.installation = installation
        self.host = host
        self.port = port
        self.concurrency = concurrency or settings.max_concurrent_runs
        self.processes = processes or settings.processes
        self.gateway = gateway
        self.scheduler = scheduler
        self.grace = settings.shutdown_seconds if grace is None else grace
        self.on_line = on_line
        self.on_mail = on_mail
        self.on_refusal = on_refusal
        self.on_finished = on_finished
        self.on_started = on_started
        self.workers: Workers | None = None
        """The workers carrying runs in this process (none with several processes)."""
        self.supervisor: Supervisor | None = None
        """The worker processes' supervisor, with several processes."""
        self._gateway: Gateway | None = None
        self.mailboxes: list[MailboxReader] = []
        """The readers of ``[mail.imap.NAME]`` mailboxes (each reads while it holds the
        mailbox's lease)."""
        self._mailbox_threads: list[threading.Thread] = []
        self._scheduler: Scheduler | None = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "new"
        self._ended: asyncio.Event | None = None  # stopped, or a part failed
        self._stopped = asyncio.Event()
        self._failure: BaseException | None = None
        self._registered = False  # counted among its installation's servers

    @property
    def smtp_address(self) -> tuple[str, int] | None:
        """Where the gateway listens, ``(host, port)`` (the port bound, when 0 was asked);
        None without a gateway or before ``start``."""
        if self._gateway is None:
            return None
        return self._gateway.hostname, self._gateway.port

    @property
    def running(self) -> bool:
        """Whether the server started and has not stopped."""
        return self._state == "running"

    async def start(self) -> Self:
        """Listen for mail, start the workers (or worker processes) and the scheduler;
        returns once mail is taken and runs are carried. ``ServeError`` when the gateway
        cannot listen (nothing is left running then)."""
        if self._state != "new":
            raise RuntimeError("a Server starts once: make a new one")
        self._state = "starting"
        try:  # InstallationClosed once it is closed; it cannot close while this serves
            self.installation._lifetime.serving()
        except BaseException:
            self._state = "stopped"
            self._stopped.set()
            raise
        self._registered = True
        self._loop = asyncio.get_running_loop()
        self._ended = asyncio.Event()
        try:
            await self._start()
        except BaseException:
            await self.stop(grace=0)
            raise
        self._state = "running"
        return self

    async def _start(self) -> None:
        config = self.installation.config
        environ = None
        if self.processes > 1:  # before anything listens: a refusal leaves nothing running
            environ = worker_environment(config)
            why = await asyncio.to_thread(unreproducible, config, environ)
            if why is not None:
                where = config.path or f"{config.root} (no protege.toml)"
                raise ServeError(
                    f"cannot serve this installation with worker processes, which open it "
                    f"from {where} and the environment: {why} (serve it with processes=1, "
                    f"or describe it in protege.toml)"
                )
        if self.gateway:
            try:
                self._gateway = await serve_gateway(
                    config,
                    self.host,
                    self.port,
                    on_mail=self._mail,
                    on_refusal=self._refused,
                    app=self.installation,
                )
            except OSError as error:
                host = self.host or config.mail.listen_host
                port = config.mail.listen_port if self.port is None else self.port
                raise ServeError(
                    f"cannot listen for mail on {host}:{port}: {_reason(error)}"
                ) from error
        if self.gateway and config.mail.imap:
            self._start_mailboxes()
        if self.processes <= 1:
            self.workers = Workers(
                self.installation,
                max_concurrent_runs=self.concurrency,
                on_finished=self._finished,
            )
            ready = asyncio.Event()
            self._watch("workers", self.workers.serve(ready=ready.set))
            waiting = asyncio.ensure_future(ready.wait())
            try:
                await asyncio.wait(
                    {waiting, self._tasks["workers"]}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                waiting.cancel()
            if self._tasks["workers"].done():
                self._tasks["workers"].result()  # raises why the workers could not start
        # Before the scheduler's and processes' first lines.
        _call(self.on_started, self)
        if self.processes > 1:
            self.supervisor = Supervisor(
                self.processes,
                self.concurrency,
                environ=environ,
                cwd=config.root,
                on_line=self._from_thread,
            )
            await asyncio.to_thread(self.supervisor.start)
        if self.scheduler:
            self._scheduler = Scheduler(self.installation, on_line=self._from_thread)
            self._watch("scheduler", self._scheduler.serve())

    async def stop(self, grace: float | None = None) -> None:
        """Stop: take no more mail (a mail being received gets ``grace`` seconds to be
        stored and answered; one being stored is stored before this returns), queue no more
        duties, give the runs in flight ``grace`` seconds (default ``[serve]
        shutdown_seconds``) and hand the others back to the queue, send the mail being
        sent, stop the worker processes; returns once all is stopped. Cancelling it cuts
        the grace short; it still returns only once all is stopped, then raises the cancel.
        Stopping a stopped server does nothing."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        if self._state == "stopping":  # another caller stops it: wait for that
            await self._stopped.wait()
            return
        self._state = "stopping"
        grace = self.grace if grace is None else grace
        cancelled = False
        try:
            if self._gateway is not None:  # the mail being stored is stored and answered
                gateway = asyncio.ensure_future(self._gateway.stop(grace))
                cancelled = await _through_cancels(gateway)
            if self._mailbox_threads:  # the mail being stored is stored
                await _through_cancels(asyncio.ensure_future(self._stop_mailboxes()))
            if self._scheduler is not None:
                self._scheduler.stop()
            ending = []
            if self.workers is not None:
                self.workers.stop_soon(0 if cancelled else grace)
            if self.supervisor is not None:
                ending.append(asyncio.ensure_future(asyncio.to_thread(self.supervisor.stop, grace)))
            ending += list(self._tasks.values())
            for task in ending:
                while not task.done():
                    try:
                        await asyncio.wait({task})
                    except asyncio.CancelledError:  # no more grace: runs go back now
                        cancelled = True
                        for part in self._tasks.values():
                            part.cancel()
                if not task.cancelled() and task.exception() is not None:
                    logger.error("the server stopped with an error: %r", task.exception())
        finally:
            self._state = "stopped"
            if self._registered:
                self._registered = False
                self.installation._lifetime.served()
            self._stopped.set()
            if self._ended is not None:
                self._ended.set()
        if cancelled:
            raise asyncio.CancelledError

    async def serve_forever(self) -> None:
        """Serve until cancelled (then stop, with no grace for the runs in flight) or
        stopped by ``stop``; ``ServeError`` when a part of the server failed (it is
        stopped then)."""
        if self._state == "new":
            await self.start()
        if self._ended is None:
            raise RuntimeError("the server is not running")
        try:
            await self._ended.wait()
        except asyncio.CancelledError:
            await self.stop(grace=0)
            raise
        await self.stop()  # when a part failed, the others stop too
        if self._failure is not None:
            raise ServeError(f"the server failed: {self._failure}") from self._failure

    def _start_mailboxes(self) -> None:
        loop = asyncio.get_running_loop()

        def heard(delivered: list[Delivered]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self._mail, delivered)

        self.mailboxes = readers(self.installation, on_mail=heard)
        for reader in self.mailboxes:
            thread = threading.Thread(
                target=reader.run, name=f"protege-mailbox-{reader.name}", daemon=True
            )
            thread.start()
            self._mailbox_threads.append(thread)

    async def _stop_mailboxes(self) -> None:
        for reader in self.mailboxes:
            reader.stop()
        # A reader still connecting to a silent server cannot be cut short: it is left to
        # end on its own (a daemon thread; its lease runs out), not waited for past this.
        deadline = asyncio.get_running_loop().time() + MAILBOX_STOP_SECONDS
        for thread in self._mailbox_threads:
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            await asyncio.to_thread(thread.join, left)
            if thread.is_alive():
                logger.warning("%s did not stop in time; left to end on its own", thread.name)
        self._mailbox_threads = []

    def wake(self) -> None:
        """Have the workers look for queued runs now (safe from any thread)."""
        if self.workers is not None:
            self.workers.wake()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        # Leaving the block gracefully, or on a cancel at once (runs go back to the queue).
        cancelled = isinstance(error, asyncio.CancelledError)
        await self.stop(grace=0 if cancelled else None)

    def _watch(self, name: str, work: Any) -> None:
        task = asyncio.create_task(work, name=f"protege-{name}")
        self._tasks[name] = task
        task.add_done_callback(self._part_ended)

    def _part_ended(self, task: asyncio.Task) -> None:
        if self._state in ("stopping", "stopped") or task.cancelled():
            return
        error = task.exception()
        logger.error("the server's %s ended unexpectedly: %r", task.get_name(), error)
        self._failure = error or RuntimeError(f"{task.get_name()} ended")
        if self._ended is not None:
            self._ended.set()

    def _mail(self, delivered: list[Delivered]) -> None:
        for item in delivered:
            queued = f", run {item.run.id} queued" if item.run is not None else ""
            detail = "" if item.reason == item.status else f" ({item.reason})"
            self._say(
                f"mail {item.message.id} for {item.agent.name}: {item.status}{queued}{detail}"
            )
        if any(item.run is not None for item in delivered):
            self.wake()
        _call(self.on_mail, delivered)

    def _refused(self, refusal: RefusedMail) -> None:
        sender = refusal.sender or "an unnamed sender"
        to = f" for {', '.join(refusal.recipients)}" if refusal.recipients else ""
        # The addresses came from outside: no control characters reach a terminal.
        self._say(printable(f"mail from {sender}{to}: refused ({refusal.reply})"))
        _call(self.on_refusal, refusal)

    def _finished(self, run: Run) -> None:
        error = f" ({run.error})" if run.error else ""
        self._say(f"run {run.id} ({run.agent.name}): {run.status}{error}")
        _call(self.on_finished, run)

    def _from_thread(self, line: str) -> None:
        """A line from the scheduler's or the supervisor's thread, told on the loop."""
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self._loop.call_soon_threadsafe(self._say, line)

    def _say(self, line: str) -> None:
        _call(self.on_line, line)


def serve(
    installation: Installation,
    *,
    host: str | None = None,
    port: int | None = None,
    concurrency: int | None = None,
    processes: int | None = None,
    gateway: bool = True,
    scheduler: bool = True,
    grace: float | None = None,
    on_line: Callable[[str], None] | None = None,
    on_mail: Callable[[list[Delivered]], None] | None = None,
    on_refusal: Callable[[RefusedMail], None] | None = None,
    on_finished: Callable[[Run], None] | None = None,
    on_started: Callable[[Server], None] | None = None,
) -> Server:
    """``installation`` as a server on the running event loop, to use as ``async with
    serve(installation) as server:`` (or ``await server.start()`` ... ``await
    server.stop()``).

    It runs the SMTP gateway on ``host``:``port`` (default ``[mail] listen_host`` and
    ``listen_port``; port 0 takes a free one, ``server.smtp_address`` tells which), unless
    ``gateway`` is false; the workers, ``concurrency`` runs at once (default ``[serve]
    max_concurrent_runs``), with the delivery loop sending their mail; and the scheduler,
    unless ``scheduler`` is false. With ``processes`` above one (default ``[serve]
    processes``), that many worker processes (``protege serve --no-gateway
    --no-scheduler``, in the installation's root, with its ``protege.toml``, database,
    data directory, mail transport and blob store named in their environment) carry the
    runs instead, restarted when they die; ``ServeError`` when that file and environment
    would give them another configuration than the installation's (one changed in code).

    ``on_line`` hears a line for what happens, as ``protege serve`` prints it (a mail taken
    or refused, a run ended, a run queued by the scheduler, a worker process started);
    ``on_mail``, ``on_refusal`` and ``on_finished`` hear the same as records, and
    ``on_started`` the server once it listens, before the scheduler's first pass. All are
    called on the event loop's thread; one that raises is logged and serving goes on.

    While it runs, ``installation.close()`` raises ``InstallationServing``. Leaving the
    block stops the server gracefully (``Server.stop``: the mail being received and the
    runs in flight get ``grace`` seconds, default ``[serve] shutdown_seconds``, then the
    runs go back to the queue); leaving it by a cancel stops it without the grace. Either
    way it returns only once everything it started has ended.
    """
    return Server(
        installation,
        host=host,
        port=port,
        concurrency=concurrency,
        processes=processes,
        gateway=gateway,
        scheduler=scheduler,
        grace=grace,
        on_line=on_line,
        on_mail=on_mail,
        on_refusal=on_refusal,
        on_finished=on_finished,
        on_started=on_started,
    )


def _call(callback: Callable[..., Any] | None, *args: Any) -> None:
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:  # a host's callback never stops the server
        logger.exception("a serve callback failed")


async def _through_cancels(future: asyncio.Future) -> bool:
    """Wait until ``future`` is done, cancels notwithstanding (each passed on to it);
    whether one came."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError:
            cancelled = True
            future.cancel()  # cuts its grace short: it still ends all it started
    if not future.cancelled() and future.exception() is not None:
        logger.error("stopping the server: %r", future.exception())
    return cancelled


def _reason(error: OSError) -> str:
    """Why listening failed, in the operating system's words (asyncio wraps them)."""
    if error.errno:
        return os.strerror(error.errno)
    return str(error.strerror or error)
