"""Operators' cancels, seen by the runs in flight within a second.

A run's lease is renewed only every third of ``lease_seconds``; a cancel should not wait
that long. One ``CancelWatch`` per event loop that carries runs (a serving process has one)
reads the cancel flags of all its runs in flight in one query, every
``[runs] cancel_check_seconds``, and raises each cancelled run's ``Cancellation``: the flag
its tools read (``context.cancelled``) and the event its model call races against.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from concurrent.futures import Executor

from protege.db import database
from protege.models import Run

logger = logging.getLogger(__name__)


class Cancellation:
    """One run's cancel, as its tools see it (a ``threading.Event``, in any thread) and as
    the run itself sees it while it waits on the model (an ``asyncio.Event``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.flag = threading.Event()
        self.stopped = asyncio.Event()
        self._loop = loop

    def set(self) -> None:
        """Mark the run cancelled (safe from any thread)."""
        self.flag.set()
        with contextlib.suppress(RuntimeError):  # the run's loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self.stopped.set)

    def is_set(self) -> bool:
        """Whether the run was cancelled."""
        return self.flag.is_set()


class CancelWatch:
    """Looks, every ``interval`` seconds, for cancels of the runs it watches, all in one
    query (in ``io``, or on the loop when there is none); it looks only while it watches
    a run."""

    def __init__(self, interval: float, io: Executor | None = None) -> None:
        self.interval = interval
        self.io = io
        self._runs: dict[int, list[Cancellation]] = {}
        self._task: asyncio.Task | None = None

    def watch(self, run_id: int, cancellation: Cancellation) -> None:
        """Raise ``cancellation`` once an operator cancels run ``run_id`` (call on the
        running loop)."""
        self._runs.setdefault(run_id, []).append(cancellation)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._look())

    def forget(self, run_id: int, cancellation: Cancellation) -> None:
        """Stop watching for ``cancellation`` (the run's attempt ended)."""
        watched = self._runs.get(run_id, [])
        if cancellation in watched:
            watched.remove(cancellation)
        if not watched:
            self._runs.pop(run_id, None)
        if not self._runs and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _look(self) -> None:
        loop = asyncio.get_running_loop()
        while self._runs:
            await asyncio.sleep(self.interval)
            ids = sorted(self._runs)
            try:
                if self.io is None:
                    cancelled = _cancelled_among(ids)
                else:
                    cancelled = await loop.run_in_executor(self.io, _cancelled_among, ids)
            except Exception:  # the database may be down for a moment: look again
                logger.warning("could not look for cancelled runs", exc_info=True)
                continue
            for run_id in cancelled:
                for cancellation in self._runs.get(run_id, []):
                    cancellation.set()


def _cancelled_among(run_ids: list[int]) -> list[int]:
    try:
        return Run.cancelled_among(run_ids)
    except BaseException:
        # A broken connection stays broken for this pool thread: the next call opens anew.
        if not database.in_transaction():
            database.close()
        raise
