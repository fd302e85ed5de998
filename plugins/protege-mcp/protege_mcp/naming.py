"""Tool ids for MCP tools: the server's prefix and the tool's name, made into an id a model
can call, or refused with the reason. Never renamed twice: a name that collides with
another is refused with it, not numbered."""

from __future__ import annotations

import re
from collections.abc import Iterable

# The tool contract's id (DESIGN: the name the model calls a tool by).
TOOL_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_INVALID_RUN = re.compile(r"[^a-z0-9_]+")


class NameRefused(ValueError):
    """An MCP tool's name cannot become a protege tool id (the message says why)."""


def tool_id_for(prefix: str, name: str) -> str:
    """The id the MCP tool ``name`` is offered under: ``prefix`` + ``name``, lower-cased,
    each run of characters an id cannot hold made one ``_``. ``NameRefused`` when what
    is left still cannot be an id (it must start with a letter and be at most 64
    characters)."""
    made = _INVALID_RUN.sub("_", (prefix + name).lower()).strip("_")
    if not TOOL_ID_PATTERN.match(made):
        shown = made if len(made) <= 80 else made[:77] + "..."
        raise NameRefused(
            f"the tool name {name!r} cannot be made a tool id (it gave {shown!r}; an id starts "
            "with a letter, then at most 63 letters, digits or _): set a prefix for its server"
        )
    return made


def colliding(ids: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Of ``(tool_id, what)`` pairs, each id that more than one ``what`` would take, with
    them all (``what`` says which server's which tool)."""
    taken: dict[str, list[str]] = {}
    for tool_id, what in ids:
        taken.setdefault(tool_id, []).append(what)
    return {tool_id: whats for tool_id, whats in taken.items() if len(whats) > 1}
