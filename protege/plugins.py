"""Finding, selecting and loading plugins, so that one broken plugin never stops the others."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import re
import threading
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any

import attrs
import pluggy

from protege import hookspecs
from protege.errors import REPORTED
from protege.reprs import fields_repr

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "protege"
BUILTIN_DISTRIBUTIONS = frozenset({"protege-mail", "protege-files", "protege-web"})
# protege's own defaults (transports, blob stores, ingresses...), each a module implementing
# hooks as any plugin does, registered before the installed plugins, as datasette registers
# its default plugins.
INTERNAL_PLUGINS: tuple[str, ...] = ("protege.gateway.sender_decision",)
LOAD_VARIABLE = "PROTEGE_LOAD_PLUGINS"
DISABLE_VARIABLE = "PROTEGE_DISABLE_PLUGINS"


@functools.lru_cache(maxsize=4096)  # asked for each plugin's name many times per manifest
def normalize(distribution: str) -> str:
    """A distribution name in canonical form (PEP 503): ``Protege_Web`` is ``protege-web``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


class PluginStatus(StrEnum):
    """Where a plugin stands after loading."""

    OK = "ok"
    ERROR = "error"
    DISABLED = "disabled"


@attrs.frozen(repr=False)
class PluginSource:
    """One ``protege`` entry point of an installed distribution, before anything is imported."""

    __repr__ = fields_repr

    distribution: str
    version: str
    entry_point: str
    value: str

    @property
    def builtin(self) -> bool:
        """True for the first-party plugins that ship with protege."""
        return normalize(self.distribution) in BUILTIN_DISTRIBUTIONS

    @property
    def origin(self) -> str:
        """``builtin`` or ``plugin``: how the registry ranks this plugin's tools."""
        return "builtin" if self.builtin else "plugin"


@attrs.define(repr=False)
class LoadedPlugin:
    """A plugin source and what became of it: its status, error, and the hooks it implements."""

    __repr__ = fields_repr

    source: PluginSource
    status: PluginStatus
    error: str | None = None
    module: Any = None
    hooks: tuple[str, ...] = ()
    # The full traceback of what broke it, for PROTEGE_DEBUG=1; reports show ``error``.
    traceback: str | None = None


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def error_line(error: BaseException) -> str:
    """The one-line form of an exception, as reports show it."""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def discover(path: Sequence[str] | None = None) -> tuple[PluginSource, ...]:
    """Every ``protege`` entry point installed, ordered by distribution name then entry point.

    A distribution found twice on the path counts once (the first, as for imports).
    """
    if path is None:
        return _discover_installed()
    return _scan(importlib.metadata.distributions(path=list(path)))


@functools.cache
def _discover_installed() -> tuple[PluginSource, ...]:
    # importlib.metadata's own scan skips a distribution found again further along the
    # path (a folder listed twice) before reading anything of it; its METADATA, read below
    # for the name and version, is then read once.
    found: dict[int, tuple[importlib.metadata.Distribution, list[importlib.metadata.EntryPoint]]]
    found = {}
    try:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken distribution (an egg with no name) fails the whole scan
        return _scan(importlib.metadata.distributions())
    for entry_point in entry_points:
        if entry_point.dist is not None:
            found.setdefault(id(entry_point.dist), (entry_point.dist, []))[1].append(entry_point)
    return _sources(found.values())


def _scan(distributions: Iterable[importlib.metadata.Distribution]) -> tuple[PluginSource, ...]:
    return _sources(
        (dist, [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP])
        for dist in distributions
    )


def _sources(
    found: Iterable[tuple[importlib.metadata.Distribution, list[importlib.metadata.EntryPoint]]],
) -> tuple[PluginSource, ...]:
    seen_distributions: set[str] = set()
    sources: list[PluginSource] = []
    for dist, entry_points in found:
        if not entry_points:
            continue
        name, version = _name_and_version(dist)
        if normalize(name) in seen_distributions:
            continue
        seen_distributions.add(normalize(name))
        sources.extend(
            PluginSource(distribution=name, version=version, entry_point=ep.name, value=ep.value)
            for ep in entry_points
        )
    return tuple(sorted(sources, key=lambda s: (normalize(s.distribution), s.entry_point)))


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    # Reading the two headers directly skips a full email parse of METADATA per plugin.
    headers: dict[str, str] = {}
    # The headers end at the first empty line; the long description after it can be long.
    for line in (dist.read_text("METADATA") or "").partition("\n\n")[0].splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key in ("Name", "Version"):
            headers.setdefault(key, value.strip())
    if len(headers) < 2:
        return dist.metadata["Name"] or "", dist.version
    return headers["Name"], headers["Version"]


@attrs.frozen(repr=False)
class Selection:
    """Which plugins the environment lets load; read before any plugin is imported."""

    __repr__ = fields_repr

    only: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Selection:
        """The selection ``PROTEGE_LOAD_PLUGINS`` and ``PROTEGE_DISABLE_PLUGINS`` describe."""
        environ = os.environ if environ is None else environ
        only = environ.get(LOAD_VARIABLE)
        return cls(
            only=None if only is None else _name_set(only),
            disabled=_name_set(environ.get(DISABLE_VARIABLE, "")),
        )

    def refusal(self, source: PluginSource) -> str | None:
        """Why ``source`` may not load, or None if it may."""
        name = normalize(source.distribution)
        if name in self.disabled:
            return f"disabled by {DISABLE_VARIABLE}"
        if self.only is not None and not source.builtin and name not in self.only:
            return f"not named in {LOAD_VARIABLE}"
        return None


def _name_set(value: str) -> frozenset[str]:
    return frozenset(normalize(part.strip()) for part in value.split(",") if part.strip())


class _Manager(pluggy.PluginManager):
    """pluggy's plugin manager, quicker at reading a module's hook implementations.

    pluggy looks at each attribute of a plugin with ``inspect.getattr_static``, which is
    careful for classes and instances but, for a module, reads the module's dictionary the
    long way; with hundreds of plugins that is much of what registering them costs.
    """

    def __init__(self, project_name: str) -> None:
        super().__init__(project_name)
        self._hooks_found: set[str] | None = None

    def register_hooks(self, plugin: Any, name: str) -> tuple[str, ...]:
        """Register ``plugin`` as ``register`` does, and return the names of the hooks it
        implements, sorted. They are noted while pluggy reads the plugin: pluggy's
        ``get_hookcallers`` would look through every plugin's implementations of every
        hook, for each plugin (quadratic in plugins)."""
        self._hooks_found = set()
        try:
            if self.register(plugin, name=name) is None:  # a blocked name: not registered
                return ()
            return tuple(sorted(self._hooks_found))
        finally:
            self._hooks_found = None

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        """As pluggy's, with the common case of a module's attribute read directly: a
        function carries its options, and anything that is not a function, a method or a
        class- or staticmethod is never a hook (as pluggy decides for modules too)."""
        opts = self._hookimpl_opts(plugin, name)
        if opts is not None and self._hooks_found is not None:
            self._hooks_found.add(opts.get("specname") or name)
        return opts

    def _hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        if type(plugin) is not types.ModuleType:
            return super().parse_hookimpl_opts(plugin, name)
        value = plugin.__dict__.get(name)
        if isinstance(value, types.FunctionType):
            opts = getattr(value, f"{self.project_name}_impl", None)
            return opts if isinstance(opts, dict) else None  # type: ignore[return-value]
        if isinstance(value, types.MethodType | classmethod | staticmethod):
            return super().parse_hookimpl_opts(plugin, name)
        return None


class PluginHost:
    """The plugins of one process: each imported and registered with pluggy, or reported why not."""

    def __init__(
        self, sources: Sequence[PluginSource] | None = None, selection: Selection | None = None
    ) -> None:
        self.selection = Selection.from_environment() if selection is None else selection
        self.manager = _Manager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        for module_name in INTERNAL_PLUGINS:
            self.manager.register(importlib.import_module(module_name), name=module_name)
        self.plugins: list[LoadedPlugin] = []
        claimed: dict[str, PluginSource] = {}
        for source in discover() if sources is None else sources:
            self.plugins.append(self._load(source, claimed))

    @property
    def hook(self) -> Any:
        """The hooks, to call as pluggy calls them: ``host.hook.on_event(app=..., ...)``."""
        return self.manager.hook

    @property
    def installed(self) -> tuple[str, ...]:
        """The normalized names of the installed plugin distributions."""
        return tuple(sorted({normalize(p.source.distribution) for p in self.plugins}))

    @property
    def missing(self) -> tuple[str, ...]:
        """Names in ``PROTEGE_LOAD_PLUGINS`` that no installed distribution has."""
        return tuple(sorted((self.selection.only or frozenset()) - set(self.installed)))

    @property
    def unmatched_disabled(self) -> tuple[str, ...]:
        """Names in ``PROTEGE_DISABLE_PLUGINS`` that no installed distribution has: a typo
        there would leave the plugin meant loaded."""
        return tuple(sorted(self.selection.disabled - set(self.installed)))

    def _load(self, source: PluginSource, claimed: dict[str, PluginSource]) -> LoadedPlugin:
        refusal = self.selection.refusal(source)
        if refusal is not None:
            return LoadedPlugin(source, PluginStatus.DISABLED, error=refusal)
        owner = claimed.setdefault(source.entry_point, source)
        if owner is not source:
            return self._broken(
                source,
                f"entry point name {source.entry_point!r} is already used by {owner.distribution}",
            )
        try:
            module = importlib.metadata.EntryPoint(
                name=source.entry_point, value=source.value, group=ENTRY_POINT_GROUP
            ).load()
            hooks = self.manager.register_hooks(
                module, name=f"{source.distribution}:{source.entry_point}"
            )
        except BaseException as error:  # even KeyboardInterrupt: one plugin's fault
            return self._broken(source, error_line(error), _traceback(error))
        unknown = [name for name in hooks if not getattr(self.manager.hook, name).has_spec()]
        if unknown:
            self.manager.unregister(module)
            return self._broken(source, f"implements unknown hook(s): {', '.join(unknown)}")
        return LoadedPlugin(source, PluginStatus.OK, module=module, hooks=hooks)

    def _broken(self, source: PluginSource, error: str, trace: str | None = None) -> LoadedPlugin:
        logger.warning(
            "plugin %s %s skipped: %s",
            source.distribution,
            source.version,
            error,
            extra={REPORTED: True},
        )
        return LoadedPlugin(source, PluginStatus.ERROR, error=error, traceback=trace)

    def call_each(
        self,
        hook: str,
        arguments: Callable[[LoadedPlugin], dict[str, Any]],
        returned: Callable[[LoadedPlugin, Any], None] | None = None,
    ) -> Iterator[tuple[LoadedPlugin, BaseException | None]]:
        """Call ``hook`` on each loaded plugin on its own, yielding the plugin and what it raised.

        Each plugin gets its own arguments, so a caller can tell whose call did what; one
        plugin raising does not stop the calls to the next. ``returned``, when given, is
        handed each plugin's return value.
        """
        implementations: dict[int, list[Any]] = {}
        for impl in getattr(self.manager.hook, hook).get_hookimpls():
            if not (impl.hookwrapper or impl.wrapper):
                implementations.setdefault(id(impl.plugin), []).append(impl)
        for plugin in self.plugins:
            if plugin.status is not PluginStatus.OK:
                continue
            impls = implementations.get(id(plugin.module), [])
            if not impls:
                continue
            kwargs = arguments(plugin)
            for impl in impls:
                try:
                    value = impl.function(**{name: kwargs[name] for name in impl.argnames})
                    if returned is not None:
                        returned(plugin, value)
                except BaseException as error:  # even KeyboardInterrupt: one plugin's fault
                    yield plugin, error
                    break
            else:
                yield plugin, None

    def mark_broken(self, plugin: LoadedPlugin, error: BaseException | str) -> None:
        """Record that ``plugin`` failed in a hook (or has settings it cannot use), and stop
        calling it."""
        plugin.status = PluginStatus.ERROR
        if isinstance(error, BaseException):
            plugin.error, plugin.traceback = error_line(error), _traceback(error)
        else:
            plugin.error = error
        logger.warning(
            "plugin %s %s skipped: %s",
            plugin.source.distribution,
            plugin.source.version,
            plugin.error,
            extra={REPORTED: True},
        )


_lock = threading.Lock()
_host: PluginHost | None = None


def plugin_host() -> PluginHost:
    """This process's plugins, loaded on first use."""
    global _host
    with _lock:
        if _host is None:
            _host = PluginHost()
        return _host


def refresh() -> None:
    """Forget the discovered and loaded plugins, so the next use scans and loads again."""
    global _host
    with _lock:
        _discover_installed.cache_clear()
        _host = None
