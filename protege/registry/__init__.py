"""The tool registry: one manifest per process of the tools host, built-ins and plugins offer."""

from __future__ import annotations

import threading

from protege import plugins
from protege.config import load_config
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
    "manifest",
    "refresh",
]

_lock = threading.Lock()
_manifest: Manifest | None = None


def manifest() -> Manifest:
    """This process's manifest, built on first use from the configuration and installed plugins."""
    global _manifest
    with _lock:
        if _manifest is None:
            _manifest = build_manifest(load_config(), plugins.plugin_host())
        return _manifest


def refresh() -> Manifest:
    """Rescan plugins and host modules and rebuild the manifest (for sync and tests)."""
    global _manifest
    plugins.refresh()
    with _lock:
        _manifest = None
    return manifest()
