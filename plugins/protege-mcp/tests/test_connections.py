"""Connections: one kept session per server on a private loop, listings in sessions of their
own, calls from any thread and loop, and every hostile server failing that call only."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
from typing import Any

import mcp_types
import pytest

from protege import Trust
from protege_mcp.connections import MAX_TOOLS, Connections, ServerUnavailable
from protege_mcp.results import to_result
from protege_mcp.settings import ServerSettings

from .conftest import BASE_ENVIRON, PAGED, alive, stdio, wait_until

HANG_SECONDS = 1.0
CALL_SECONDS = 30.0


def call(
    connections: Connections,
    tool: str,
    server: str = "box",
    timeout: float = CALL_SECONDS,
    **arguments: Any,
) -> mcp_types.CallToolResult:
    """One call, on a fresh event loop (as protege's dispatch runs a tool)."""
    return asyncio.run(connections.call(server, tool, arguments, timeout=timeout))


def pid_of(connections: Connections, server: str = "box") -> int:
    result = call(connections, "pid", server)
    return int(result.structured_content["result"])


def text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_listing_takes_every_page_and_leaves_no_server_running(connect):
    connections = connect({"paged": stdio("5", "2", script=PAGED)})
    tools = connections.list_tools("paged", timeout=CALL_SECONDS)
    assert [tool.name for tool in tools] == [f"tool_{number}" for number in range(5)]
    assert not connections.is_open("paged")


def test_a_listing_is_bounded(connect):
    connections = connect(
        {
            "many": stdio(str(MAX_TOOLS + 1), "400", script=PAGED),
            "circular": stdio("4", "2", "--loop", script=PAGED),
        }
    )
    with pytest.raises(ServerUnavailable, match=f"it lists more than {MAX_TOOLS} tools"):
        connections.list_tools("many", timeout=CALL_SECONDS)
    with pytest.raises(ServerUnavailable, match="goes round in circles"):
        connections.list_tools("circular", timeout=CALL_SECONDS)


def test_the_toolbox_lists_its_tools_with_their_hints(connect):
    tools = {
        tool.name: tool
        for tool in connect({"box": stdio()}).list_tools("box", timeout=CALL_SECONDS)
    }
    assert {"echo", "add", "hang", "crash"} <= set(tools)
    assert tools["echo"].annotations is not None
    assert tools["echo"].annotations.read_only_hint is True


def test_calls_bring_back_text_structured_content_images_and_errors(connect):
    connections = connect({"box": stdio()})
    assert text(call(connections, "echo", text="hello")) == "hello"
    assert call(connections, "add", a=2, b=3).structured_content == {"result": 5}
    picture = call(connections, "image")
    assert [block.type for block in picture.content] == ["text", "image"]
    failed = call(connections, "fail", message="no such order")
    assert failed.is_error
    assert "no such order" in text(failed)
    unknown = call(connections, "no_such_tool")
    assert unknown.is_error
    assert "no_such_tool" in text(unknown)


def test_a_real_result_becomes_an_untrusted_result_with_its_image(connect):
    result = to_result(call(connect({"box": stdio()}), "image"), max_chars=100, max_bytes=10_000)
    assert result.ok
    assert result.trust is Trust.UNTRUSTED
    assert result.data["text"] == "a red dot"
    assert [part.media_type for part in result.parts] == ["image/png"]


def test_the_server_gets_exactly_the_variables_named(connect):
    environ = {**BASE_ENVIRON, "FILES_ROOT": "/srv/files", "NOT_NAMED": "secret", "PATH": "/bin"}
    connections = connect({"box": stdio(env=["LC_ALL", "FILES_ROOT"])}, environ=environ)
    seen = call(connections, "environ").structured_content
    assert seen == {"LC_ALL": "C.UTF-8", "FILES_ROOT": "/srv/files"}


def test_a_missing_variable_is_named_never_its_value(connect):
    connections = connect(
        {"box": stdio(env=["LC_ALL", "FILES_ROOT"])}, environ={**BASE_ENVIRON, "OTHER": "x"}
    )
    with pytest.raises(ServerUnavailable) as refused:
        call(connections, "echo", text="hi")
    assert str(refused.value) == (
        "MCP server box: the environment variable FILES_ROOT (named in env) is not set"
    )


def test_the_server_runs_in_its_cwd_or_is_not_started(connect, tmp_path):
    connections = connect(
        {"box": stdio(cwd=str(tmp_path)), "nowhere": stdio(cwd=str(tmp_path / "missing"))}
    )
    assert text(call(connections, "cwd")) == str(tmp_path)
    with pytest.raises(ServerUnavailable, match="it could not be started \\(No such file"):
        call(connections, "cwd", "nowhere")


def test_one_session_per_server_shared_by_calls_from_any_thread(connect):
    connections = connect({"box": stdio()})
    pids: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            pids.append(pid_of(connections))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(pids)) == 1
    assert pid_of(connections) == pids[0]


def test_a_hung_call_fails_within_its_timeout_and_the_next_call_works(connect):
    connections = connect({"box": stdio()})
    assert text(call(connections, "echo", text="up")) == "up"
    with pytest.raises(
        TimeoutError, match=f"no answer from its tool hang within {HANG_SECONDS:g} s"
    ):
        call(connections, "hang", timeout=HANG_SECONDS)
    assert text(call(connections, "echo", text="still here")) == "still here"


def test_a_server_that_answers_nothing_more_is_started_again(connect):
    connections = connect({"box": stdio()})
    frozen = pid_of(connections)
    with pytest.raises(TimeoutError):
        call(connections, "freeze", timeout=HANG_SECONDS)
    assert pid_of(connections) != frozen
    wait_until(lambda: not alive(frozen), "the frozen server ending")


def test_a_server_crashing_mid_call_fails_that_call_and_is_reopened(connect):
    connections = connect({"box": stdio()})
    crashed = pid_of(connections)
    with pytest.raises(ServerUnavailable, match="MCP server box: it ended during the call"):
        call(connections, "crash")
    assert pid_of(connections) != crashed


def test_a_flooding_server_fails_that_call_is_killed_and_reopened(connect):
    connections = connect({"box": stdio(max_result_bytes=100_000)})
    flooding = pid_of(connections)
    with pytest.raises(ServerUnavailable, match="over 165536 bytes \\(flooding\\)"):
        call(connections, "flood", size=5_000_000)
    wait_until(lambda: not alive(flooding), "the flooding server ending")
    assert text(call(connections, "echo", text="after")) == "after"


def test_a_result_over_the_byte_cap_is_a_flood_too(connect):
    connections = connect({"box": stdio(max_result_bytes=100_000)})
    with pytest.raises(ServerUnavailable, match="flooding"):
        call(connections, "big", size=1_000_000)
    assert len(text(call(connections, "big", size=50_000))) == 50_000


def test_malformed_json_rpc_fails_that_call_and_the_server_is_reopened(connect):
    connections = connect({"box": stdio()})
    before = pid_of(connections)
    with pytest.raises(ServerUnavailable, match="it wrote a message that is not JSON-RPC"):
        call(connections, "malformed")
    assert pid_of(connections) != before


def test_a_server_that_dies_between_calls_is_reopened_at_the_next(connect):
    connections = connect({"box": stdio()})
    first = pid_of(connections)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not connections.is_open("box"), "the session seeing its server gone")
    assert pid_of(connections) != first


def test_a_server_that_cannot_start_is_tried_again_after_a_doubling_wait(connect):
    clock = Clock()
    environ = dict(BASE_ENVIRON)
    connections = connect(
        {
            "missing": ServerSettings(command="no-such-mcp-server"),
            "quits": ServerSettings(command=sys.executable, args=["-c", "raise SystemExit(3)"]),
            "later": stdio(env=["LC_ALL", "TOKEN_FILE"]),
        },
        environ=environ,
        clock=clock,
    )
    with pytest.raises(ServerUnavailable, match="command 'no-such-mcp-server' was not found"):
        call(connections, "echo", "missing")
    with pytest.raises(ServerUnavailable, match="it exited at start-up \\(status 3"):
        call(connections, "echo", "quits")
    with pytest.raises(ServerUnavailable, match=r"exited at start-up.*tried again in 1 s"):
        call(connections, "echo", "quits")
    clock.now += 1.0
    with pytest.raises(ServerUnavailable, match="it exited at start-up \\(status 3"):
        call(connections, "echo", "quits")
    with pytest.raises(ServerUnavailable, match="tried again in 2 s"):
        call(connections, "echo", "quits")

    with pytest.raises(ServerUnavailable, match="TOKEN_FILE"):
        call(connections, "echo", "later", text="x")
    environ["TOKEN_FILE"] = "/run/token"  # read each time the server is opened
    with pytest.raises(ServerUnavailable, match="tried again in 1 s"):
        call(connections, "echo", "later", text="x")
    clock.now += 1.0
    assert text(call(connections, "echo", "later", text="x")) == "x"


def test_a_server_that_never_finishes_starting_fails_within_its_timeout(connect):
    silent = ServerSettings(
        command=sys.executable, args=["-c", "import time; time.sleep(600)"], timeout_seconds=1
    )
    connections = connect({"silent": silent})
    with pytest.raises(ServerUnavailable, match="did not complete its start-up within 1 s"):
        call(connections, "echo", "silent")
    with pytest.raises(TimeoutError, match="not listed within 1 s"):
        connections.list_tools("silent", timeout=1.0)


def test_cancelling_the_caller_cancels_the_call(connect):
    connections = connect({"box": stdio()})
    server = pid_of(connections)

    async def cancelled() -> None:
        task = asyncio.ensure_future(connections.call("box", "hang", {}, timeout=CALL_SECONDS))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    # The call given up on left its session suspect, and so it was ended.
    wait_until(lambda: not connections.is_open("box"), "the cancelled call's session ending")
    wait_until(lambda: not alive(server), "its server ending")


def test_close_ends_every_server_and_later_calls_fail(connect):
    connections = connect({"box": stdio(), "other": stdio()})
    pids = [pid_of(connections, "box"), pid_of(connections, "other")]
    connections.close()
    connections.close()
    assert not any(alive(pid) for pid in pids)
    with pytest.raises(ServerUnavailable, match="closed"):
        call(connections, "echo", text="x")


def test_a_dropped_connections_still_ends_its_servers():
    connections = Connections({"box": stdio()}, environ=dict(BASE_ENVIRON))
    server = pid_of(connections)
    del connections
    gc.collect()
    wait_until(lambda: not alive(server), "the dropped connections' server ending")


def test_two_connections_share_nothing(connect):
    first, second = connect({"box": stdio()}), connect({"box": stdio()})
    assert pid_of(first) != pid_of(second)
    first.close()
    assert text(call(second, "echo", text="alone")) == "alone"


def test_an_unknown_server_is_unavailable(connect):
    connections = connect({"box": stdio()})
    with pytest.raises(ServerUnavailable, match="no MCP server named 'nope' is configured"):
        call(connections, "echo", "nope")
    with pytest.raises(ServerUnavailable, match="no MCP server named 'nope'"):
        connections.list_tools("nope", timeout=1.0)


def test_a_call_in_flight_when_closing_fails_as_unavailable(connect):
    connections = connect({"box": stdio()})
    pid_of(connections)
    outcome: list[BaseException] = []

    def hanging() -> None:
        try:
            call(connections, "hang")
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=hanging)
    thread.start()
    connections.close()
    thread.join()
    assert len(outcome) == 1
    assert isinstance(outcome[0], ServerUnavailable)
