"""What one ``protege`` command works with, made when it first needs it and kept for the
rest of that command: the installed plugins and the manifest they and the host's tool
modules make. Nothing is kept in the process beyond the command (a command run twice in
one process, as the tests do, scans and imports again)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from protege.plugins import PluginHost
    from protege.registry import Manifest

_PLUGINS = "protege.plugins"
_MANIFEST = "protege.manifest"


def plugins() -> PluginHost:
    """The plugins this command loaded (protege's internal ones included)."""
    from protege.plugins import PluginHost

    meta = _meta()
    if meta is None:
        return PluginHost()
    if _PLUGINS not in meta:
        meta[_PLUGINS] = PluginHost()
    return meta[_PLUGINS]


def manifest() -> Manifest:
    """The manifest of this folder's ``protege.toml`` and the plugins this command loaded."""
    from protege.config import load_config
    from protege.registry import build_manifest

    meta = _meta()
    if meta is not None and _MANIFEST in meta:
        return meta[_MANIFEST]
    made = build_manifest(load_config(), plugins())
    if meta is not None:
        meta[_MANIFEST] = made
    return made


def _meta() -> dict | None:
    context = click.get_current_context(silent=True)
    return None if context is None else context.find_root().meta
