"""The records a manifest is made of: offered tools, shadowed tools, rejected classes."""

from __future__ import annotations

from enum import StrEnum

import attrs

from protege.reprs import fields_repr
from protege.tool import Tool


class Origin(StrEnum):
    """Where a tool comes from; on an id collision the earlier origin wins."""

    HOST = "host"
    BUILTIN = "builtin"
    PLUGIN = "plugin"

    @property
    def rank(self) -> int:
        """Precedence on collisions: lower wins."""
        return list(Origin).index(self)


@attrs.frozen(repr=False)
class ToolEntry:
    """One tool class in the manifest, with where it came from.

    ``source`` is the host module for host tools and the distribution for plugin tools.
    """

    __repr__ = fields_repr

    tool_class: type[Tool]
    origin: Origin
    source: str
    version: str | None = None

    @property
    def id(self) -> str:
        """The tool id, the name the model calls it by."""
        return self.tool_class.id

    @property
    def display_name(self) -> str:
        """The tool's human label."""
        return self.tool_class.display_name

    @property
    def summary(self) -> str:
        """The tool's operator-facing one-liner."""
        return self.tool_class.summary

    @property
    def description(self) -> str:
        """The tool's model-facing description."""
        return self.tool_class.description

    @property
    def requires_approval(self) -> bool:
        """Whether the tool's author made every call wait for approval."""
        return self.tool_class.requires_approval is True

    @property
    def annotations(self) -> dict[str, bool]:
        """What the tool's author (or its MCP server) says of its calls: read-only,
        destructive, idempotent, open-world; only what is known."""
        return dict(self.tool_class.annotations)

    @property
    def server(self) -> str | None:
        """The outside server that carries out the tool's calls (an MCP server), if any."""
        return self.tool_class.server

    @property
    def class_path(self) -> str:
        """``module:QualName`` of the tool class."""
        return f"{self.tool_class.__module__}:{self.tool_class.__qualname__}"

    def describe_source(self) -> str:
        """Origin and source in one phrase, e.g. ``plugin protege-weather 1.0``."""
        version = f" {self.version}" if self.version else ""
        server = f" (server {self.server})" if self.server else ""
        return f"{self.origin} {self.source}{version}{server}"

    def as_dict(self) -> dict[str, object]:
        """The entry as plain JSON data."""
        return {
            "id": self.id,
            "display_name": self.display_name,
            "summary": self.summary,
            "origin": str(self.origin),
            "source": self.source,
            "version": self.version,
            "server": self.server,
            "annotations": self.annotations,
            "class": self.class_path,
            # What the model is told of the tool.
            "description": self.description,
            "input_schema": self.tool_class.input_schema,
        }


@attrs.frozen(repr=False)
class Shadowed:
    """A tool that lost an id collision: never offered, never dispatched."""

    __repr__ = fields_repr

    entry: ToolEntry
    winner: ToolEntry

    def as_dict(self) -> dict[str, object]:
        """The shadowed entry as plain JSON data, naming its winner."""
        return {**self.entry.as_dict(), "shadowed_by": self.winner.as_dict()}


@attrs.frozen(repr=False)
class Rejected:
    """A class offered as a tool that breaks the tool contract, or a host module that failed."""

    __repr__ = fields_repr

    origin: Origin
    source: str
    reason: str

    def as_dict(self) -> dict[str, object]:
        """The rejection as plain JSON data."""
        return {"origin": str(self.origin), "source": self.source, "reason": self.reason}


@attrs.frozen(repr=False)
class Withheld:
    """A tool a plugin knows of but cannot offer now (its server was down at the last sync):
    never offered, yet kept by sync in *All Tools* and in the toolkits that list it."""

    __repr__ = fields_repr

    tool_id: str
    source: str  # the plugin's distribution
    reason: str

    def as_dict(self) -> dict[str, object]:
        """The withheld tool as plain JSON data."""
        return {"id": self.tool_id, "source": self.source, "reason": self.reason}
