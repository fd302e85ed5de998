"""Workers: what takes queued runs out of the database and carries them out.

``Workers`` is what ``protege serve`` runs: on one event loop (the host's, or a thread's
own), up to ``max_concurrent_runs`` runs at once (a run spends its life waiting on the
model), with database work in a bounded thread pool and the delivery loop beside the runs. Several
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
from protege.limits.circuit import Breaker, Gate
from protege.limits.windows import naive_utc
from protege.models import Run
from protege.models.base import utcnow
from protege.models.limits import CLOSED
from protege.queue import claim_next

if TYPE_CHECKING:  # only named: the installation may import the workers
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
    left, or the model endpoint's circuit is open (its runs stay queued for a later
    drain), then send the mail they queued; returns the runs once the ``on_event``
    listeners heard all their events. ``clock`` tells the time of leases and the circuit."""
    done = []
    lease = installation.config.runs.lease_seconds
    with installation.activated(), EventDispatcher(installation) as events:
        limits = installation.config.limits
        breaker = Breaker.of(installation.config, clock=clock)
        while True:
            breaker.refresh()
            gate = breaker.gate()
            if not gate.take:
                break
            claimed = claim_next(new_owner(), clock(), lease, limits=limits)
            if claimed is None:
                if gate.probe:
                    breaker.probe_unused()
                break
            run, claim = claimed
            done.append(
                execute(
                    run, installation, claim=claim, listeners=events, clock=clock, breaker=breaker
                )
            )
        send_pending(installation.config, clock=clock, transport=installation.transport)
    return done


class Workers:
    """Carries out queued runs in this process, many at once, until stopped.

    On the caller's event loop (``await workers.serve()``, as ``protege.serving`` does) or
    on a thread of its own (``start()``, then ``stop()``). ``on_finished`` is called (on
    the workers' loop) with each run that ended. ``clock`` tells the time leases are
    measured in. The runs' events go to the ``on_event`` listeners through ``events``, a
    dispatcher started and closed with the workers.

    While the model endpoint's circuit is open (``protege.limits.circuit``), they take no
    runs: they wait until it may be tried again (or a wake, or the next poll, which looks
    whether another process closed it), then one of them tries one run.
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
        self.delivery: DeliveryLoop | None = None
        """The delivery loop beside the runs, once ``serve`` started it."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_asked = False
        self._grace: float = settings.shutdown_seconds
        self._ready = threading.Event()
        self._served = False
        self._waiting = False
        self._thread: threading.Thread | None = None
        self.events = EventDispatcher(installation)
        self.breaker = Breaker.of(installation.config, clock=clock)
        """The model endpoint's circuit, as these workers and their runs see it."""
        self._paused = False

    def start(self) -> Workers:
        """Start carrying out runs on a thread of their own (returns once they are ready)."""
        self._thread = threading.Thread(target=self._main, name="protege-workers", daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    @property
    def ready(self) -> bool:
        """Whether the workers take runs (they have loaded what runs use), or have ended."""
        return self._ready.is_set()

    @property
    def waiting(self) -> bool:
        """Whether the workers wait for a wake or the next poll (no queued run found)."""
        return self._waiting

    @property
    def paused(self) -> bool:
        """Whether the workers take no runs because the model endpoint's circuit is open."""
        return self._paused

    def wake(self) -> None:
        """Look for queued runs now, not at the next poll (safe from any thread)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # stopped already
                loop.call_soon_threadsafe(wake.set)

    def stop_soon(self, grace: float | None = None) -> None:
        """Ask ``serve`` to end (safe from any thread, also before it began): take no more
        runs, give those in flight ``grace`` seconds (default ``[serve]
        shutdown_seconds``), then hand the others back to the queue."""
        if grace is not None:
            self._grace = grace
        self._stop_asked = True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                loop.call_soon_threadsafe(stopping.set)

    def stop(self, grace: float | None = None) -> None:
        """End the thread ``start`` began: ``stop_soon(grace)``, then wait until the runs
        ended or went back to the queue, the mail being sent is sent and the event
        listeners heard the runs' last events."""
        self.stop_soon(grace)
        if self._thread is not None:
            self._thread.join()

    def _main(self) -> None:
        try:
            asyncio.run(self.serve())
        finally:
            self._ready.set()  # a failure to start must not leave start() waiting

    async def serve(self, *, ready: Callable[[], None] | None = None) -> None:
        """Carry out runs, and send their mail, on the running event loop (database work
        and tool calls in thread pools of their own) until ``stop_soon``; then wind down
        as ``stop`` says. ``ready`` is called (on the loop) once runs are taken.
        Cancelling the task running it winds down at once: the runs in flight go back to
        the queue, and the cancel is raised once they did."""
        if self._served:
            raise RuntimeError("these workers have served already: make new ones")
        self._served = True
        # The runs, their pools and listeners work on this installation's database.
        with self.installation.activated():
            await self._serve(ready)

    async def _serve(self, ready: Callable[[], None] | None) -> None:
        config = self.installation.config
        loop = asyncio.get_running_loop()
        self._wake, self._stopping = asyncio.Event(), asyncio.Event()
        self._loop = loop
        if self._stop_asked:  # stop_soon came before the loop was known
            self._stopping.set()
        self.events.start()
        io = ThreadPoolExecutor(
            config.serve.db_threads, thread_name_prefix="protege-db", initializer=hand_over()
        )
        mail_io = ThreadPoolExecutor(
            config.serve.max_concurrent_deliveries,
            thread_name_prefix="protege-delivery",
            initializer=hand_over(),
        )
        delivering: asyncio.Task | None = None
        in_flight: set[asyncio.Task] = set()
        cancelled = False
        try:
            try:
                await loop.run_in_executor(io, preload, self.installation)
                self.delivery = DeliveryLoop(
                    config, mail_io, clock=self.clock, transport=self.installation.transport
                )
                delivering = asyncio.create_task(self.delivery.run(), name="protege-delivery")
                self._ready.set()
                if ready is not None:
                    ready()
                await self._take_runs(io, in_flight, self.delivery)
            except asyncio.CancelledError:
                cancelled = True
            self._stopping.set()  # a run cancelled now is handed back, not failed
            cancelled = await _settle(in_flight, 0 if cancelled else self._grace) or cancelled
            if delivering is not None and self.delivery is not None:
                cancelled = await _end_delivery(delivering, self.delivery, cancelled)
        finally:
            shutting = loop.run_in_executor(None, _shut_down, io, mail_io, cancelled)
            cancelled = await _through_cancels(shutting) or cancelled
            close_idle_connections()  # those tool calls put down
            closing = loop.run_in_executor(None, self.events.close)
            cancelled = await _through_cancels(closing) or cancelled
            self._ready.set()
        if cancelled:
            raise asyncio.CancelledError

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
            gate = await self._gate(io, full)
            if not gate.take:
                busy = False  # the next look is a full one, the circuit's state read again
                await self._paused_until(gate, wake, stopping)
                continue
            if self._paused:
                self._paused = False
                logger.warning("the model endpoint may answer again: runs are taken")
            claiming = functools.partial(
                claim_next,
                new_owner(),
                self.clock(),
                lease,
                look=full,
                expired=full,
                limits=self.installation.config.limits,
            )
            try:
                claimed = await loop.run_in_executor(io, claiming)
            except Exception:
                logger.exception("could not look for queued runs")
                claimed = None
            busy = claimed is not None
            if claimed is None and gate.probe:
                await self._probe_unused(io)
            if claimed is None and not full:
                continue  # the queue is empty: look at everything before waiting
            if claimed is None:
                wake.clear()
                self._waiting = True
                try:
                    await _either(wake, stopping, self.poll_interval)
                finally:
                    self._waiting = False
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
                    breaker=self.breaker,
                )
            )
            in_flight.add(task)
            task.add_done_callback(lambda done: self._ended(done, in_flight, delivery))

    async def _gate(self, io: ThreadPoolExecutor, full: bool) -> Gate:
        """May a run be taken now? The circuit's state is read again on each full look;
        while it is closed, nothing more is asked of the database."""
        loop, breaker = asyncio.get_running_loop(), self.breaker
        try:
            if full or breaker.seen is None:
                await loop.run_in_executor(io, breaker.refresh)
            if breaker.known().state == CLOSED:
                return Gate(take=True)
            return await loop.run_in_executor(io, breaker.gate)
        except Exception:  # fail closed: no run is taken until the circuit can be read
            logger.exception("could not read the model endpoint's circuit")
            return Gate(take=False)

    async def _probe_unused(self, io: ThreadPoolExecutor) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(io, self.breaker.probe_unused)
        except Exception:  # its deadline frees it anyway
            logger.exception("could not give back the model endpoint's probe")

    async def _paused_until(self, gate: Gate, wake: asyncio.Event, stopping: asyncio.Event) -> None:
        """Wait, the circuit open, until it may be tried (``gate.until``), a wake, a stop,
        or the next poll (another process may close it meanwhile)."""
        seconds = self.poll_interval
        if gate.until is not None:
            left = (gate.until - naive_utc(self.clock())).total_seconds()
            if left > 0:
                seconds = min(seconds, left)
        if not self._paused:
            logger.warning("the model endpoint's circuit is open: no runs are taken for now")
        wake.clear()
        self._paused = True
        await _either(wake, stopping, seconds)

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
        if self._wake is not None and (run.status == "queued" or self._paused):
            # Handed back (the model endpoint failed, say): the next look, at once, takes it
            # again, or finds the circuit open and waits. And the end of the run that tried
            # the endpoint (the probe) decides whether the others may go.
            self._wake.set()
        if run.status in ("queued", "running"):
            return  # handed back, or taken over by another worker
        delivery.wake()
        if self.on_finished is not None:
            try:
                self.on_finished(run)
            except Exception:
                logger.exception("on_finished failed for run %s", run.id)


async def _either(first: asyncio.Event, second: asyncio.Event, seconds: float) -> None:
    """Wait until either event is set or ``seconds`` have passed. Not ``asyncio.wait_for``:
    on Python 3.11 it returns, and swallows the cancel, when a cancel lands in the same
    turn of the loop as the wake; workers cancelled just after a wake then ran on."""
    waits = [asyncio.create_task(first.wait()), asyncio.create_task(second.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _first(in_flight: set[asyncio.Task], stopping: asyncio.Event) -> None:
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({*in_flight, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()


async def _through_cancels(future: asyncio.Future) -> bool:
    """Wait until ``future`` is done, cancels of the waiting task notwithstanding (a wind
    down half done would leave threads and connections behind); whether one came."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def _settle(tasks: set[asyncio.Task], grace: float) -> bool:
    """Give the runs ``grace`` seconds to end, then cancel the others (``carry_out`` hands
    them back, the workers stopping) and wait until they did; whether a cancel came
    meanwhile (it cuts the grace short)."""
    cancelled = False
    if tasks and grace > 0:
        try:
            await asyncio.wait(set(tasks), timeout=grace)
        except asyncio.CancelledError:
            cancelled = True
    left = {task for task in tasks if not task.done()}
    for task in left:
        task.cancel()
    for task in left:
        cancelled = await _through_cancels(task) or cancelled
    return cancelled


async def _end_delivery(task: asyncio.Task, delivery: DeliveryLoop, cancelled: bool) -> bool:
    """Let the delivery loop make its last pass (none when cancelled, or cancelled
    meanwhile) and end; whether a cancel came."""
    if cancelled:
        task.cancel()
    else:
        delivery.stop()
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
            task.cancel()
    if not task.cancelled() and task.exception() is not None:
        logger.error("the delivery loop failed: %r", task.exception())
    return cancelled


def _shut_down(io: ThreadPoolExecutor, mail_io: ThreadPoolExecutor, cancelled: bool) -> None:
    """Wait for the database and delivery threads to end (what was queued and not begun is
    dropped when the workers were cancelled)."""
    io.shutdown(wait=True, cancel_futures=cancelled)
    mail_io.shutdown(wait=True, cancel_futures=cancelled)
