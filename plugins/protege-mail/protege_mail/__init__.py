"""protege-mail: the built-in mail tools, ``send_email`` and ``search_emails``."""

from collections.abc import Callable
from typing import Any

from protege import Tool, hookimpl
from protege_mail.search import SearchEmailsTool
from protege_mail.send import SendEmailTool

TOOLS = (SendEmailTool, SearchEmailsTool)


@hookimpl
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer the mail tools to the manifest."""
    for tool_class in TOOLS:
        register(tool_class)
