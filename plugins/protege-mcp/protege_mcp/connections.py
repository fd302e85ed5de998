"""The live sessions of one manifest's MCP servers.

Tools run as ``async def use`` on a fresh event loop per call, in a worker thread, so a
session kept from one call to the next can only live on a loop of its own: ``Connections``
keeps one, running in a daemon thread, and holds there at most one session per server,
opened at the first call that needs it. Every call is submitted to that loop and awaited
from the caller's; cancelling the caller cancels the call.

A server that ends (its process exits, its connection drops, it floods or writes what is
not JSON-RPC) is opened again at the next call; a server that fails to start is tried
again only after a wait that doubles from 1 s to 60 s, and calls meanwhile fail at once
saying when. A call fails within its timeout whatever the server does, and a server that
answers nothing while its calls time out is ended (and opened again when next needed).

Nothing is shared between two ``Connections``; one that is closed, dropped or forgotten
(at the latest when the interpreter exits) ends every server process it started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types

from protege_mcp import calls
from protege_mcp.calls import MAX_TOOLS
from protege_mcp.errors import ServerUnavailable, one_line
from protege_mcp.sessions import Server
from protege_mcp.settings import ServerSettings

__all__ = ["MAX_TOOLS", "Connections", "ServerUnavailable"]

logger = logging.getLogger(__name__)

# Beyond a call's timeout, how long its caller waits for the private loop before giving
# up on it (the loop answers long before, unless something blocks it).
BACKSTOP_SECONDS = 5.0
# How long close() waits for the servers to end before killing what is left.
CLOSE_SECONDS = 10.0


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _kill_groups(groups: set[int]) -> None:
    for pgid in list(groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        groups.discard(pgid)


def _abandon(loop: asyncio.AbstractEventLoop, groups: set[int]) -> None:
    """For a ``Connections`` dropped or forgotten: kill its servers, stop its loop."""
    _kill_groups(groups)
    with contextlib.suppress(RuntimeError):  # the loop is closed already
        loop.call_soon_threadsafe(loop.stop)


class Connections:
    """The live sessions of one manifest's MCP servers: at most one per server, opened at
    the first call that needs it and kept, on a private event loop in a daemon thread.

    ``servers`` are the configured servers by name; ``environ`` (``os.environ`` when
    None) is read each time a server is opened, for the variables its settings name.
    ``clock`` (seconds, monotonic) times the waits before a server that failed to start
    is tried again. ``close`` ends everything; so does dropping the object, or the
    interpreter's exit.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerSettings],
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._groups: set[int] = set()
        self._servers = {
            name: Server(name, settings, environ, self._groups, clock)
            for name, settings in servers.items()
        }
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"Connections({sorted(self._servers)!r})"

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise ServerUnavailable("the MCP connections are closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_run_loop, args=(loop,), name="protege-mcp", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                self._finalizer = weakref.finalize(self, _abandon, loop, self._groups)
            return self._loop

    def _server(self, name: str) -> Server:
        found = self._servers.get(name)
        if found is None:
            raise ServerUnavailable(one_line(f"no MCP server named {name!r} is configured"))
        return found

    def list_tools(self, server: str, *, timeout: float) -> list[mcp_types.Tool]:
        """Every tool ``server`` lists (all pages; at most ``MAX_TOOLS``, 1,000: a server
        listing more fails), in a session of its own opened and ended for the listing, so
        that nothing is left running. Blocking; fails (``ServerUnavailable``,
        ``TimeoutError``) within about ``timeout``, the server's start-up included. The
        server's allow-list (``ServerSettings.allows``) is not applied here."""
        state = self._server(server)
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(calls.list_tools(state, timeout), loop)
        try:
            return future.result(timeout + BACKSTOP_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"MCP server {server}: its tools were not listed within {timeout:g} s"
            ) from None

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], *, timeout: float
    ) -> mcp_types.CallToolResult:
        """Call ``tool`` of ``server`` with ``arguments``, from any thread and event loop.

        Fails within ``timeout`` whatever the server does: ``TimeoutError`` when it did
        not answer, ``ServerUnavailable`` when it cannot be reached, started, or ended
        during the call. An error the server answered with (an unknown tool, arguments it
        refuses, an answer that is not a valid result) is returned as a result with
        ``is_error`` set, since its words are the server's. Cancelling the caller cancels
        the call.
        """
        state = self._server(server)
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(
            calls.call_tool(state, tool, arguments, timeout), loop
        )
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(waiting, timeout + BACKSTOP_SECONDS)
        except TimeoutError:
            # Only when the private loop did not answer in time (it answers within
            # ``timeout``, unless something blocks it).
            future.cancel()
            raise TimeoutError(
                f"MCP server {server}: no answer from its tool {tool[:64]} within {timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            future.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller was cancelled
            # The call was cancelled on the private loop: close() stopped it.
            raise ServerUnavailable(
                f"MCP server {server}: the MCP connections were closed during the call"
            ) from None

    def is_open(self, server: str) -> bool:
        """Whether ``server`` has a session open now (one that has not ended)."""
        session = self._server(server).session
        return session is not None and not session.ended

    def close(self) -> None:
        """End every session and every server process, and stop the private loop's thread.
        Idempotent; calls made afterwards fail with ``ServerUnavailable``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("Connections.close() cannot be called from its own loop")
        future = asyncio.run_coroutine_threadsafe(_close_all(self._servers.values()), loop)
        with contextlib.suppress(Exception):
            future.result(CLOSE_SECONDS)
        _kill_groups(self._groups)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        if self._finalizer is not None:
            self._finalizer.detach()

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _close_all(servers: Any) -> None:
    """End every session of ``servers``, those still opening too, and wait for their
    owners to have ended the transports (the server processes) they hold."""
    owners: list[asyncio.Task[None]] = []
    for server in servers:
        server.session = None
        for task, session in list(server.owners.items()):
            session.close()
            owners.append(task)
    if owners:
        await asyncio.wait(owners, timeout=CLOSE_SECONDS)
