"""The stdio transport: an MCP server run as a child process, one JSON-RPC message a line.

Unlike the SDK's ``stdio_client``, the child gets exactly the environment it is given
(nothing of the host's is merged in), one message may not pass a cap (a longer line means
the server is flooding: reading stops, what is in flight fails, the server is killed), and
its stderr goes to a small bounded buffer and the log, never to protege's own stderr.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

# After stdin closes, how long the server has to exit on its own; then the process group
# is sent SIGTERM and, as long again later, SIGKILL.
GRACE_SECONDS = 1.0
# Of the server's stderr: the lines kept (the last ones), the characters kept of a line,
# and the lines logged in a process's life (a chatty server must not fill the log).
STDERR_LINES = 20
STDERR_LINE_CHARS = 500
STDERR_LOGGED_LINES = 200
READ_CHUNK = 65_536
_CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError)


def find_command(command: str, environ: Mapping[str, str]) -> str:
    """The executable ``command`` names: as it is when it holds a slash, else looked up on
    the ``PATH`` of ``environ`` (the host's, not the server's). ``FileNotFoundError``
    naming the command when there is none."""
    if os.sep in command:
        if os.path.isfile(command) and os.access(command, os.X_OK):
            return command
        raise FileNotFoundError(f"command {command!r} is not an executable file")
    found = shutil.which(command, path=environ.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(f"command {command!r} was not found on PATH")
    return found


class StdioTransport:
    """An MCP transport (an async context manager yielding the session's read and write
    streams) running one server process.

    The child runs ``command`` with ``args`` in ``cwd``, with exactly ``env`` as its
    environment, in a session and process group of its own. A line of stdout longer
    than ``max_message_bytes`` stops the transport and kills the server; a line that is
    not JSON-RPC is handed to the session as an exception, as the SDK's transport does.
    Leaving the context closes stdin, gives the server ``grace_seconds`` to exit, then
    ends its whole process group. ``failure`` says why the transport stopped the server
    on its own (for errors shown to operators and the model: never the server's output).
    ``on_spawn`` and ``on_exit`` are told the process group's id when it starts and
    once it has been ended.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str],
        cwd: str | None = None,
        max_message_bytes: int,
        name: str = "",
        grace_seconds: float = GRACE_SECONDS,
        on_spawn: Callable[[int], None] | None = None,
        on_exit: Callable[[int], None] | None = None,
    ) -> None:
        self.command = command
        self.args = tuple(args)
        self.env = dict(env)
        self.cwd = cwd
        self.max_message_bytes = max_message_bytes
        self.name = name or os.path.basename(command)
        self.grace_seconds = grace_seconds
        self.on_spawn = on_spawn
        self.on_exit = on_exit
        self.failure: str | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._stderr_logged = 0
        self._process: anyio.abc.Process | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id (and its process group's) once started."""
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        """The server's exit status once it has exited and been reaped, else None."""
        return None if self._process is None else self._process.returncode

    async def __aenter__(
        self,
    ) -> tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]:
        process = await anyio.open_process(
            [self.command, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )
        self._process = process
        if self.on_spawn is not None:
            self.on_spawn(process.pid)
        # No await between the spawn and the task group: a cancellation there would leave
        # the process running with nobody to end it.
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self._read_writer, self._read_stream = read_writer, read_stream
        self._write_stream, self._write_reader = write_stream, write_reader
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._read_stdout, process)
        group.start_soon(self._write_stdin, process)
        group.start_soon(self._read_stderr, process)
        return read_stream, write_stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        group = self._group
        assert group is not None
        try:
            # Ending the server must finish even when the caller is cancelled, or the
            # process would be left running; every wait in it is bounded.
            with anyio.CancelScope(shield=True):
                await self._stop()
        finally:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            for stream in (self._read_writer, self._read_stream, self._write_stream):
                await stream.aclose()
            await self._write_reader.aclose()

    async def _stop(self) -> None:
        """Close stdin, wait ``grace_seconds`` for the server to exit, then end its group."""
        process = self._process
        assert process is not None
        self._write_stream.close()
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            assert process.stdin is not None
            await process.stdin.aclose()
        with anyio.move_on_after(self.grace_seconds):
            await process.wait()
        if process.returncode is None:
            await terminate_posix_process_tree(process, self.grace_seconds)
        # Whatever the leader did, nothing of its group outlives the transport.
        _kill_group(process.pid)
        with anyio.move_on_after(self.grace_seconds):
            await process.wait()
        for pipe in (process.stdout, process.stderr):
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                if pipe is not None:
                    await pipe.aclose()
        # asyncio's transport of the process would otherwise stay open (and complain when
        # collected after its loop closed); nothing public reaches it.
        close = getattr(
            getattr(getattr(process, "_process", None), "_transport", None), "close", None
        )
        if callable(close):
            with contextlib.suppress(Exception):
                close()
        if self.on_exit is not None:
            self.on_exit(process.pid)

    def _flooded(self, process: anyio.abc.Process) -> None:
        self.failure = (
            f"it sent a message over {self.max_message_bytes} bytes (flooding), so it was stopped"
        )
        logger.warning("MCP server %s: %s", self.name, self.failure)
        _kill_group(process.pid)

    async def _read_stdout(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        cap = self.max_message_bytes
        pending = bytearray()
        try:
            async with self._read_writer:
                while True:
                    try:
                        chunk = await process.stdout.receive(READ_CHUNK)
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                    ):
                        break
                    start = 0
                    while (newline := chunk.find(b"\n", start)) != -1:
                        pending += chunk[start:newline]
                        start = newline + 1
                        if len(pending) > cap:
                            self._flooded(process)
                            return
                        line = bytes(pending)
                        pending.clear()
                        if line.strip():
                            await self._read_writer.send(self._parsed(line))
                    pending += chunk[start:]
                    if len(pending) > cap:
                        self._flooded(process)
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone: the transport is closing

    def _parsed(self, line: bytes) -> SessionMessage | Exception:
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as error:
            logger.warning(
                "MCP server %s wrote a line of %d bytes that is not a JSON-RPC message",
                self.name,
                len(line),
            )
            return error
        return SessionMessage(message)

    async def _write_stdin(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None
        try:
            async with self._write_reader:
                async for item in self._write_reader:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading (it ended, or is ending): so ends the session.
            await self._read_writer.aclose()

    async def _read_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        pending = bytearray()
        try:
            while True:
                chunk = await process.stderr.receive(READ_CHUNK)
                start = 0
                while (newline := chunk.find(b"\n", start)) != -1:
                    pending += chunk[start:newline][: STDERR_LINE_CHARS * 4]
                    start = newline + 1
                    self._stderr_line(bytes(pending))
                    pending.clear()
                room = STDERR_LINE_CHARS * 4 - len(pending)
                if room > 0:
                    pending += chunk[start:][:room]
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            if pending:
                self._stderr_line(bytes(pending))

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS]
        self.stderr_tail.append(line)
        if self._stderr_logged < STDERR_LOGGED_LINES:
            logger.info("MCP server %s (stderr): %s", self.name, line)
        elif self._stderr_logged == STDERR_LOGGED_LINES:
            logger.info("MCP server %s: further stderr is not logged", self.name)
        self._stderr_logged += 1


def _kill_group(pgid: int) -> None:
    """SIGKILL to every process of the group ``pgid`` that is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
