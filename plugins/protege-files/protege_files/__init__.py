"""protege-files: the built-in plugin that will carry read_attachment and create_file.

Those tools have not landed yet; until they do this plugin registers no tool, so nothing in
the manifest pretends to work.
"""

from collections.abc import Callable
from typing import Any

from protege import Tool, hookimpl

TOOLS: tuple[type[Tool], ...] = ()


@hookimpl
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer this plugin's tools to the manifest."""
    for tool_class in TOOLS:
        register(tool_class)
