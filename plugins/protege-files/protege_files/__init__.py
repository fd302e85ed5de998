"""protege-files: the built-in file tools, ``read_attachment`` and ``create_file``."""

from collections.abc import Callable
from typing import Any

from protege import Tool, hookimpl
from protege_files.create import CreateFileTool
from protege_files.read import ReadAttachmentTool
from protege_files.settings import FilesSettings

TOOLS: tuple[type[Tool], ...] = (ReadAttachmentTool, CreateFileTool)


@hookimpl
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer the file tools to the manifest."""
    for tool_class in TOOLS:
        register(tool_class)


@hookimpl
def plugin_settings() -> type[FilesSettings]:
    """Declare the file tools' limits: ``[plugins.protege-files]``, checked by protege."""
    return FilesSettings
