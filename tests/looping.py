"""Waiting on an event loop for what a test cannot be woken by, with a bound on a hang."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from tests.cli.serving import patience

TURNS = 8  # turns of the loop a cancel is tried after: covers each step of a wake's chain


async def until(condition: Callable[[], bool], seconds: float = 30) -> None:
    """Wait for ``condition()`` to hold (a failure if it does not within ``seconds``,
    stretched by how loaded the machine is), looking again as soon as it does not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience(seconds)
    while not condition():
        assert loop.time() < deadline, "it never happened"
        await asyncio.sleep(0.01)  # a look at a state nothing signals, not a synchronisation


async def ends(task: asyncio.Task, seconds: float = 30) -> bool:
    """Whether ``task`` ends within ``seconds`` (a bound on a hang, not a speed test)."""
    done, _ = await asyncio.wait({task}, timeout=patience(seconds))
    return task in done


async def turns(count: int) -> None:
    """Let the loop run ``count`` turns (each ready callback once per turn)."""
    for _ in range(count):
        await asyncio.sleep(0)


def protege_threads():
    """protege's threads still alive; the tool threads aside, a pool of the process's kept
    idle between calls (and holding no connection), not the server's."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith("protege-") and t.name != "protege-tool"
    )
