"""The streamable HTTP transport against the toolbox served on loopback: headers from the
named variables, TLS verified (a private CA only when configured), a byte cap on every
answer, hostile answers failing that call only, and no secret of a URL or header in errors
or logs."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import httpx2
import mcp_types
import pytest

from protege_mcp.connections import Connections, ServerUnavailable
from protege_mcp.http import CappedTransport, ResponseTooLarge
from protege_mcp.settings import ServerSettings

HANG_SECONDS = 1.0
CALL_SECONDS = 30.0


def http(url: str, **settings: Any) -> ServerSettings:
    settings.setdefault("timeout_seconds", CALL_SECONDS)
    return ServerSettings(url=url, **settings)


def call(
    connections: Connections, tool: str, timeout: float = CALL_SECONDS, **arguments: Any
) -> mcp_types.CallToolResult:
    return asyncio.run(connections.call("crm", tool, arguments, timeout=timeout))


def text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


def test_listing_and_calling_over_http(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url)})
    names = {tool.name for tool in connections.list_tools("crm", timeout=CALL_SECONDS)}
    assert {"echo", "add", "image"} <= names
    assert text(call(connections, "echo", text="hello")) == "hello"
    assert call(connections, "add", a=2, b=2).structured_content == {"result": 4}
    assert [block.type for block in call(connections, "image").content] == ["text", "image"]
    assert call(connections, "fail", message="refused").is_error


def test_headers_come_from_the_variables_named(connect, http_server):
    server = http_server()
    connections = connect(
        {"crm": http(server.url, header_env={"X-Api-Key": "CRM_KEY"})},
        environ={"CRM_KEY": "k-123"},
    )
    assert call(connections, "headers").structured_content["x-api-key"] == "k-123"


def test_a_missing_header_variable_is_named_never_a_value(connect, http_server):
    server = http_server()
    connections = connect(
        {"crm": http(server.url, header_env={"Authorization": "CRM_AUTH"})}, environ={}
    )
    with pytest.raises(ServerUnavailable) as refused:
        call(connections, "echo", text="x")
    assert str(refused.value) == (
        "MCP server crm: the environment variable CRM_AUTH (named in header_env.Authorization) "
        "is not set"
    )


def test_an_answer_over_the_byte_cap_fails_that_call_only(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url, max_result_bytes=100_000)})
    flooded = call(connections, "big", size=5_000_000)
    assert flooded.is_error
    assert "the server's answer was over 165536 bytes" in text(flooded)
    assert text(call(connections, "echo", text="after")) == "after"


def test_a_body_that_is_not_json_rpc_fails_that_call_only(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url)})
    assert call(connections, "garbled").is_error
    assert text(call(connections, "echo", text="after")) == "after"


def test_a_hung_call_fails_within_its_timeout(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url)})
    with pytest.raises(TimeoutError, match="no answer from its tool hang"):
        call(connections, "hang", timeout=HANG_SECONDS)
    assert text(call(connections, "echo", text="after")) == "after"


def test_a_server_crashing_mid_call_fails_that_call_and_is_reopened(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url)})
    assert text(call(connections, "echo", text="up")) == "up"
    with pytest.raises(ServerUnavailable, match="MCP server crm: it ended during the call"):
        call(connections, "crash")
    server.stop()
    server.start()
    assert text(call(connections, "echo", text="again")) == "again"


def test_a_server_restarted_between_calls_is_reopened(connect, http_server):
    server = http_server()
    connections = connect({"crm": http(server.url)})
    assert text(call(connections, "echo", text="before")) == "before"
    server.stop()
    server.start()
    assert text(call(connections, "echo", text="after")) == "after"


def test_a_server_not_listening_is_unavailable_and_its_url_secrets_never_shown(connect, caplog):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    port = closed.getsockname()[1]
    try:
        connections = connect({"crm": http(f"http://127.0.0.1:{port}/mcp?key=s3cret")})
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(ServerUnavailable, match="it could not be reached") as refused:
                call(connections, "echo", text="x")
            with pytest.raises(ServerUnavailable, match="tried again in 1 s"):
                call(connections, "echo", text="x")
            with pytest.raises(ServerUnavailable, match="could not be reached"):
                connections.list_tools("crm", timeout=CALL_SECONDS)
    finally:
        closed.close()
    assert "s3cret" not in str(refused.value)
    assert "s3cret" not in caplog.text


def test_tls_from_an_untrusted_authority_is_refused_and_accepted_with_its_ca_file(
    connect, http_server, authority
):
    server = http_server(tls=(authority.cert, authority.key))
    untrusted = connect({"crm": http(server.url)})
    with pytest.raises(ServerUnavailable, match="its TLS certificate could not be verified"):
        call(untrusted, "echo", text="x")
    trusted = connect({"crm": http(server.url, ca_file=str(authority.ca))})
    assert text(call(trusted, "echo", text="over tls")) == "over tls"


def test_a_ca_file_that_cannot_be_read_is_a_clear_error(connect, tmp_path):
    connections = connect(
        {"crm": http("https://127.0.0.1:9/mcp", ca_file=str(tmp_path / "missing.pem"))}
    )
    with pytest.raises(
        ServerUnavailable, match=r"its ca_file .*missing\.pem cannot be used \(No such file"
    ):
        call(connections, "echo", text="x")


def test_the_cap_counts_every_body_and_refuses_compressed_ones():
    def respond(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/gzip":
            return httpx2.Response(200, headers={"Content-Encoding": "gzip"}, content=b"x")
        return httpx2.Response(200, content=b"x" * 5000)

    async def main() -> None:
        transport = CappedTransport(httpx2.MockTransport(respond), max_bytes=1000)
        async with httpx2.AsyncClient(transport=transport) as client:
            with pytest.raises(ResponseTooLarge, match="over 1000 bytes"):
                await client.post("http://mcp.test/big")
            with pytest.raises(ResponseTooLarge, match="compressed"):
                await client.post("http://mcp.test/gzip")

    asyncio.run(main())
