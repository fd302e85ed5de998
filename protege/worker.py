"""Workers: what takes queued runs out of the database and carries them out.

``Workers`` is what ``protege serve`` runs: one event loop, in a thread of its own, carrying
up to ``max_concurrent_runs`` runs at once (a run spends its life waiting on the model),
with database work in a bounded thread pool and the delivery loop beside the runs. Several
processes, on one machine or many, may share one database: claims and leases keep each run
with one worker, and a run whose worker died is taken over. ``drain`` carries out what is
queued in the calling thread, for the command line, scripts and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import importlib
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from protege.db import close_idle_connections
from protege.dbroute import hand_over
from protege.delivery import DeliveryLoop, send_pending
from protege.harness import carry_out, execute
from protege.harness.cancels import CancelWatch
from protege.harness.listeners import EventDispatcher
from protege.harness.model import load_library
from protege.harness.runner import new_owner
from protege.models import Run
from protege.models.base import utcnow
from protege.queue import claim_next

if TYPE_CHECKING:
    from protege.installation import Installation

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]


def preload(installation: Installation) -> None:
    """Import what runs would otherwise import on first use: the model client, and the
    modules each tool on offer names in ``preload``. A serving process does it before it
    takes runs, so that no two runs' threads import one module at the same moment (one of
    them could see it half imported) and no first call stalls the runs' event loop."""
    load_library()
    for entry in installation.manifest.tools:
        for name in entry.tool_class.preload:
            try:
                importlib.import_module(name)
            except Exception as error:  # the tool fails when called, and says why
                logger.warning("tool %s: could not import %s: %s", entry.id, name, error)


def drain(installation: Installation, *, clock: Clock = utcnow) -> list[Run]:
    """Carry out queued runs (and runs whose worker died) in this thread until none is
    left, then send the mail they queued; returns the runs once the ``on_event`` listeners
    heard all their events."""
    done = []
    lease = installation.config.runs.lease_seconds
    with EventDispatcher(installation) as events:
        while (claimed := claim_next(new_owner(), clock(), lease)) is not None:
            run, claim = claimed
            done.append(execute(run, installation, claim=claim, listeners=events))
    send_pending(installation.config, clock=clock, transport=installation.transport)
    return done


class Workers:
    """Carries out queued runs in this process, many at once, until stopped.

    ``on_finished`` is called (on the workers' thread) with each run that ended. ``clock``
    tells the time leases are measured in. The runs' events go to the ``on_event``
    listeners through ``events``, a dispatcher started and closed with the workers.
    """

    def __init__(
        self,
        installation: Installation,
        *,
        max_concurrent_runs: int | None = None,
        poll_interval: float | None = None,
        on_finished: Callable[[Run], None] | None = None,
        clock: Clock = utcnow,
    ) -> None:
        settings = installation.config.serve
        self.installation = installation
        self.width = max_concurrent_runs or settings.max_concurrent_runs
        self.poll_interval = poll_interval or settings.poll_interval
        self.on_finished = on_finished
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._grace: float = settings.shutdown_seconds
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="protege-workers", daemon=True)
        self.events = EventDispatcher(installation)

    def start(self) -> Workers:
        """Start carrying out runs (returns once the workers are ready)."""
        self.events.start()
        self._thread.start()
        self._ready.wait()
        return self

    def wake(self) -> None:
        """Look for queued runs now, not at the next poll (safe from any thread)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # stopped already
                loop.call_soon_threadsafe(wake.set)

    def stop(self, grace: float | None = None) -> None:
        """Take no more runs; give those in flight ``grace`` seconds (default
        ``[serve] shutdown_seconds``) to end, hand the others back to the queue, finish the
        mail being sent, let the event listeners hear the runs' last events, and return."""
        if grace is not None:
            self._grace = grace
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        try:
            self._thread.join()
        finally:
            self.events.close()

    def _main(self) -> None:
        try:
            with self.installation.activated():
                asyncio.run(self._serve())
        finally:
            self._ready.set()  # a failure to start must not leave start() waiting

    async def _serve(self) -> None:
        config = self.installation.config
        self._loop = asyncio.get_running_loop()
        self._wake, self._stopping = asyncio.Event(), asyncio.Event()
        io = ThreadPoolExecutor(
            config.serve.db_threads, thread_name_prefix="protege-db", initializer=hand_over()
        )
        mail_io = ThreadPoolExecutor(
            config.serve.max_concurrent_deliveries,
            thread_name_prefix="protege-delivery",
            initializer=hand_over(),
        )
        await self._loop.run_in_executor(io, preload, self.installation)
        delivery = DeliveryLoop(
            config, mail_io, clock=self.clock, transport=self.installation.transport
        )
        delivering = asyncio.create_task(delivery.run())
        in_flight: set[asyncio.Task] = set()
        self._ready.set()
        try:
            await self._take_runs(io, in_flight, delivery)
            if in_flight:
                _, left = await asyncio.wait(in_flight, timeout=self._grace)
                for task in left:
                    task.cancel()  # carry_out hands them back: self._stopping is set
                if left:
                    await asyncio.wait(left)
        finally:
            delivery.stop()
            await delivering
            io.shutdown(wait=True)
            mail_io.shutdown(wait=True)
            close_idle_connections()  # those tool calls put down

    async def _take_runs(
        self, io: ThreadPoolExecutor, in_flight: set[asyncio.Task], delivery: DeliveryLoop
    ) -> None:
        loop = asyncio.get_running_loop()
        lease = self.installation.config.runs.lease_seconds
        cancels = CancelWatch(self.installation.config.runs.cancel_check_seconds, io)
        wake, stopping = self._wake, self._stopping
        if wake is None or stopping is None:
            raise RuntimeError("the workers' loop is not running")
        busy, looked_at = False, -math.inf  # a claim just found a run; last full look
        while not stopping.is_set():
            if len(in_flight) >= self.width:
                await _first(in_flight, stopping)
                continue
            # While runs keep coming, claim straight away; look at everything (runs whose
            # worker died included) when idle, and at least once a poll interval.
            full = not busy or time.monotonic() - looked_at >= self.poll_interval
            if full:
                looked_at = time.monotonic()
            claiming = functools.partial(
                claim_next, new_owner(), self.clock(), lease, look=full, expired=full
            )
            try:
                claimed = await loop.run_in_executor(io, claiming)
            except Exception:
                logger.exception("could not look for queued runs")
                claimed = None
            busy = claimed is not None
            if claimed is None and not full:
                continue  # the queue is empty: look at everything before waiting
            if claimed is None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_either(wake, stopping), self.poll_interval)
                continue
            run, claim = claimed
            task = asyncio.create_task(
                carry_out(
                    run,
                    claim,
                    self.installation,
                    io=io,
                    clock=self.clock,
                    stopping=stopping,
                    cancels=cancels,
                    listeners=self.events,
                )
            )
            in_flight.add(task)
            task.add_done_callback(lambda done: self._ended(done, in_flight, delivery))

    def _ended(
        self, task: asyncio.Task, in_flight: set[asyncio.Task], delivery: DeliveryLoop
    ) -> None:
        in_flight.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            logger.error("a run ended with an error protege did not record: %r", error)
            return
        run = task.result()
        if run.status in ("queued", "running"):
            return  # handed back, or taken over by another worker
        delivery.wake()
        if self.on_finished is not None:
            try:
                self.on_finished(run)
            except Exception:
                logger.exception("on_finished failed for run %s", run.id)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.create_task(first.wait()), asyncio.create_task(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _first(in_flight: set[asyncio.Task], stopping: asyncio.Event) -> None:
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({*in_flight, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
