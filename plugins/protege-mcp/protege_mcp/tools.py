"""The protege tools made from MCP servers' listings: one class per tool, its id, text and
input schema from the record, each call sent to its server.

What talks to the servers (the SDK, httpx2, anyio) is imported on first use, so building a
manifest stays light; a serving process imports it before it takes runs (``preload``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from protege import Result, RunContext, Tool, Trust
from protege_mcp.settings import ServerSettings

if TYPE_CHECKING:
    from protege_mcp.connections import Connections

# What the model is told of a tool is the server's word; past this it is cut.
MAX_DESCRIPTION_CHARS = 4000
# A schema larger than this is refused: it would cost every request that offers the tool.
MAX_SCHEMA_CHARS = 64 * 1024
# What a call leaves of its timeout for its own failure to be told, before dispatch's own.
_MARGIN = 0.05


class Sessions:
    """The sessions of one manifest's servers: ``Connections``, made on the first call (so
    that a manifest nobody calls a tool of starts nothing), closed with the installation."""

    def __init__(self, servers: Mapping[str, ServerSettings]) -> None:
        self.servers = servers
        self._lock = threading.Lock()
        self._connections: Connections | None = None
        self._closed = False

    def connections(self) -> Connections:
        """The live ``Connections``, made now if this is the first call."""
        from protege_mcp.connections import Connections

        with self._lock:
            if self._closed:
                raise RuntimeError("this installation's MCP sessions are closed")
            if self._connections is None:
                self._connections = Connections(self.servers)
            return self._connections

    def close(self) -> None:
        """End every session and server process; idempotent."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, None
        if connections is not None:
            connections.close()


class McpTool(Tool):
    """Base of every MCP server's tool: the call goes to ``server``'s session, its answer
    comes back untrusted, cut to the server's limits."""

    abstract = True
    trust = Trust.UNTRUSTED
    preload = ("protege_mcp.connections", "protege_mcp.results")
    mcp_name: ClassVar[str] = ""
    sessions: ClassVar[Sessions]
    max_result_chars: ClassVar[int] = 20_000
    max_result_bytes: ClassVar[int] = 2 * 1024 * 1024

    async def use(self, /, context: RunContext, **arguments: Any) -> Result:
        """Call the tool on its server with the model's (schema-checked) arguments."""
        from protege_mcp.connections import ServerUnavailable
        from protege_mcp.results import to_result

        server = str(self.server)
        timeout = max(self.timeout * (1 - _MARGIN), self.timeout - 1.0)
        try:
            answer = await self.sessions.connections().call(
                server, self.mcp_name, arguments, timeout=timeout
            )
        except ServerUnavailable as error:
            return self.failure(str(error))
        except TimeoutError:
            return self.failure(f"MCP server {server} did not answer within {timeout:g} s")
        return to_result(answer, max_chars=self.max_result_chars, max_bytes=self.max_result_bytes)


def tool_class(
    tool_id: str,
    server_name: str,
    server: ServerSettings,
    spec: Mapping[str, Any],
    sessions: Sessions,
) -> type[McpTool]:
    """The tool class of one recorded MCP tool (``spec``, as sync recorded it)."""
    description = str(spec.get("description") or "").strip()
    if not description:
        title = str(spec.get("title") or spec["name"])
        description = f"{title}: a tool of the MCP server {server_name} (it gives no description)."
    if len(description) > MAX_DESCRIPTION_CHARS:
        description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
    made = type(
        tool_id,
        (McpTool,),
        {
            "__module__": __name__,
            "__qualname__": f"McpTool[{server_name}/{spec['name']}]",
            "__doc__": f"The tool {spec['name']} of the MCP server {server_name}.",
            "description": description,
            "input_schema": spec.get("input_schema"),
            "annotations": dict(spec.get("annotations") or {}),
            "server": server_name,
            "timeout": server.timeout_seconds,
            "mcp_name": spec["name"],
            "sessions": sessions,
            "max_result_chars": server.max_result_chars,
            "max_result_bytes": server.max_result_bytes,
        },
    )
    return made
