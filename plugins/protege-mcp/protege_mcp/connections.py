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
import math
import os
import re
import signal
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
import httpx2
import mcp_types
import pydantic
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError

import protege
from protege_mcp.http import ENVELOPE_BYTES, HttpTransport, ResponseTooLarge
from protege_mcp.settings import ServerSettings, shown_url
from protege_mcp.stdio import StdioTransport, find_command

logger = logging.getLogger(__name__)

# A listing is bounded: at most this many tools (and pages) from one server.
MAX_TOOLS = 1_000
# One message of a listing may be this large, whatever max_result_bytes says.
LIST_MESSAGE_BYTES = 16 * 1024 * 1024
# The wait before a server that failed to start is tried again: doubled at each failure.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
# Beyond a call's timeout, how long its caller waits for the private loop before giving
# up on it (the loop answers long before, unless something blocks it).
BACKSTOP_SECONDS = 5.0
# How long close() waits for the servers to end before killing what is left.
CLOSE_SECONDS = 10.0
MAX_SHOWN_CHARS = 300
MAX_REFUSAL_CHARS = 1_000
# What the SDK's HTTP transport says when the server answers 404 to a session it lost.
SESSION_GONE = "Session terminated"


class ServerUnavailable(Exception):
    """A configured MCP server could not serve a call or a listing: it is not configured,
    could not be started or reached, ended, flooded, or is being waited for after failing.
    The message is one line written by protege (never the server's own words), safe to show
    the model and operators."""


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    flat = re.sub(r"https?://[^\s\"'<>]+", lambda found: shown_url(found.group()), flat)
    return flat if len(flat) <= MAX_SHOWN_CHARS else flat[: MAX_SHOWN_CHARS - 1] + "…"


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside ``error``'s groups (``error`` itself when it is no group)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


class _Session:
    """One open (or opening) session of a server, owned by a task of the private loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: Client | None = None
        self.transport: StdioTransport | HttpTransport | None = None
        self.closing = anyio.Event()
        self.opened = anyio.Event()
        self.done = anyio.Event()
        self.scope: anyio.CancelScope | None = None
        self.error: BaseException | None = None
        self.lost: str | None = None  # why it ended on its own
        self.in_flight = 0
        self.suspect = False  # a call timed out and nothing was answered since

    @property
    def ended(self) -> bool:
        return self.closing.is_set() or self.done.is_set()

    def close(self, why: str | None = None) -> None:
        """End the session (its owner leaves the client, which stops the transport)."""
        if why is not None and self.lost is None:
            self.lost = why
        self.closing.set()
        if not self.opened.is_set() and self.scope is not None:
            self.scope.cancel()

    def reason(self) -> str:
        """Why the session ended, as protege says it."""
        transport = self.transport
        if self.lost is not None:
            return self.lost
        failure = getattr(transport, "failure", None)
        if failure:
            return str(failure)
        code = getattr(transport, "returncode", None)
        if code is not None:
            return f"its process exited (status {code})"
        if isinstance(transport, StdioTransport):
            return "its process ended"
        return "the connection closed"


class _WatchedRead:
    """The session's read stream, telling its session when it ends."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self.inner = inner
        self.on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.on_end()
            raise

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Watched:
    """A transport whose read stream tells ``on_end`` when the server's side is gone."""

    def __init__(self, inner: StdioTransport | HttpTransport, on_end: Callable[[], None]) -> None:
        self.inner = inner
        self.on_end = on_end

    async def __aenter__(self) -> TransportStreams:
        read_stream, write_stream = await self.inner.__aenter__()
        return _WatchedRead(read_stream, self.on_end), write_stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self.inner.__aexit__(exc_type, exc, traceback)


class _Server:
    """What one configured server needs to be opened, and its state between calls. It
    holds nothing of its ``Connections``, so that a dropped one can be collected."""

    def __init__(
        self,
        name: str,
        settings: ServerSettings,
        environ: Mapping[str, str] | None,
        groups: set[int],
        clock: Callable[[], float],
    ) -> None:
        self.name = name
        self.settings = settings
        self.environ = environ
        self.groups = groups
        self.clock = clock
        self.session: _Session | None = None
        self.opening: asyncio.Task[_Session] | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.last_error = ""
        # Every session not yet ended, by the task owning it (so none is collected running).
        self.owners: dict[asyncio.Task[None], _Session] = {}

    def unavailable(self, what: str) -> ServerUnavailable:
        return ServerUnavailable(_one_line(f"MCP server {self.name}: {what}"))

    def transport(self, max_message_bytes: int) -> StdioTransport | HttpTransport:
        """A new transport to the server, its variables read from the environment now."""
        environ = os.environ if self.environ is None else self.environ
        settings = self.settings
        if settings.command is not None:
            env = {name: self._variable(environ, name, "env") for name in settings.env}
            try:
                command = find_command(settings.command, environ)
            except FileNotFoundError as error:
                raise self.unavailable(str(error)) from None
            return StdioTransport(
                command,
                settings.args,
                env=env,
                cwd=settings.cwd,
                max_message_bytes=max_message_bytes,
                name=self.name,
                on_spawn=self.groups.add,
                on_exit=self.groups.discard,
            )
        assert settings.url is not None
        headers = {
            header: self._variable(environ, variable, f"header_env.{header}")
            for header, variable in settings.header_env.items()
        }
        try:
            return HttpTransport(
                settings.url,
                headers=headers,
                ca_file=settings.ca_file,
                max_response_bytes=max_message_bytes,
                timeout=settings.timeout_seconds,
                name=self.name,
            )
        except (OSError, ssl.SSLError) as error:
            raise self.unavailable(
                f"its ca_file {settings.ca_file} cannot be used "
                f"({getattr(error, 'strerror', None) or type(error).__name__})"
            ) from None

    def _variable(self, environ: Mapping[str, str], name: str, where: str) -> str:
        value = environ.get(name)
        if value is None:
            raise self.unavailable(f"the environment variable {name} (named in {where}) is not set")
        return value

    def describe(self, error: BaseException, transport: object, seconds: float) -> str:
        """What went wrong opening or using the server, in protege's words: never the
        server's own text, a header's value or a URL's secrets."""
        leaves = _leaves(error)
        for leaf in leaves:
            if isinstance(leaf, ServerUnavailable):
                return str(leaf).removeprefix(f"MCP server {self.name}: ")
        failure = getattr(transport, "failure", None)
        if failure:
            return str(failure)
        code = getattr(transport, "returncode", None)
        if code is not None:
            return f"it exited at start-up (status {code}; its stderr is in the log)"
        for leaf in leaves:
            if isinstance(leaf, TimeoutError | anyio.get_cancelled_exc_class()):
                return f"it did not complete its start-up within {seconds:g} s"
            if isinstance(leaf, ResponseTooLarge):
                return str(leaf)
            if isinstance(leaf, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(leaf):
                return f"its TLS certificate could not be verified ({_ssl_reason(leaf)})"
            if isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout):
                return f"it could not be reached ({_ssl_reason(leaf)})"
            if isinstance(leaf, httpx2.TransportError):
                return f"the connection failed ({type(leaf).__name__})"
            if isinstance(leaf, OSError):
                where = f": {leaf.filename}" if leaf.filename else ""
                return f"it could not be started ({leaf.strerror or type(leaf).__name__}{where})"
            if isinstance(leaf, MCPError):
                if leaf.code == mcp_types.CONNECTION_CLOSED:
                    return "it closed the connection at start-up (its stderr is in the log)"
                return f"it refused to start a session (error {leaf.code})"
            if isinstance(leaf, pydantic.ValidationError):
                return "it answered with messages that are not MCP"
        first = leaves[0]
        logger.warning("MCP server %s failed", self.name, exc_info=first)
        return f"it failed ({type(first).__name__})"

    def failed_to_open(self, why: str) -> None:
        self.failures += 1
        wait = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (self.failures - 1))
        self.retry_at = self.clock() + wait
        self.last_error = why
        logger.warning(
            "MCP server %s could not be opened: %s; tried again in %g s at the earliest",
            self.name,
            why,
            wait,
        )


def _ssl_reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    found = re.search(r"certificate verify failed: ([^(]+)", text)
    if found:
        return found.group(1).strip()
    return _one_line(text)[:120]


async def _own(server: _Server, session: _Session, max_message_bytes: int) -> None:
    """Open ``session`` and keep it until it is closed or its server's side ends; on the
    way out the client, and with it the transport (the server's process), is ended."""
    timeout = server.settings.timeout_seconds

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            # The server wrote what is not JSON-RPC: no later answer can be trusted to
            # belong to its request, so the session ends and what is in flight fails.
            logger.warning(
                "MCP server %s sent a malformed message: ending its session", server.name
            )
            session.close("it wrote a message that is not JSON-RPC, so its session was ended")
        else:
            await anyio.lowlevel.checkpoint()

    try:
        transport = server.transport(max_message_bytes)
        session.transport = transport
        client = Client(
            _Watched(transport, lambda: session.close()),
            cache=None,
            message_handler=on_message,
            client_info=mcp_types.Implementation(name="protege", version=protege.__version__),
        )
        with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
            session.scope = scope
            async with client:
                scope.deadline = math.inf
                session.client = client
                session.opened.set()
                await session.closing.wait()
        if scope.cancelled_caught and not session.opened.is_set():
            session.error = TimeoutError()
    except BaseException as error:  # reported to whoever waits on the open
        session.error = error
        if not isinstance(error, Exception):
            raise
    finally:
        session.done.set()
        if session.opened.is_set():
            logger.info("MCP server %s: session ended (%s)", server.name, session.reason())


async def _open(server: _Server) -> _Session:
    """A new session of ``server``, or ``ServerUnavailable`` saying why there is none."""
    session = _Session(server.name)
    max_bytes = server.settings.max_result_bytes + ENVELOPE_BYTES
    task = asyncio.get_running_loop().create_task(_own(server, session, max_bytes))
    server.owners[task] = session
    task.add_done_callback(lambda done: server.owners.pop(done, None))
    async with anyio.create_task_group() as group:

        async def first_of(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        group.start_soon(first_of, session.opened)
        group.start_soon(first_of, session.done)
    if session.opened.is_set() and not session.done.is_set():
        server.failures = 0
        logger.info("MCP server %s: session opened", server.name)
        return session
    why = server.describe(
        session.error or ConnectionError(), session.transport, server.settings.timeout_seconds
    )
    server.failed_to_open(why)
    raise server.unavailable(why)


async def _session_of(server: _Server) -> _Session:
    """The server's open session: the kept one, or one opened now (shared with any other
    call waiting for it), unless the server is being waited for after failing."""
    session = server.session
    if session is not None and not session.ended:
        return session
    if session is not None:
        server.session = None
        session.close()
    if server.opening is None:
        now = server.clock()
        if server.failures and now < server.retry_at:
            raise server.unavailable(
                f"{server.last_error}; it will be tried again in "
                f"{math.ceil(server.retry_at - now)} s"
            )
        server.opening = asyncio.get_running_loop().create_task(_open(server))
        server.opening.add_done_callback(lambda task: _opened(server, task))
    return await asyncio.shield(server.opening)


def _opened(server: _Server, task: asyncio.Task[_Session]) -> None:
    server.opening = None
    if not task.cancelled() and task.exception() is None:
        server.session = task.result()


def _retire(server: _Server, session: _Session, why: str) -> None:
    if server.session is session:
        server.session = None
    session.close(why)


def _refused(text: str) -> mcp_types.CallToolResult:
    """A failed call as a result, carrying words that may be the server's own (so that they
    reach the model only as the untrusted content of a result)."""
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], is_error=True)


async def _call(
    server: _Server, tool: str, arguments: dict[str, Any], timeout: float
) -> mcp_types.CallToolResult:
    opening = True
    try:
        with anyio.fail_after(timeout):
            for _attempt in range(2):
                session = await _session_of(server)
                opening = False
                result = await _call_in(server, session, tool, arguments)
                if result is not None:
                    return result
                opening = True  # the server had lost the session: once more, on a new one
            raise server.unavailable("it lost the sessions opened for the call, twice")
    except TimeoutError:
        if opening:
            raise TimeoutError(
                f"MCP server {server.name}: not ready to answer within {timeout:g} s "
                "(its session was still opening)"
            ) from None
        raise TimeoutError(
            f"MCP server {server.name}: no answer from its tool {tool[:64]} within {timeout:g} s"
        ) from None


async def _call_in(
    server: _Server, session: _Session, tool: str, arguments: dict[str, Any]
) -> mcp_types.CallToolResult | None:
    """The call made in ``session``; None when the server no longer knew the session
    (an HTTP server that restarted), which is then ended, the call not having been made."""
    assert session.client is not None
    session.in_flight += 1
    try:
        try:
            result = await session.client.call_tool(tool, arguments)
        except MCPError as error:
            if error.code == mcp_types.CONNECTION_CLOSED or session.ended:
                why = session.reason()
                _retire(server, session, why)
                raise server.unavailable(f"it ended during the call: {why}") from None
            session.suspect = False
            if error.code == mcp_types.INVALID_REQUEST and error.error.message == SESSION_GONE:
                _retire(server, session, "the server no longer knew its session")
                return None
            return _refused(
                f"the server did not complete the call (error {error.code}): "
                f"{error.error.message[:MAX_REFUSAL_CHARS]}"
            )
        except (pydantic.ValidationError, RuntimeError) as error:
            if session.ended:
                raise server.unavailable(f"it ended during the call: {session.reason()}") from None
            session.suspect = False
            what = (
                "its answer is not a valid tool result"
                if isinstance(error, pydantic.ValidationError)
                else str(error)[:MAX_REFUSAL_CHARS]
            )
            return _refused(f"the server's answer could not be used: {what}")
        except ServerUnavailable:
            raise
        except Exception as error:
            why = server.describe(error, session.transport, server.settings.timeout_seconds)
            _retire(server, session, why)
            raise server.unavailable(why) from None
        session.suspect = False
        return result
    except anyio.get_cancelled_exc_class():
        # Given up on (timed out, or its caller cancelled) with no answer.
        session.suspect = True
        raise
    finally:
        session.in_flight -= 1
        # A suspect session (a call was given up on, nothing answered since) is ended by
        # the last call to leave it: a server that answers nothing (hung) is started again
        # when next needed, while one merely slow at one tool keeps serving the others.
        if session.suspect and session.in_flight <= 0 and not session.ended:
            logger.warning(
                "MCP server %s answered nothing while a call timed out: ending its session",
                server.name,
            )
            _retire(server, session, "it stopped answering, so its session was ended")


async def _list_tools(server: _Server, timeout: float) -> list[mcp_types.Tool]:
    """Every tool the server lists, page after page, in a session of its own that is
    ended before returning (sync must leave no server running)."""
    transport: StdioTransport | HttpTransport | None = None
    try:
        with anyio.fail_after(timeout):
            transport = server.transport(max(LIST_MESSAGE_BYTES, server.settings.max_result_bytes))
            client = Client(
                transport,
                cache=None,
                client_info=mcp_types.Implementation(name="protege", version=protege.__version__),
            )
            async with client:
                return await _pages(server, client, transport)
    except TimeoutError:
        raise TimeoutError(
            f"MCP server {server.name}: its tools were not listed within {timeout:g} s"
        ) from None
    except ServerUnavailable:
        raise
    except BaseException as error:
        if not isinstance(error, Exception):
            raise
        raise server.unavailable(server.describe(error, transport, timeout)) from None


async def _pages(
    server: _Server, client: Client, transport: StdioTransport | HttpTransport
) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursors: set[str] = set()
    cursor: str | None = None
    for _page in range(MAX_TOOLS):
        try:
            page = await client.list_tools(cursor=cursor)
        except MCPError as error:
            if error.code == mcp_types.CONNECTION_CLOSED:
                why = getattr(transport, "failure", None) or "the connection closed"
                raise server.unavailable(f"it ended while listing its tools: {why}") from None
            raise server.unavailable(f"it refused to list its tools (error {error.code})") from None
        except pydantic.ValidationError:
            raise server.unavailable("its list of tools is not valid MCP") from None
        tools += page.tools
        if len(tools) > MAX_TOOLS:
            raise server.unavailable(
                f"it lists more than {MAX_TOOLS} tools, more than protege takes"
            )
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in cursors:
            raise server.unavailable("its list of tools goes round in circles (a cursor came back)")
        cursors.add(cursor)
    raise server.unavailable(f"its list of tools has more than {MAX_TOOLS} pages")


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
            name: _Server(name, settings, environ, self._groups, clock)
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

    def _server(self, name: str) -> _Server:
        found = self._servers.get(name)
        if found is None:
            raise ServerUnavailable(_one_line(f"no MCP server named {name!r} is configured"))
        return found

    def list_tools(self, server: str, *, timeout: float) -> list[mcp_types.Tool]:
        """Every tool ``server`` lists (all pages; at most ``MAX_TOOLS``, 1,000: a server
        listing more fails), in a session of its own opened and ended for the listing, so
        that nothing is left running. Blocking; fails (``ServerUnavailable``,
        ``TimeoutError``) within about ``timeout``, the server's start-up included. The
        server's allow-list (``ServerSettings.allows``) is not applied here."""
        state = self._server(server)
        future = asyncio.run_coroutine_threadsafe(_list_tools(state, timeout), self._running_loop())
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
        future = asyncio.run_coroutine_threadsafe(_call(state, tool, arguments, timeout), loop)
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
