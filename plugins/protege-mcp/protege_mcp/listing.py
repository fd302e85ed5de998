"""Sync's half: list each configured server's tools and record them (``refresh_tools``).

Each server is listed by a session of its own, opened and closed for the listing, so sync
leaves nothing running. A server that does not answer keeps what the earlier sync listed,
marked with the error, and its tools are withheld until a sync lists them again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from protege_mcp.record import failed, key_for, listed
from protege_mcp.settings import McpSettings, ServerSettings

Record = Callable[[str, Any], None]
Recorded = Callable[[str], Any]


def refresh(settings: McpSettings, record: Record, recorded: Recorded) -> list[str]:
    """List and record every configured server's tools; returns the lines sync reports
    (servers that did not answer, tools that changed since the earlier sync)."""
    from protege_mcp.connections import Connections

    lines: list[str] = []
    connections = Connections(settings.servers)
    try:
        for name, server in sorted(settings.servers.items()):
            before = recorded(key_for(name))
            if not (isinstance(before, dict) and isinstance(before.get("tools", []), list)):
                before = None  # nothing, or a record not in the shape sync writes
            try:
                tools = [
                    described(tool)
                    for tool in connections.list_tools(name, timeout=settings.list_timeout_seconds)
                ]
                record(key_for(name), listed(server, tools))
                lines += changes(name, server, before, tools)
            except Exception as error:  # whatever the server did: this server only
                reason = _one_line(error).removeprefix(f"MCP server {name}: ")
                kept = failed(server, reason, before)
                record(key_for(name), kept)
                lines.append(
                    f"MCP server {name} could not be listed: {reason} ("
                    + (
                        "its tools are withheld until a sync lists them)"
                        if kept["tools"]
                        else "nothing of it is offered until a sync lists it)"
                    )
                )
    finally:
        connections.close()
    return lines


def described(tool: Any) -> dict[str, Any]:
    """What the record keeps of one ``mcp_types.Tool``: as the server described it."""
    from protege_mcp.results import annotations_of

    spec = {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description or "",
        "input_schema": tool.input_schema,
        "annotations": annotations_of(tool),
    }
    try:  # what JSON cannot hold (NaN, infinity) is refused here, naming the tool
        json.dumps(spec, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(
            f"its tool {tool.name[:64]!r} is described with values JSON cannot hold"
        ) from None
    return spec


def changes(
    name: str,
    server: ServerSettings,
    before: Mapping[str, Any] | None,
    tools: list[dict[str, Any]],
) -> list[str]:
    """What an operator should hear of a server's listing against the earlier one: tools
    added and gone, and tools whose description or input changed (what the model is told
    of a tool is the server's word: a changed one deserves a look before it is granted)."""
    if not before or not before.get("tools"):
        return []  # a first listing: sync's "All Tools: added" says what came
    earlier = {
        tool["name"]: tool
        for tool in before["tools"]
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str)
    }
    now = {tool["name"]: tool for tool in tools}
    lines = []
    added, gone = sorted(set(now) - set(earlier)), sorted(set(earlier) - set(now))
    if added:
        lines.append(f"MCP server {name} lists new tools: {', '.join(added)}")
    if gone:
        lines.append(f"MCP server {name} no longer lists {', '.join(gone)}")
    for tool_name in sorted(set(now) & set(earlier)):
        changed = [
            what
            for what in ("title", "description", "input_schema", "annotations")
            if now[tool_name].get(what) != earlier[tool_name].get(what)
        ]
        if changed:
            lines.append(
                f"MCP server {name} changed the {' and '.join(changed)} of its tool "
                f"{tool_name} since the last sync (`protege tools --json` shows what the model "
                "is told)"
            )
    return lines


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
