"""The system toolkits and ``sync``, which keeps them true to the live manifest.

*All Tools* always holds every tool in the manifest: each sync rewrites its members.
*Default Tools* is created by the first sync holding every built-in tool, is granted to each
new agent, and from then on its members are the operator's: sync never changes them again, but
reports the built-in tools it lacks (a new built-in, say), for the operator to add or leave out.
"""

from __future__ import annotations

import attrs

from protege import db
from protege.errors import ProtegeError, did_you_mean
from protege.models.toolkits import (
    ALL_TOOLS,
    DEFAULT_TOOLS,
    SYSTEM_TOOLKIT_NAMES,
    Toolkit,
)
from protege.registry import Manifest, Origin

DESCRIPTIONS = {
    ALL_TOOLS: "Every tool in the manifest; rewritten by each `protege sync`.",
    DEFAULT_TOOLS: "Granted to every new agent. Starts with the built-in tools; yours to edit.",
}


class HostModulesBroken(ProtegeError):
    """Sync refused: a host tool module failed to import, so the manifest lacks its tools."""


class PluginSettingsRefused(ProtegeError):
    """Sync refused: protege.toml has settings a plugin cannot use, so the manifest lacks
    that plugin's tools (a typo would otherwise take them out of All Tools)."""


def refuse_incomplete(manifest: Manifest) -> None:
    """Raise when ``manifest`` lacks tools for a reason the operator must fix first: a
    host module that failed to import, or a plugin whose settings were refused."""
    if manifest.host_import_errors:
        raise HostModulesBroken("sync changed nothing: " + "; ".join(manifest.host_import_errors))
    refused = [
        f"plugin {r.plugin.source.distribution}: {r.settings_error}"
        for r in manifest.plugins
        if r.settings_error
    ]
    if refused:
        raise PluginSettingsRefused(
            "sync changed nothing: " + "; ".join(refused) + " (fix it, then sync again)"
        )


@attrs.frozen
class SyncReport:
    """What one sync changed; empty lists everywhere mean it changed nothing."""

    migrations: list[str]
    created: list[str]
    added: list[str]
    removed: list[str]
    default_tools_lacks: list[str] = attrs.field(factory=list)  # built-ins; not added
    stale: dict[str, list[str]] = attrs.field(factory=dict)  # toolkit: ids nothing offers
    # Plugins that could not list their outside tools (``refresh_tools``), one line each.
    listing_problems: list[str] = attrs.field(factory=list)
    # The manifest this sync brought the toolkits in line with.
    manifest: Manifest | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def changed(self) -> bool:
        """Whether anything changed (what Default Tools lacks is reported, not changed)."""
        return bool(self.migrations or self.created or self.added or self.removed)

    def as_dict(self) -> dict[str, object]:
        """The report as plain JSON data."""
        return {
            "migrations_applied": self.migrations,
            "toolkits_created": self.created,
            "all_tools_added": self.added,
            "all_tools_removed": self.removed,
            "default_tools_lacks_builtins": self.default_tools_lacks,
            "stale_members": self.stale,
            "listing_problems": self.listing_problems,
        }


def sync(manifest: Manifest) -> SyncReport:
    """Apply migrations, then bring the system toolkits in line with ``manifest``.

    Idempotent; meant to run on every deploy (``protege sync``). A host tool module that
    failed to import (``HostModulesBroken``), or settings a plugin refused
    (``PluginSettingsRefused``), stop sync before it changes anything: their tools would
    otherwise leave All Tools.
    """
    refuse_incomplete(manifest)
    migrations = db.migrate()
    created: list[str] = []
    with db.exclusive():
        live = set(manifest.ids())
        all_tools = Toolkit.all_tools()
        before = set() if all_tools is None else set(all_tools.member_tool_ids)
        all_tools = all_tools or _create_system_toolkit(ALL_TOOLS, [], created)
        # A withheld tool (its server was down at this sync) keeps its place: it comes back
        # when its server answers, rather than leaving every toolkit that lists it.
        kept = before & manifest.withheld_ids()
        added, removed = sorted(live - before), sorted(before - live - kept)
        if added or removed:
            all_tools.member_tool_ids = sorted(live | kept)
            all_tools.save()
        builtins = manifest.ids(Origin.BUILTIN)
        default_tools = Toolkit.default_tools()
        if default_tools is None:
            default_tools = _create_system_toolkit(DEFAULT_TOOLS, builtins, created)
        lacks = sorted(set(builtins) - set(default_tools.member_tool_ids))
    return SyncReport(
        migrations=migrations,
        created=created,
        added=added,
        removed=removed,
        default_tools_lacks=lacks,
        stale=stale_members(manifest),
        manifest=manifest,
    )


def stale_members(manifest: Manifest) -> dict[str, list[str]]:
    """Each toolkit's members that no tool in ``manifest`` answers to (an uninstalled
    plugin, a renamed tool), by toolkit name; they are skipped when tools are resolved."""
    found: dict[str, list[str]] = {}
    for toolkit in Toolkit.select().order_by(Toolkit.name):
        gone = [i for i in toolkit.member_tool_ids if i not in manifest]
        if gone:
            found[toolkit.name] = gone
    return found


def describe_stale(toolkit: str, tool_ids: list[str], manifest: Manifest) -> str:
    """One line saying that ``toolkit`` lists tools nothing offers, and how to clean it up
    (or, for tools withheld until their server answers a sync, why they are skipped)."""
    withheld = {w.tool_id: w for w in manifest.withheld}
    lines = []
    gone = [i for i in tool_ids if i not in withheld]
    if gone:
        named = ", ".join(f"{i}{did_you_mean(i, manifest.ids())}" for i in gone)
        lines.append(
            f"toolkit {toolkit} lists {named}, which no installed tool has (skipped; "
            f'`protege toolkits remove-tools "{toolkit}" {" ".join(gone)}` drops them)'
        )
    held = [i for i in tool_ids if i in withheld]
    if held:
        lines.append(
            f"toolkit {toolkit} lists {', '.join(held)}, withheld until a sync can list "
            "them again (skipped meanwhile; `protege tools` says why)"
        )
    return "; ".join(lines)


def _create_system_toolkit(key: str, initial_ids: list[str], created: list[str]) -> Toolkit:
    name = SYSTEM_TOOLKIT_NAMES[key]
    if Toolkit.get_or_none(Toolkit.name == name) is not None:
        raise ProtegeError(
            f"a toolkit named {name!r} already exists but is not the system toolkit: "
            "rename it, then run sync again"
        )
    created.append(name)
    return Toolkit.create(
        name=name, description=DESCRIPTIONS[key], member_tool_ids=initial_ids, system_key=key
    )
