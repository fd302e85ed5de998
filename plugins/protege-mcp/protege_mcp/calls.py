"""A call and a listing, as they run on the private loop of a ``Connections``."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types
import pydantic
from mcp import Client
from mcp.shared.exceptions import MCPError

from protege_mcp.errors import ServerUnavailable
from protege_mcp.http import HttpTransport
from protege_mcp.sessions import Server, Session, client_info, retire, session_of
from protege_mcp.stdio import StdioTransport

logger = logging.getLogger(__name__)

# A listing is bounded: at most this many tools (and pages) from one server.
MAX_TOOLS = 1_000
# All of a server's tools together, as JSON: what one record of a sync may hold.
MAX_LISTING_CHARS = 8 * 1024 * 1024
# One message of a listing may be this large, whatever max_result_bytes says.
LIST_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_REFUSAL_CHARS = 1_000
# What the SDK's HTTP transport says when the server answers 404 to a session it lost.
SESSION_GONE = "Session terminated"


def _refused(text: str) -> mcp_types.CallToolResult:
    """A failed call as a result, carrying words that may be the server's own (so that they
    reach the model only as the untrusted content of a result)."""
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], is_error=True)


async def call_tool(
    server: Server, tool: str, arguments: dict[str, Any], timeout: float
) -> mcp_types.CallToolResult:
    opening = True
    try:
        with anyio.fail_after(timeout):
            for _attempt in range(2):
                session = await session_of(server)
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
    server: Server, session: Session, tool: str, arguments: dict[str, Any]
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
                retire(server, session, why)
                raise server.unavailable(f"it ended during the call: {why}") from None
            session.suspect = False
            if error.code == mcp_types.INVALID_REQUEST and error.error.message == SESSION_GONE:
                retire(server, session, "the server no longer knew its session")
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
            retire(server, session, why)
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
            retire(server, session, "it stopped answering, so its session was ended")


async def list_tools(server: Server, timeout: float) -> list[mcp_types.Tool]:
    """Every tool the server lists, page after page, in a session of its own that is
    ended before returning (sync must leave no server running)."""
    transport: StdioTransport | HttpTransport | None = None
    try:
        with anyio.fail_after(timeout):
            transport = server.transport(max(LIST_MESSAGE_BYTES, server.settings.max_result_bytes))
            garbled: list[str] = []
            listing = anyio.CancelScope()

            async def on_message(message: Any) -> None:
                # A message that is not JSON-RPC ends the listing at once: waiting for the
                # answer it may have been would only run out the timeout.
                if isinstance(message, Exception):
                    garbled.append(type(message).__name__)
                    listing.cancel()

            client = Client(
                transport,
                cache=None,
                client_info=client_info(),
                message_handler=on_message,
            )
            async with client:
                with listing:
                    return await _pages(server, client, transport)
            raise server.unavailable("it wrote a message that is not JSON-RPC while listing")
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
    server: Server, client: Client, transport: StdioTransport | HttpTransport
) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    size = 0
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
        size += sum(len(tool.model_dump_json(by_alias=True)) for tool in page.tools)
        if size > MAX_LISTING_CHARS:
            raise server.unavailable(
                f"its list of tools is over {MAX_LISTING_CHARS:,} characters, more than "
                "protege takes"
            )
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
