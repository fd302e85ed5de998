"""The stdio transport: the child's exact environment, its own process group ended on exit,
a cap on one message, stderr kept small and out of protege's own, lines that are not
JSON-RPC handed to the session as exceptions."""

from __future__ import annotations

import os
import sys

import anyio
import pytest
from mcp import Client

from protege_mcp.stdio import STDERR_LINE_CHARS, STDERR_LINES, StdioTransport, find_command

from .conftest import BASE_ENVIRON, TOOLBOX, alive, wait_until


def transport(**options: object) -> StdioTransport:
    settings: dict[str, object] = {
        "env": dict(BASE_ENVIRON),
        "max_message_bytes": 1024 * 1024,
        "name": "toolbox",
    }
    settings.update(options)
    return StdioTransport(sys.executable, [TOOLBOX], **settings)  # type: ignore[arg-type]


def run(function):  # type: ignore[no-untyped-def]
    return anyio.run(function)


def test_the_server_gets_exactly_the_environment_given():
    seen = {}

    async def main() -> None:
        async with Client(transport(env={**BASE_ENVIRON, "ONLY": "this"}), cache=None) as client:
            seen.update((await client.call_tool("environ", {})).structured_content)

    os.environ["PROTEGE_MCP_TEST_NOT_NAMED"] = "leak"
    try:
        run(main)
    finally:
        del os.environ["PROTEGE_MCP_TEST_NOT_NAMED"]
    assert seen == {**BASE_ENVIRON, "ONLY": "this"}


def test_leaving_ends_the_servers_whole_process_group():
    pids: list[int] = []
    made = transport()

    async def main() -> None:
        async with Client(made, cache=None) as client:
            pids.append((await client.call_tool("spawn", {})).structured_content["result"])
            assert made.pid is not None
            pids.append(made.pid)
            assert os.getpgid(made.pid) == made.pid  # a session and group of its own

    run(main)
    for pid in pids:
        wait_until(lambda pid=pid: not alive(pid), f"process {pid} ending")
    assert made.returncode is not None


def test_a_line_over_the_cap_stops_the_transport_and_kills_the_server():
    made = transport(max_message_bytes=100_000)
    outcome: list[BaseException] = []

    async def main() -> None:
        async with Client(made, cache=None) as client:
            try:
                await client.call_tool("flood", {"size": 5_000_000})
            except Exception as error:
                outcome.append(error)

    run(main)
    assert outcome, "the call in flight should have failed"
    assert made.failure == "it sent a message over 100000 bytes (flooding), so it was stopped"
    assert made.pid is not None
    wait_until(lambda: not alive(made.pid or 0), "the flooding server ending")


def test_a_line_that_is_not_json_rpc_reaches_the_session_as_an_exception():
    handed: list[object] = []
    got = anyio.Event

    async def main() -> None:
        seen = got()

        async def handler(message: object) -> None:
            if isinstance(message, Exception):
                handed.append(message)
                seen.set()

        async with (
            Client(transport(), cache=None, message_handler=handler) as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(client.call_tool, "malformed", {})
            await seen.wait()
            group.cancel_scope.cancel()

    run(main)
    assert len(handed) == 1
    assert isinstance(handed[0], ValueError)


def test_stderr_is_kept_small_and_never_reaches_protege_s_own(capfd):
    made = transport()

    async def main() -> None:
        async with Client(made, cache=None) as client:
            await client.call_tool("shout", {"lines": 50, "width": 5000})

    run(main)
    tail = list(made.stderr_tail)
    assert len(tail) == STDERR_LINES
    assert tail[-1].startswith("00049")
    assert all(len(line) <= STDERR_LINE_CHARS for line in tail)
    assert "00049" not in capfd.readouterr().err


def test_commands_are_found_on_the_hosts_path_or_refused_by_name(tmp_path):
    assert find_command("sh", {"PATH": "/usr/bin:/bin"}).endswith("/sh")
    assert find_command(sys.executable, {}) == sys.executable
    with pytest.raises(FileNotFoundError, match="command 'no-such-server' was not found on PATH"):
        find_command("no-such-server", {"PATH": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="is not an executable file"):
        find_command(str(tmp_path / "missing"), {})
