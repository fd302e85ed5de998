"""Workers: threads that take queued runs and carry them out, one at a time each."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from protege.db import database
from protege.harness import abandon, execute
from protege.installation import Installation
from protege.models import Run
from protege.plugins import error_line
from protege.queue import claim_next

logger = logging.getLogger(__name__)


def drain(installation: Installation) -> list[Run]:
    """Carry out queued runs in this thread until none is left; returns them."""
    done = []
    while (run := claim_next()) is not None:
        done.append(execute(run, installation))
    return done


class Workers:
    """A small pool of worker threads polling the run queue (safe beside other pools)."""

    def __init__(
        self,
        installation: Installation,
        count: int,
        poll_interval: float = 0.5,
        on_finished: Callable[[Run], None] | None = None,
    ) -> None:
        self.installation = installation
        self.on_finished = on_finished
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"protege-worker-{n}", daemon=True)
            for n in range(count)
        ]

    def start(self) -> Workers:
        """Start the threads."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Let each thread finish its current run, then stop."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                run = None
                try:
                    run = claim_next()
                    if run is None:
                        self._stop.wait(self.poll_interval)  # idle: look again shortly
                        continue
                    finished = execute(run, self.installation)
                    logger.info("run %s %s", finished.id, finished.status)
                    if self.on_finished is not None:
                        self.on_finished(finished)
                except BaseException as error:  # nothing may stop a worker but stop()
                    logger.exception("worker failed; retrying")
                    if run is not None:
                        with contextlib.suppress(Exception):  # the database may be what failed
                            abandon(run, f"the worker failed: {error_line(error)}")
                    self._stop.wait(self.poll_interval)
        finally:
            database.close()
