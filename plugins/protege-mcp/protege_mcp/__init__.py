"""protege-mcp: the tools of configured Model Context Protocol servers as protege tools.

``protege sync`` lists each server's tools and records them (``refresh_tools``); every
process then offers what the last sync recorded (``register_tools``), so serving never
waits on a server being up, and a server cannot change what it offers between syncs.
Calls go through protege's dispatch like any tool's (gates, schema, timeout, approval,
fence), to one session per server per process, ended with the installation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protege import hookimpl
from protege_mcp.listing import refresh
from protege_mcp.registration import register_recorded
from protege_mcp.settings import DISTRIBUTION, McpSettings
from protege_mcp.tools import McpTool, Sessions

if TYPE_CHECKING:
    from protege import Config, Installation


@hookimpl
def plugin_settings() -> type[McpSettings]:
    """Declare ``[plugins.protege-mcp]``: the servers, checked by protege."""
    return McpSettings


@hookimpl
def register_tools(register: Any, config: Config, recorded: Callable[[str], Any]) -> None:
    """Offer the tools the last sync recorded of each configured server."""
    register_recorded(register, settings_of(config), recorded)


@hookimpl
def refresh_tools(
    app: Installation, record: Callable[[str, Any], None], recorded: Callable[[str], Any]
) -> list[str]:
    """List each configured server's tools and record them (``protege sync``)."""
    return refresh(settings_of(app.config), record, recorded)


@hookimpl
def close_installation(app: Installation) -> None:
    """End the sessions and server processes the installation's MCP tools opened."""
    for sessions in {id(s): s for s in _sessions_of(app)}.values():
        sessions.close()


def settings_of(config: Config) -> McpSettings:
    """The plugin's checked settings in ``config`` (the defaults, no servers, if none)."""
    found = config.plugin_settings(DISTRIBUTION)
    return found if isinstance(found, McpSettings) else McpSettings()


def _sessions_of(app: Installation) -> list[Sessions]:
    return [
        entry.tool_class.sessions
        for entry in app.manifest
        if isinstance(entry.tool_class, type) and issubclass(entry.tool_class, McpTool)
    ]
