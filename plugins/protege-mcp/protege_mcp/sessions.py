"""One configured server on the private loop of its ``Connections``: how a session is
opened (shared by the calls waiting for it), kept by a task of its own until it is closed or
the server's side ends, and how long a server that failed to start is left alone."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import ssl
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types
from mcp import Client
from mcp.client._transport import TransportStreams

import protege
from protege_mcp.errors import ServerUnavailable, describe, one_line
from protege_mcp.http import ENVELOPE_BYTES, HttpTransport
from protege_mcp.settings import ServerSettings
from protege_mcp.stdio import StdioTransport, find_command

logger = logging.getLogger(__name__)

# The wait before a server that failed to start is tried again: doubled at each failure.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0


def client_info() -> mcp_types.Implementation:
    """How protege names itself to an MCP server."""
    return mcp_types.Implementation(name="protege", version=protege.__version__)


class Session:
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
        self.aborted = False  # closed while still opening

    @property
    def ended(self) -> bool:
        """Whether the session is closing or closed (no call may start in it)."""
        return self.closing.is_set() or self.done.is_set()

    def close(self, why: str | None = None) -> None:
        """End the session (its owner leaves the client, which stops the transport); one
        still opening stops opening."""
        self.aborted = not self.opened.is_set()
        self.end(why)
        if self.aborted and self.scope is not None:
            self.scope.cancel()

    def end(self, why: str | None = None) -> None:
        """Let the session end: its server's side is gone (or ``why`` says what ended it)."""
        if why is not None and self.lost is None:
            self.lost = why
        self.closing.set()

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


class Server:
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
        self.session: Session | None = None
        self.opening: asyncio.Task[Session] | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.last_error = ""
        # Every session not yet ended, by the task owning it (so none is collected running).
        self.owners: dict[asyncio.Task[None], Session] = {}

    def unavailable(self, what: str) -> ServerUnavailable:
        """``ServerUnavailable`` naming this server, saying ``what``."""
        return ServerUnavailable(one_line(f"MCP server {self.name}: {what}"))

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
            header: self._header_value(environ, variable, header)
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

    def _header_value(self, environ: Mapping[str, str], name: str, header: str) -> str:
        # A secret made from a file often ends in a newline: that much is trimmed. Anything
        # else a header cannot carry is refused here, naming the variable and never its
        # value (the HTTP client would put the value in its error, and in its debug log).
        value = self._variable(environ, name, f"header_env.{header}").strip(" \t\r\n")
        if not value or any((ord(c) < 0x20 and c != "\t") or ord(c) >= 0x7F for c in value):
            raise self.unavailable(
                f"the environment variable {name} (named in header_env.{header}) holds "
                "what a header cannot carry (a control character, non-ASCII, or nothing)"
            )
        return value

    def describe(self, error: BaseException, transport: object, seconds: float) -> str:
        """What went wrong opening or using the server, in protege's words."""
        return describe(self.name, error, transport, seconds)

    def failed_to_open(self, why: str) -> None:
        """Count a failed start and set when the server may be tried again."""
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


async def _own(server: Server, session: Session, max_message_bytes: int) -> None:
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
            session.end("it wrote a message that is not JSON-RPC, so its session was ended")
        else:
            await anyio.lowlevel.checkpoint()

    try:
        transport = server.transport(max_message_bytes)
        session.transport = transport
        client = Client(
            _Watched(transport, session.end),
            cache=None,
            message_handler=on_message,
            client_info=client_info(),
        )
        with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
            session.scope = scope
            async with client:
                scope.deadline = math.inf
                session.client = client
                session.opened.set()
                await session.closing.wait()
        if scope.cancelled_caught and not session.opened.is_set():
            session.error = (
                server.unavailable("its connections were closed while it started")
                if session.aborted
                else TimeoutError()
            )
    except BaseException as error:  # reported to whoever waits on the open
        session.error = error
        if not isinstance(error, Exception):
            raise
    finally:
        session.done.set()
        if session.opened.is_set():
            logger.info("MCP server %s: session ended (%s)", server.name, session.reason())


async def open_session(server: Server) -> Session:
    """A new session of ``server``, or ``ServerUnavailable`` saying why there is none."""
    session = Session(server.name)
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


async def session_of(server: Server) -> Session:
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
        server.opening = asyncio.get_running_loop().create_task(open_session(server))
        server.opening.add_done_callback(lambda task: _opened(server, task))
    return await asyncio.shield(server.opening)


def _opened(server: Server, task: asyncio.Task[Session]) -> None:
    server.opening = None
    if not task.cancelled() and task.exception() is None:
        server.session = task.result()


def retire(server: Server, session: Session, why: str) -> None:
    """End ``session`` for ``why``; the server's next call opens another."""
    if server.session is session:
        server.session = None
    session.close(why)
