"""The tool registry: the manifest of the tools host, built-ins and plugins offer.

Each installation builds its own (``build_manifest``); nothing here is kept per process.
"""

from __future__ import annotations

from protege.registry.entries import Origin, Rejected, Shadowed, ToolEntry
from protege.registry.manifest import Manifest, PluginReport, build_manifest

__all__ = [
    "Manifest",
    "Origin",
    "PluginReport",
    "Rejected",
    "Shadowed",
    "ToolEntry",
    "build_manifest",
]
