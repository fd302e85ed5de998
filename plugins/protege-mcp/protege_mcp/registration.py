"""The manifest's half: offer the tools the last sync recorded, as the settings now say
(which servers, which of their tools, under which prefix).

Fail-closed: a server with no record, a record made with other settings (another command
or URL), a tool whose name cannot be an id or that two tools would share, all offer
nothing and are reported; the tools of a server that did not answer the last sync are
withheld, so toolkits keep them for when it answers again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from protege_mcp.naming import NameRefused, colliding, tool_id_for
from protege_mcp.record import fingerprint, key_for
from protege_mcp.settings import McpSettings, ServerSettings
from protege_mcp.tools import MAX_SCHEMA_CHARS, Sessions, tool_class


def register_recorded(
    register: Any, settings: McpSettings, recorded: Callable[[str], Any]
) -> Sessions | None:
    """Register (or withhold, or reject) each configured server's recorded tools; returns
    the sessions the registered tools share, or None when no server is configured."""
    if not settings.servers:
        return None
    sessions = Sessions(settings.servers)
    chosen: list[tuple[str, str, ServerSettings, Mapping[str, Any]]] = []
    for name, server in sorted(settings.servers.items()):
        data = recorded(key_for(name))
        if not isinstance(data, Mapping):
            register.reject(
                f"MCP server {name}: no tools of it are recorded yet (run `protege sync`)"
            )
            continue
        tools = _chosen_tools(register, name, server, data)
        if data.get("fingerprint") != fingerprint(server):
            reason = (
                f"the settings of MCP server {name} changed since the last sync "
                "(run `protege sync`)"
            )
            _withhold_or_reject(register, name, tools, reason)
            continue
        if data.get("error"):
            error = str(data["error"]).removeprefix(f"MCP server {name}: ")
            reason = (
                f"MCP server {name} did not answer the last sync ({data.get('failed_at')}): {error}"
            )
            _withhold_or_reject(register, name, tools, reason)
            continue
        chosen += [(tool_id, name, server, spec) for tool_id, spec in tools]
    clashes = colliding((tool_id, f"{name}/{spec['name']}") for tool_id, name, _, spec in chosen)
    for tool_id, whats in sorted(clashes.items()):
        one_server = len({what.split("/", 1)[0] for what in whats}) == 1
        register.reject(
            f"the MCP tools {', '.join(whats)} would all be {tool_id}: none of them is offered "
            + (
                "(leave all but one out with the server's tools allow-list)"
                if one_server
                else "(give their servers different prefixes)"
            )
        )
    for tool_id, name, server, spec in chosen:
        if tool_id not in clashes:
            register(tool_class(tool_id, name, server, spec, sessions))
    return sessions


def _chosen_tools(
    register: Any, name: str, server: ServerSettings, data: Mapping[str, Any]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The recorded tools the settings choose (allow-list), each with its id; what cannot
    be offered is rejected with the reason."""
    listed = [spec for spec in data.get("tools") or [] if isinstance(spec, Mapping)]
    names = {str(spec.get("name")) for spec in listed}
    allowed = None if server.tools is None else set(server.tools)
    if allowed is not None and data.get("error") is None:
        for missing in sorted(allowed - names):
            register.reject(
                f"MCP server {name} lists no tool {missing!r} (named in its tools allow-list)"
            )
    chosen = []
    for spec in listed:
        mcp_name = str(spec.get("name"))
        if allowed is not None and mcp_name not in allowed:
            continue
        try:
            tool_id = tool_id_for(server.prefix, mcp_name)
        except NameRefused as error:
            register.reject(f"MCP server {name}: {error}")
            continue
        size = len(json.dumps(spec.get("input_schema")))
        if size > MAX_SCHEMA_CHARS:
            register.reject(
                f"MCP server {name}: the input schema of {mcp_name!r} is {size:,} characters, "
                f"more than {MAX_SCHEMA_CHARS:,}"
            )
            continue
        chosen.append((tool_id, spec))
    return chosen


def _withhold_or_reject(
    register: Any, name: str, tools: list[tuple[str, Mapping[str, Any]]], reason: str
) -> None:
    if not tools:
        register.reject(reason)
    for tool_id, _spec in tools:
        register.withhold(tool_id, reason)
