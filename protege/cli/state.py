"""What one ``protege`` command works with, made when it first needs it and kept for the
rest of that command: the installed plugins and the manifest they and the host's tool
modules make. Nothing is kept in the process beyond the command (a command run twice in
one process, as the tests do, scans and imports again)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from protege.config import Config
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
    config = load_config()
    made = build_manifest(config, plugins(), listings=_recorded_listings(config))
    if meta is not None:
        meta[_MANIFEST] = made
    return made


def _recorded_listings(config: Config) -> Callable[[str], Mapping[str, Any]]:
    """What a plugin recorded at the last sync (its MCP servers' tools), read from the
    configured database, bound on the first read only: a command whose plugins record
    nothing opens no database. A database that is not there or cannot be opened gives
    nothing recorded, as before the first sync; nothing is created."""

    def read(distribution: str) -> Mapping[str, Any]:
        from protege import db
        from protege.registry.listings import read_listings

        if db.database.process_database is None:
            if not db.exists(config.database_url):
                return {}
            try:
                db.connect(config.database_url)
            except db.DatabaseError:
                return {}
        return read_listings(distribution)

    return read


def _meta() -> dict | None:
    context = click.get_current_context(silent=True)
    return None if context is None else context.find_root().meta
