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
    # Every recorded tool, offered or withheld: (id, server, settings, spec, why withheld).
    known: list[tuple[str, str, ServerSettings, Mapping[str, Any], str | None]] = []
    for name, server in sorted(settings.servers.items()):
        data = recorded(key_for(name))
        if not isinstance(data, Mapping):
            register.reject(
                f"MCP server {name}: no tools of it are recorded yet (run `protege sync`)"
            )
            continue
        try:
            tools = _chosen_tools(register, name, server, data)
        except Exception as error:  # a record not in the shape sync writes: this server only
            register.reject(
                f"MCP server {name}: its record cannot be read ({type(error).__name__}); "
                "run `protege sync`"
            )
            continue
        withheld = _why_withheld(name, server, data)
        if withheld is not None and not tools:
            register.reject(withheld)
        known += [(tool_id, name, server, spec, withheld) for tool_id, spec in tools]
    # Clashes are decided over every known tool, withheld ones included: while one server
    # is down, another's tool of the same name must not take its id (and with it the
    # grants of toolkits made for the first).
    clashes = colliding((tool_id, f"{name}/{spec['name']}") for tool_id, name, _, spec, _ in known)
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
    for tool_id, name, server, spec, withheld in known:
        if tool_id in clashes:
            continue
        if withheld is not None:
            register.withhold(tool_id, withheld)
            continue
        try:
            made = tool_class(tool_id, name, server, spec, sessions)
        except Exception as error:  # a record's odd values: this tool only
            register.reject(
                f"MCP server {name}: the recorded tool {spec['name'][:64]!r} cannot be made a "
                f"tool ({type(error).__name__}); run `protege sync`"
            )
            continue
        register(made)
    return sessions


def _why_withheld(name: str, server: ServerSettings, data: Mapping[str, Any]) -> str | None:
    """Why the recorded tools of ``name`` cannot be offered now, or None if they can."""
    if data.get("fingerprint") != fingerprint(server):
        return f"the settings of MCP server {name} changed since the last sync (run `protege sync`)"
    if data.get("error"):
        error = str(data["error"]).removeprefix(f"MCP server {name}: ")
        return f"MCP server {name} did not answer the last sync ({data.get('failed_at')}): {error}"
    return None


def _chosen_tools(
    register: Any, name: str, server: ServerSettings, data: Mapping[str, Any]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The recorded tools the settings choose (allow-list), each with its id; what cannot
    be offered is rejected with the reason."""
    listed = data.get("tools") or []
    if not isinstance(listed, list):
        raise TypeError("tools is not a list")
    names = {str(spec.get("name")) for spec in listed if isinstance(spec, Mapping)}
    allowed = None if server.tools is None else set(server.tools)
    if allowed is not None and data.get("error") is None:
        for missing in sorted(allowed - names):
            register.reject(
                f"MCP server {name} lists no tool {missing!r} (named in its tools allow-list)"
            )
    chosen = []
    for spec in listed:
        problem = _shape_problem(spec)
        if problem is not None:
            register.reject(f"MCP server {name}: a recorded tool {problem}; run `protege sync`")
            continue
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


def _shape_problem(spec: Any) -> str | None:
    """What makes a recorded tool unusable (a record not written by sync), or None."""
    if not isinstance(spec, Mapping):
        return "is not a table"
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        return "has no name"
    if not isinstance(spec.get("description", ""), str):
        return f"{spec['name'][:64]!r} has a description that is not text"
    if not isinstance(spec.get("annotations") or {}, Mapping):
        return f"{spec['name'][:64]!r} has hints that are not a table"
    return None
