"""The record plugins keep of tools that live outside the process: written by the
``refresh_tools`` hook during sync, read back by ``register_tools`` in every process."""

from __future__ import annotations

import json
import logging
from typing import Any

import peewee

from protege import db
from protege.errors import ProtegeError
from protege.models.base import utcnow
from protege.models.listings import ToolListing
from protege.plugins import current_plugin, normalize

logger = logging.getLogger(__name__)

# What one key may hold: a listing of a thousand tools with long schemas fits many times.
MAX_RECORD_CHARS = 8 * 1024 * 1024
MAX_KEY_CHARS = 200


class RecordRefused(ProtegeError):
    """What a plugin asked to record cannot be kept (not JSON, too large, a bad key)."""


def read_listings(distribution: str) -> dict[str, Any]:
    """What ``distribution`` recorded at the last sync, by key; empty when it recorded
    nothing, or the database cannot give it (not connected, not yet migrated: sync does
    both, and records afresh)."""
    try:
        if not db.database.table_exists(ToolListing._meta.table_name):
            return {}
        rows = list(
            ToolListing.select(ToolListing.key, ToolListing.data).where(
                ToolListing.distribution == normalize(distribution)
            )
        )
    except (peewee.PeeweeException, ProtegeError, AttributeError) as error:
        # AttributeError: peewee's proxy before any database was bound to it.
        logger.debug("no tool listings read for %s: %s", distribution, error)
        return {}
    found: dict[str, Any] = {}
    for row in rows:
        try:
            found[row.key] = json.loads(row.data)
        except (ValueError, RecursionError):  # a row not written here, or tampered with
            logger.warning("the tool listing %s of %s is not JSON: ignored", row.key, distribution)
    return found


def write_listing(distribution: str, key: str, data: Any) -> None:
    """Keep ``data`` under ``key`` for ``distribution``, replacing what was there (None:
    forget the key)."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise RecordRefused(f"a record's key must be a string of 1 to {MAX_KEY_CHARS} characters")
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise RecordRefused(f"record {key!r} is not JSON data: {error}") from None
    if len(text) > MAX_RECORD_CHARS:
        raise RecordRefused(
            f"record {key!r} holds {len(text):,} characters, more than {MAX_RECORD_CHARS:,}"
        )
    name = normalize(distribution)
    if data is None:
        ToolListing.delete().where(
            (ToolListing.distribution == name) & (ToolListing.key == key)
        ).execute()
        return
    with db.database.atomic():
        updated = (
            ToolListing.update(data=text, recorded_at=utcnow())
            .where((ToolListing.distribution == name) & (ToolListing.key == key))
            .execute()
        )
        if not updated:
            ToolListing.create(distribution=name, key=key, data=text)


def refresh_listings(app: Any) -> list[str]:
    """Have each plugin of ``app`` (an installation) that implements ``refresh_tools`` list
    and record its tools: the first half of sync. Returns the lines to report: what the
    plugins said, and the plugins whose hook raised (what they recorded before is kept)."""
    plugins = app.plugins

    def record(key: str, data: Any) -> None:
        plugin = current_plugin()
        if plugin is None:
            raise RuntimeError("record is for a refresh_tools hook, while it runs")
        write_listing(plugin.source.distribution, key, data)

    earlier: dict[str, dict[str, Any]] = {}  # read once per plugin, before it records

    def recorded(key: str) -> Any:
        plugin = current_plugin()
        if plugin is None:
            raise RuntimeError("recorded is for a refresh_tools hook, while it runs")
        name = plugin.source.distribution
        if name not in earlier:
            earlier[name] = read_listings(name)
        return earlier[name].get(str(key))

    before = {id(plugin): _failures(plugin) for plugin in plugins.plugins}
    said = plugins.call_with_plugins("refresh_tools", app=app, record=record, recorded=recorded)
    lines = []
    for plugin, returned in said:
        if isinstance(returned, list | tuple):
            lines += [f"{plugin.source.distribution}: {line}" for line in returned]
    for plugin in plugins.plugins:
        if _failures(plugin) > before.get(id(plugin), 0):
            failure = plugin.failures["refresh_tools"]
            lines.append(
                f"plugin {plugin.source.distribution} could not list its tools "
                f"(refresh_tools raised {failure.error}); what it recorded before is kept"
            )
    return lines


def _failures(plugin: Any) -> int:
    failure = plugin.failures.get("refresh_tools")
    return int(failure.count) if failure is not None else 0
