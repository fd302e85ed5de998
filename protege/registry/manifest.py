"""The manifest: every tool this process can offer, merged from host, built-in and plugin tools."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import attrs

from protege.config import Config
from protege.errors import REPORTED, InvalidTool, did_you_mean
from protege.plugins import (
    DISABLE_VARIABLE,
    LOAD_VARIABLE,
    LoadedPlugin,
    PluginHost,
    PluginStatus,
    current_plugin,
    normalize,
)
from protege.registry.entries import Origin, Rejected, Shadowed, ToolEntry, Withheld
from protege.registry.host import host_resolver_classes, host_tool_classes
from protege.registry.settings import read_plugin_settings
from protege.reprs import fields_repr
from protege.sections import Resolver, resolver_problems
from protege.tool import Tool, check_tool_class

logger = logging.getLogger(__name__)
REPLY_TOOL = "send_email"


@attrs.frozen(repr=False)
class PluginReport:
    """One plugin as ``protege plugins`` shows it: what it is, what it did, and its status."""

    __repr__ = fields_repr

    plugin: LoadedPlugin
    tool_ids: tuple[str, ...]
    rejected: tuple[str, ...] = ()  # why each class it offered was not registered
    settings_error: str | None = None  # its [plugins.NAME] table was refused: skipped
    withheld: tuple[Withheld, ...] = ()  # known tools it cannot offer now, and why

    @property
    def status(self) -> PluginStatus:
        """How the plugin stands in this manifest."""
        return PluginStatus.ERROR if self.settings_error else self.plugin.status

    @property
    def error(self) -> str | None:
        """Why it is not in use, if it is not."""
        return self.settings_error or self.plugin.error

    def as_dict(self) -> dict[str, object]:
        """The report as plain JSON data."""
        source = self.plugin.source
        return {
            "distribution": source.distribution,
            "version": source.version,
            "entry_point": source.entry_point,
            "origin": source.origin,
            "hooks": list(self.plugin.hooks),
            "tools": list(self.tool_ids),
            "rejected": list(self.rejected),
            "withheld": [w.as_dict() for w in self.withheld],
            "status": str(self.status),
            "error": self.error,
            "failures": [
                {"hook": f.hook, "error": f.error, "count": f.count}
                for f in self.plugin.failures.values()
            ],
        }


@attrs.frozen(repr=False)
class Manifest:
    """The tools on offer in this process, ordered by id, with everything that was left out.

    ``tools`` are the winners, one per id. ``shadowed`` lost an id collision; ``rejected``
    broke the tool contract (or, for host modules, failed to import). ``host_import_errors``
    repeats the host modules that failed to import, one line each: their tools are missing,
    so what depends on the full set of tools (sync) must not go on.
    """

    __repr__ = fields_repr

    tools: tuple[ToolEntry, ...]
    shadowed: tuple[Shadowed, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    plugins: tuple[PluginReport, ...] = ()
    missing_plugins: tuple[str, ...] = ()
    host_import_errors: tuple[str, ...] = ()
    unmatched_disabled: tuple[str, ...] = ()
    # Tool ids the host overrides on purpose (``overrides`` in protege.toml).
    overrides: tuple[str, ...] = ()
    # Each plugin's checked settings, and the [plugins.NAME] tables no plugin takes.
    settings: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    settings_problems: tuple[str, ...] = ()
    # The host app's prompt-section resolvers, one per name, in the order declared.
    resolvers: tuple[type[Resolver], ...] = ()
    # Tools a plugin knows of but cannot offer now (their server was down at the last sync):
    # not offered, yet kept in All Tools and in toolkits by sync.
    withheld: tuple[Withheld, ...] = ()
    _by_id: dict[str, ToolEntry] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {entry.id: entry for entry in self.tools})

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, tool_id: str) -> ToolEntry | None:
        """The entry offered under ``tool_id``, or None."""
        return self._by_id.get(tool_id)

    def withheld_ids(self) -> set[str]:
        """The ids of the tools withheld from this manifest (known, not offered now)."""
        return {w.tool_id for w in self.withheld if w.tool_id not in self._by_id}

    def ids(self, origin: Origin | None = None) -> list[str]:
        """The offered tool ids, sorted; only those of ``origin`` when given."""
        return [e.id for e in self.tools if origin is None or e.origin is origin]

    @property
    def can_reply(self) -> bool:
        """Whether a ``send_email`` tool is on offer: without it no agent can answer mail."""
        return REPLY_TOOL in self

    def acknowledged(self, shadowed: Shadowed) -> bool:
        """Whether ``shadowed`` lost to a host tool that ``overrides`` names: on purpose."""
        return shadowed.winner.origin is Origin.HOST and shadowed.entry.id in self.overrides

    def problems(self) -> list[str]:
        """Every problem an operator should look at, one line each."""
        installed = [r.plugin.source.distribution for r in self.plugins]
        lines = [
            f"plugin {r.plugin.source.distribution} {r.plugin.source.version}: {r.error}"
            for r in self.plugins
            if r.status is PluginStatus.ERROR
        ]
        lines += [
            f"{LOAD_VARIABLE} names {name}, which is not installed{did_you_mean(name, installed)}"
            for name in self.missing_plugins
        ]
        lines += [
            f"{DISABLE_VARIABLE} names {name}, which is not installed"
            f"{did_you_mean(name, installed)}"
            for name in self.unmatched_disabled
        ]
        lines += list(self.settings_problems)
        lines += [f"rejected ({r.origin} {r.source}): {r.reason}" for r in self.rejected]
        lines += [
            f"tool {w.tool_id} from {w.source} is withheld: {w.reason}" for w in self.withheld
        ]
        lines += [
            f"tool {s.entry.id} from {s.entry.describe_source()} is shadowed by "
            f"{s.winner.describe_source()}"
            for s in self.shadowed
            if not self.acknowledged(s)
        ]
        overridden = {s.entry.id for s in self.shadowed if self.acknowledged(s)}
        lines += [
            f"overrides in protege.toml names {tool_id}, but no host tool takes that id "
            "from a plugin"
            for tool_id in self.overrides
            if tool_id not in overridden
        ]
        return lines


class _Collector:
    """Gathers candidate entries and rejections while sources are read."""

    def __init__(self) -> None:
        self.candidates: list[ToolEntry] = []
        self.rejected: list[Rejected] = []
        self._seen: set[ToolEntry] = set()  # a list's `in` made 200 plugins cost 20,000 compares

    def offer(
        self, tool_class: object, origin: Origin, source: str, version: str | None
    ) -> ToolEntry | None:
        try:
            check_tool_class(tool_class)
        except InvalidTool as error:
            self.rejected.append(Rejected(origin, source, str(error)))
            return None
        entry = ToolEntry(cast(type[Tool], tool_class), origin, source, version)
        if entry in self._seen:
            return None
        self._seen.add(entry)
        self.candidates.append(entry)
        return entry


# What a plugin recorded at the last sync, by key, given its distribution name.
ListingReader = Callable[[str], Mapping[str, Any]]


def build_manifest(
    config: Config, plugins: PluginHost, *, listings: ListingReader | None = None
) -> Manifest:
    """Read the host modules in ``config`` and the tools of ``plugins`` into a manifest.

    ``listings`` reads what a plugin recorded at the last sync (its outside tools), for the
    plugins' ``recorded(key)``; without it they are given nothing recorded."""
    collector = _Collector()
    import_errors: list[str] = []
    for module_name in config.tool_modules:
        classes, errors = host_tool_classes(module_name, config.root)
        import_errors += errors
        collector.rejected.extend(Rejected(Origin.HOST, module_name, e) for e in errors)
        for tool_class in classes:
            collector.offer(tool_class, Origin.HOST, tool_class.__module__, None)
    resolvers = _host_resolvers(config, collector)
    settings = read_plugin_settings(config, plugins)
    checked_config = attrs.evolve(config, plugins={**config.plugins, **settings.values})
    reports = _register_plugin_tools(plugins, collector, settings.errors, checked_config, listings)
    tools, shadowed = _resolve(collector.candidates)
    for loser in shadowed:
        if loser.winner.origin is Origin.HOST and loser.entry.id in config.overrides:
            continue
        logger.warning(
            "tool %s from %s is shadowed by %s",
            loser.entry.id,
            loser.entry.describe_source(),
            loser.winner.describe_source(),
            extra={REPORTED: True},
        )
    return Manifest(
        tools=tools,
        shadowed=shadowed,
        rejected=tuple(collector.rejected),
        plugins=reports,
        missing_plugins=plugins.missing,
        host_import_errors=tuple(import_errors),
        unmatched_disabled=plugins.unmatched_disabled,
        overrides=config.overrides,
        settings=settings.values,
        settings_problems=settings.problems,
        resolvers=resolvers,
        withheld=tuple(w for r in reports for w in r.withheld),
    )


def _host_resolvers(config: Config, collector: _Collector) -> tuple[type[Resolver], ...]:
    """The resolvers of the host's modules that keep the contract, the first of each name
    (the modules' import errors are reported with their tools already)."""
    taken: dict[str, type[Resolver]] = {}
    for module_name in config.tool_modules:
        classes, _errors = host_resolver_classes(module_name, config.root)
        for resolver in classes:
            problems = resolver_problems(resolver)
            first = taken.get(resolver.name) if not problems else None
            if first is not None:
                problems = [f"its name {resolver.name!r} is taken by {first.__qualname__}"]
            if problems:
                reason = f"resolver {resolver.__qualname__}: " + "; ".join(problems)
                collector.rejected.append(Rejected(Origin.HOST, resolver.__module__, reason))
                continue
            taken[resolver.name] = resolver
    return tuple(taken.values())


class ToolRegistration:
    """The ``register`` a ``register_tools`` hook is handed: call it with each tool class;
    ``withhold`` and ``reject`` say what the plugin knows of but cannot offer.

    Each call is attributed to the plugin whose hook implementation is running; one kept and
    called after the hook returned raises."""

    def __init__(self, collector: _Collector) -> None:
        self._collector = collector
        self.registered: dict[int, list[ToolEntry]] = {}
        self.withheld: dict[int, list[Withheld]] = {}

    def __call__(self, tool_class: type[Tool]) -> None:
        plugin = self._plugin("register")
        source = plugin.source
        entry = self._collector.offer(
            tool_class, Origin(source.origin), source.distribution, source.version
        )
        if entry is not None:
            self.registered.setdefault(id(plugin), []).append(entry)

    def withhold(self, tool_id: str, reason: str) -> None:
        """Name a tool the plugin knows of (from its record) but cannot offer now, and why:
        it is not offered, and sync keeps it where toolkits list it."""
        plugin = self._plugin("withhold")
        self.withheld.setdefault(id(plugin), []).append(
            Withheld(str(tool_id), plugin.source.distribution, str(reason))
        )

    def reject(self, reason: str) -> None:
        """Report something the plugin could not make a tool of, as a class breaking the
        tool contract is reported."""
        plugin = self._plugin("reject")
        source = plugin.source
        self._collector.rejected.append(
            Rejected(Origin(source.origin), source.distribution, str(reason))
        )

    def _plugin(self, what: str) -> LoadedPlugin:
        plugin = current_plugin()
        if plugin is None:
            raise RuntimeError(f"{what} is for a register_tools hook, while it runs")
        return plugin


def _recorded_reader(listings: ListingReader | None) -> Callable[[str], Any]:
    """``recorded(key)`` for ``register_tools``: what the calling plugin recorded under
    ``key`` at the last sync, read once per plugin; None when nothing was."""
    cache: dict[str, Mapping[str, Any]] = {}

    def recorded(key: str) -> Any:
        plugin = current_plugin()
        if plugin is None:
            raise RuntimeError("recorded is for a register_tools hook, while it runs")
        name = normalize(plugin.source.distribution)
        if name not in cache:
            cache[name] = {} if listings is None else listings(name)
        return cache[name].get(str(key))

    return recorded


def _register_plugin_tools(
    plugins: PluginHost,
    collector: _Collector,
    refused: Mapping[str, str],
    config: Config,
    listings: ListingReader | None,
) -> tuple[PluginReport, ...]:
    register = ToolRegistration(collector)
    plugins.hook.register_tools(
        register=register, config=config, recorded=_recorded_reader(listings)
    )
    registered = register.registered
    for plugin in plugins.plugins:
        if plugin.status is PluginStatus.ERROR or normalize(plugin.source.distribution) in refused:
            withdrawn = registered.pop(id(plugin), [])
            register.withheld.pop(id(plugin), None)
            collector.candidates[:] = [c for c in collector.candidates if c not in withdrawn]
    return tuple(
        PluginReport(
            plugin,
            tuple(sorted(e.id for e in registered.get(id(plugin), []))),
            tuple(
                r.reason
                for r in collector.rejected
                if r.origin is not Origin.HOST and r.source == plugin.source.distribution
            ),
            refused.get(normalize(plugin.source.distribution)),
            tuple(register.withheld.get(id(plugin), [])),
        )
        for plugin in plugins.plugins
    )


def _resolve(candidates: list[ToolEntry]) -> tuple[tuple[ToolEntry, ...], tuple[Shadowed, ...]]:
    # Host modules keep the order tool_modules gives; between plugins, the first by
    # distribution name wins (pluggy calls them in its own order, latest registered first).
    ranked = sorted(
        candidates,
        key=lambda entry: (
            entry.origin.rank,
            "" if entry.origin is Origin.HOST else normalize(entry.source),
        ),
    )
    winners: dict[str, ToolEntry] = {}
    shadowed = []
    for entry in ranked:
        winner = winners.setdefault(entry.id, entry)
        if winner is not entry:
            shadowed.append(Shadowed(entry, winner))
    tools = tuple(sorted(winners.values(), key=lambda entry: entry.id))
    return tools, tuple(sorted(shadowed, key=lambda s: (s.entry.id, s.entry.origin.rank)))
