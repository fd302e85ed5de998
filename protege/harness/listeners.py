"""Handing runs' committed events to the plugins that listen (``on_event``), off the runs'
hot path: one dispatcher thread per application, fed by a bounded queue that a run never
waits on.

A run publishes each batch right after committing it; the dispatcher calls the hook through
pluggy for each event, in commit order (so ``tryfirst``, ``trylast`` and wrappers hold). A
listener that raises is logged by its plugin's name and the others still hear the event; one
slower than ``slow_seconds`` is logged by name; when the queue is full, events are dropped
(never waited for), counted, and the count logged.
"""

from __future__ import annotations

import collections
import contextvars
import datetime
import logging
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import attrs

from protege.harness.events import CommittedEvent
from protege.plugins import error_line, observing

logger = logging.getLogger("protege.events")

HOOK = "on_event"
CAPACITY = 10_000  # events waiting for the listeners before new ones are dropped
SLOW_SECONDS = 1.0  # a listener taking longer than this over one event is logged
CLOSE_SECONDS = 30.0  # how long closing waits for the listeners to hear what is queued


@attrs.frozen
class RunSnapshot:
    """A run as it stood when a batch of its events was committed: a copy made for
    listeners, which nothing else changes (the run's own record goes on changing)."""

    id: int
    agent: str
    agent_id: int
    kind: str
    status: str
    attempts: int
    correlation_id: str
    message_id: int | None
    responsibility_id: int | None
    error: str | None
    created_at: datetime.datetime | None
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None


def snapshot(run: Any, agent: str) -> RunSnapshot:
    """The listeners' copy of ``run`` (a ``Run`` record) now; ``agent`` is its agent's name."""
    return RunSnapshot(
        id=run.id,
        agent=agent,
        agent_id=run.agent_id,
        kind=run.kind,
        status=run.status,
        attempts=run.attempts,
        correlation_id=run.correlation_id,
        message_id=run.message_id,
        responsibility_id=run.responsibility_id,
        error=run.error,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


class EventDispatcher:
    """The thread that hands committed events to the ``on_event`` listeners of ``app``.

    ``start`` it with the workers and ``close`` it after them (or use it as a context
    manager): closing waits (up to ``CLOSE_SECONDS``) until the listeners heard everything
    published, so a command that carries out runs and exits lets them see every run whole.
    With no listener installed it starts no thread and ``listening`` is false.
    """

    def __init__(
        self,
        app: Any,
        *,
        capacity: int = CAPACITY,
        slow_seconds: float = SLOW_SECONDS,
        close_seconds: float = CLOSE_SECONDS,
    ) -> None:
        self.app = app
        self.capacity = capacity
        self.slow_seconds = slow_seconds
        self.close_seconds = close_seconds
        plugins = getattr(app, "plugins", None)
        self._hook = None if plugins is None else getattr(plugins.hook, HOOK)
        self._listening = False
        self._queue: collections.deque[tuple[RunSnapshot, CommittedEvent]] = collections.deque()
        self._changed = threading.Condition()
        self._published = 0
        self._handled = 0
        self._unreported = 0  # dropped since the count was last logged
        self.dropped = 0
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        """Whether any plugin implements ``on_event`` (checked when started)."""
        return self._listening

    def start(self) -> Self:
        """Start the dispatcher's thread, if anything listens."""
        self._listening = self._hook is not None and bool(self._hook.get_hookimpls())
        if self._listening and self._thread is None:
            # The listeners work where the runs do (the application's database).
            self._thread = threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._main,),
                name="protege-events",
                daemon=True,
            )
            self._thread.start()
        return self

    def publish(self, run: RunSnapshot, events: Sequence[CommittedEvent]) -> None:
        """Queue ``events``, just committed for ``run``, for the listeners; never waits.
        Events that do not fit (the listeners are that far behind), or come after the
        dispatcher was closed, are dropped and counted."""
        dropped_now = 0
        with self._changed:
            for event in events:
                if self._closing or self._thread is None or len(self._queue) >= self.capacity:
                    dropped_now += 1
                else:
                    self._queue.append((run, event))
                    self._published += 1
            first_drop = dropped_now and not self._unreported
            self.dropped += dropped_now
            self._unreported += dropped_now
            self._changed.notify_all()
        if first_drop:  # once per run of drops; the dispatcher logs how many in the end
            logger.warning(
                "event listeners are %d events behind: dropping events of run %s",
                self.capacity,
                run.id,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the listeners heard every event published so far; whether they did
        within ``timeout`` seconds."""
        with self._changed:
            target = self._published
            return self._changed.wait_for(lambda: self._handled >= target, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Let the listeners hear what is queued (waiting up to ``timeout``, default
        ``close_seconds``), then stop the thread. Events published afterwards are dropped."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(self.close_seconds if timeout is None else timeout)
            if thread.is_alive():
                with self._changed:
                    waiting = len(self._queue)
                logger.warning(
                    "event listeners still busy after %s s; %d events not yet heard",
                    self.close_seconds if timeout is None else timeout,
                    waiting,
                )
        self._report_dropped()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _main(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return
                run, event = self._queue.popleft()
            self._report_dropped()
            try:
                self._deliver(run, event)
            finally:
                with self._changed:
                    self._handled += 1
                    self._changed.notify_all()

    def _report_dropped(self) -> None:
        with self._changed:
            count, self._unreported = self._unreported, 0
        if count:
            logger.warning(
                "%d events were dropped: the event listeners fell behind (%d dropped in all)",
                count,
                self.dropped,
            )

    def _deliver(self, run: RunSnapshot, event: CommittedEvent) -> None:
        if self._hook is None:
            return

        def observe(plugin: Any, took: float, error: BaseException | None) -> None:
            if error is not None:
                logger.error(
                    "on_event of plugin %s failed on event %s of run %s: %s",
                    plugin.name,
                    event.seq,
                    run.id,
                    error_line(error),
                    exc_info=error,
                )
            if took > self.slow_seconds:
                logger.warning(
                    "on_event of plugin %s took %.1f s over event %s of run %s (more than "
                    "%s s): the listeners after it waited",
                    plugin.name,
                    took,
                    event.seq,
                    run.id,
                    self.slow_seconds,
                )

        try:
            with observing(observe):
                self._hook(app=self.app, run=run, event=event)
        except BaseException as error:  # a wrapper that raised past the guard
            logger.error(
                "on_event failed on event %s of run %s: %s",
                event.seq,
                run.id,
                error_line(error),
                exc_info=error,
            )
