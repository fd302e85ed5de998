"""protege-web: the built-in web tools, ``web_fetch`` (behind the SSRF guard in
``protege_web.guard``) and ``web_search`` (keyless, through DuckDuckGo)."""

from collections.abc import Callable
from typing import Any

from protege import Tool, hookimpl
from protege_web.settings import WebSettings
from protege_web.tools import WebFetchTool, WebSearchTool

TOOLS: tuple[type[Tool], ...] = (WebFetchTool, WebSearchTool)


@hookimpl
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer the web tools to the manifest."""
    for tool_class in TOOLS:
        register(tool_class)


@hookimpl
def plugin_settings() -> type[WebSettings]:
    """Declare the web tools' limits: ``[plugins.protege-web]``, checked by protege."""
    return WebSettings
