"""Stopping a long-running command (``serve``, ``scheduler``) on SIGINT or SIGTERM.

The kernel hands a process's signal to any of its threads. Python runs its handler only in
the main thread, and only once that thread executes Python again; a main thread blocked
for good (``Event.wait()`` with no timeout) never does when the signal went to another
thread, and the command ignores it (a ``serve`` under load once ran on for half an hour
after its SIGTERM). So the main thread waits in slices, and the handler only records the
signal: it takes no lock the interrupted main thread might be holding.
"""

from __future__ import annotations

import signal
import threading

SLICE = 0.25  # seconds between the main thread's looks at the signals it was sent


class Stopper:
    """Records SIGINT and SIGTERM once installed; ``wait`` returns when one came, or when
    ``stop`` was called (by a thread that decided the command should end)."""

    def __init__(self) -> None:
        self._signals: list[int] = []
        self._asked = threading.Event()

    def install(self) -> Stopper:
        """Take over SIGINT and SIGTERM (in the main thread)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._record)
        return self

    def _record(self, signum: int, frame: object) -> None:
        self._signals.append(signum)  # no lock: the main thread may be inside one

    def stop(self) -> None:
        """Ask the command to end, from any thread."""
        self._asked.set()

    @property
    def stopping(self) -> bool:
        """Whether a signal came or ``stop`` was called."""
        return bool(self._signals) or self._asked.is_set()

    def wait(self) -> None:
        """Block the main thread until a signal comes or ``stop`` is called."""
        while not self.stopping:
            self._asked.wait(SLICE)
