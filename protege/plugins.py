"""Finding, selecting and loading plugins, so that one broken plugin never stops the others."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import logging
import os
import re
import time
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any

import attrs
import pluggy

from protege import __version__, hookspecs
from protege.errors import REPORTED
from protege.reprs import fields_repr

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "protege"
BUILTIN_DISTRIBUTIONS = frozenset({"protege-mail", "protege-files", "protege-web"})
# First-party distributions that are not built-in tool plugins: their entry-point names are
# theirs all the same (a squatter on protege_dashboard would otherwise take both down).
FIRST_PARTY_DISTRIBUTIONS = BUILTIN_DISTRIBUTIONS | {"protege-dashboard", "protege-mcp"}
# What protege's internal plugins are reported as.
INTERNAL_DISTRIBUTION = "protege"
# protege's own defaults (transports, blob stores, ingresses...), each a module implementing
# hooks as any plugin does, registered before the installed plugins, as datasette registers
# its default plugins.
INTERNAL_PLUGINS: tuple[str, ...] = (
    "protege.defaults.transports",
    "protege.defaults.blob_stores",
    "protege.defaults.current_time",
    "protege.gateway.sender_decision",
)
LOAD_VARIABLE = "PROTEGE_LOAD_PLUGINS"
DEBUG_VARIABLE = "PROTEGE_DEBUG"
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
        name = normalize(self.distribution)
        return name in BUILTIN_DISTRIBUTIONS or name == INTERNAL_DISTRIBUTION

    @property
    def first_party(self) -> bool:
        """True for the distributions protege ships (the built-ins, the dashboard, protege-mcp): no
        other package may use their entry-point names."""
        return self.builtin or normalize(self.distribution) in FIRST_PARTY_DISTRIBUTIONS

    @property
    def origin(self) -> str:
        """``builtin`` or ``plugin``: how the registry ranks this plugin's tools."""
        return "builtin" if self.builtin else "plugin"


@attrs.define(repr=False)
class HookFailure:
    """A hook implementation of a plugin that raised: the first error and its traceback,
    and how many calls of that hook have failed since the plugin loaded."""

    __repr__ = fields_repr

    hook: str
    error: str
    traceback: str
    count: int = 1


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
    # Hooks whose implementation raised, by hook name.
    failures: dict[str, HookFailure] = attrs.field(factory=dict)
    # The name pluggy knows it by, once registered.
    registered_as: str | None = None

    @property
    def name(self) -> str:
        """The plugin as reports name it: its distribution, and for protege's internal
        plugins the module."""
        source = self.source
        if source.distribution == INTERNAL_DISTRIBUTION:
            return f"protege ({source.value})"
        return source.distribution


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def error_line(error: BaseException) -> str:
    """The one-line form of an exception, as reports show it."""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _debugging(topic: str) -> bool:
    """Whether ``PROTEGE_DEBUG`` (a comma-separated list) names ``topic``."""
    value = os.environ.get(DEBUG_VARIABLE, "")
    return topic in {part.strip() for part in value.split(",")}


_hook_logger = logging.getLogger("protege.hooks")


def _trace_before(hook: str, implementations: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    _hook_logger.warning(
        "hook %s(%s) calls %s",
        hook,
        ", ".join(sorted(kwargs)),
        ", ".join(impl.plugin_name for impl in reversed(implementations)) or "nothing",
    )


def _trace_after(
    outcome: Any, hook: str, implementations: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    if outcome.exception is not None:
        _hook_logger.warning("hook %s raised %s", hook, error_line(outcome.exception))
    else:
        _hook_logger.warning("hook %s returned %s", hook, _short(outcome.get_result()))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:197]}..."


def discover(path: Sequence[str] | None = None) -> tuple[PluginSource, ...]:
    """Every ``protege`` entry point installed, ordered by distribution name then entry point.

    A distribution found twice on the path counts once (the first, as for imports). Looked
    up afresh each time (a few milliseconds): what is installed is not kept for the process.
    """
    if path is None:
        return _discover_installed()
    return _scan(importlib.metadata.distributions(path=list(path)))


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


# A header line as the email package's parser reads one: a name, a colon, the value.
_HEADER_LINE = re.compile(r"([\x21-\x39\x3b-\x7e]+):[ \t]*(.*)")
_WANTED_HEADERS = {"name": 0, "version": 1}


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """The distribution's name and version, exactly as ``dist.metadata`` gives them.

    ``dist.metadata`` parses the whole of METADATA, the project's description included, as
    an email; with hundreds of plugins that is much of what discovery costs
    (bench/discovery.py). The two header lines are read here directly when the header
    block is plain up to them (``\n`` line ends, a name, a colon and a one-line value);
    anything else is left to ``dist.metadata`` (tests/test_plugins_metadata.py holds the
    two to the same answers).
    """
    found: list[str | None] = [None, None]
    previous: int | None = None  # the wanted header the line before gave, if any
    for line in (dist.read_text("METADATA") or "").split("\n"):
        if line[:1] in (" ", "\t"):  # a continuation: of a wanted value, it is not plain
            if previous is not None:
                break
            continue
        if None not in found:
            return found[0] or "", found[1]  # type: ignore[return-value]
        match = _HEADER_LINE.fullmatch(line)
        if match is None or "\r" in line:  # the header block ends, or is not plain
            break
        previous = _WANTED_HEADERS.get(match[1].lower())
        if previous is not None and found[previous] is None:
            found[previous] = match[2]
    metadata = dist.metadata  # parsed once for both (``dist.version`` parses it again)
    return metadata["Name"] or "", metadata["Version"]


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


# The plugin whose hook implementation is running in this thread or task.
_running: contextvars.ContextVar[LoadedPlugin | None] = contextvars.ContextVar(
    "protege_plugin", default=None
)
# While set, each implementation's return value is noted here with its plugin.
_returned: contextvars.ContextVar[list[tuple[LoadedPlugin, Any]] | None] = contextvars.ContextVar(
    "protege_plugin_returns", default=None
)


# While set, each guarded implementation's call is reported here: its plugin, how long it
# took, and what it raised.
Observer = Callable[["LoadedPlugin", float, BaseException | None], None]
_observer: contextvars.ContextVar[Observer | None] = contextvars.ContextVar(
    "protege_plugin_observer", default=None
)


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Within the block (in this thread or task), report each hook implementation called to
    ``observer(plugin, seconds, error)``: who was slow, who raised, by plugin. The hook is
    still one pluggy call, wrappers and all."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


def current_plugin() -> LoadedPlugin | None:
    """The plugin whose hook implementation is running, or None outside one.

    A hook's ``register`` callback asks it whose registration it is; a callback kept and
    called after the hook returned gets None, and can refuse.
    """
    return _running.get()


def _is_registration(hook: str) -> bool:
    """Whether a failure of ``hook`` spoils the plugin's registrations (they are withdrawn
    and the plugin is skipped from then on) rather than being one failed call."""
    return hook.startswith("register_") or hook == "plugin_settings"


class PluginHost:
    """The plugins of one process: protege's internal ones, then each installed one imported
    and registered with pluggy, or reported why not.

    Hooks are called through pluggy (``host.hook.NAME(...)``), so ``tryfirst``/``trylast``,
    wrappers and ``firstresult`` work as pluggy documents. What pluggy registers is a copy of
    each plugin's hook functions, each guarded: one that raises is recorded against its
    plugin (``failures``, logged with its traceback) and counts as returning nothing, so the
    others still run.
    """

    def __init__(
        self,
        sources: Sequence[PluginSource] | None = None,
        selection: Selection | None = None,
        internal: Sequence[str] = INTERNAL_PLUGINS,
        specs: Sequence[Any] = (hookspecs,),
    ) -> None:
        self.selection = Selection.from_environment() if selection is None else selection
        self.manager = _Manager(hookspecs.PROJECT_NAME)
        for declared in specs:  # protege's own; a test may declare more
            self.manager.add_hookspecs(declared)
        if _debugging("hooks"):
            self.manager.add_hookcall_monitoring(_trace_before, _trace_after)
        # Internal plugins are protege's own code: one that fails to load is a bug, and raises.
        self._made_with = (internal, specs)
        self.internal = [self._load_internal(name) for name in internal]
        self.plugins: list[LoadedPlugin] = []
        self.sources = tuple(discover() if sources is None else sources)
        for source in self.sources:
            self.plugins.append(self._load(source, self.sources))
        self._added: list[tuple[Any, str]] = []

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

    def call_with_plugins(self, hook: str, **kwargs: Any) -> list[tuple[LoadedPlugin, Any]]:
        """Call ``hook`` through pluggy and return each implementation's own return value
        (None left out) with the plugin that returned it, in the order pluggy called them.

        For hooks whose answers belong to their plugin (``plugin_settings``); wrappers see
        the call as any other, but what they change of the result is not seen here.
        """
        noted: list[tuple[LoadedPlugin, Any]] = []
        token = _returned.set(noted)
        try:
            getattr(self.manager.hook, hook)(**kwargs)
        finally:
            _returned.reset(token)
        return noted

    def add(self, plugin: Any, name: str) -> LoadedPlugin:
        """Register ``plugin`` (a module, a class or an instance implementing hooks) under
        ``name``, guarded as an installed plugin is: for a host app that implements hooks in
        its own code, and for tests. It is reported as the distribution ``name``."""
        source = PluginSource(distribution=name, version="", entry_point=name, value=name)
        loaded = LoadedPlugin(source, PluginStatus.OK, module=plugin)
        self._added.append((plugin, name))
        loaded.registered_as = f"{name}:{name}"
        loaded.hooks = self.manager.register_hooks(self._guarded(loaded), name=loaded.registered_as)
        self.plugins.append(loaded)
        return loaded

    def without(self, refused: Mapping[str, str]) -> PluginHost:
        """A host of the same plugins in which those named in ``refused`` (normalized
        distribution: why) are broken: none of their hooks is called. For an application
        whose settings a plugin refused; this host, which others may share, is left as it
        is."""
        internal, specs = self._made_with
        host = PluginHost(self.sources, self.selection, internal=internal, specs=specs)
        for plugin, name in self._added:
            host.add(plugin, name)
        for plugin in host.plugins:
            why = refused.get(normalize(plugin.source.distribution))
            if why is not None and plugin.status is PluginStatus.OK:
                host.mark_broken(plugin, why)
        return host

    def _load_internal(self, module_name: str) -> LoadedPlugin:
        source = PluginSource(
            distribution=INTERNAL_DISTRIBUTION,
            version=__version__,
            entry_point=module_name,
            value=module_name,
        )
        plugin = LoadedPlugin(source, PluginStatus.OK)
        plugin.module = importlib.import_module(module_name)
        plugin.hooks = self.manager.register_hooks(self._guarded(plugin), name=module_name)
        plugin.registered_as = module_name
        return plugin

    def _load(self, source: PluginSource, sources: Sequence[PluginSource]) -> LoadedPlugin:
        refusal = self.selection.refusal(source)
        if refusal is not None:
            return LoadedPlugin(source, PluginStatus.DISABLED, error=refusal)
        clash = self._entry_point_clash(source, sources)
        if clash is not None:
            return self._broken(source, clash)
        plugin = LoadedPlugin(source, PluginStatus.OK)
        try:
            plugin.module = importlib.metadata.EntryPoint(
                name=source.entry_point, value=source.value, group=ENTRY_POINT_GROUP
            ).load()
            plugin.registered_as = f"{source.distribution}:{source.entry_point}"
            plugin.hooks = self.manager.register_hooks(
                self._guarded(plugin), name=plugin.registered_as
            )
        except BaseException as error:  # even KeyboardInterrupt: one plugin's fault
            return self._broken(source, error_line(error), _traceback(error))
        unknown = [name for name in plugin.hooks if not getattr(self.manager.hook, name).has_spec()]
        if unknown:
            self.manager.unregister(name=f"{source.distribution}:{source.entry_point}")
            return self._broken(source, f"implements unknown hook(s): {', '.join(unknown)}")
        return plugin

    def _entry_point_clash(
        self, source: PluginSource, sources: Sequence[PluginSource]
    ) -> str | None:
        """Why ``source`` may not load under its entry-point name, or None.

        A first-party distribution's name is its own: whoever else uses it is refused. Two installed
        distributions using one name are both refused, naming each other, so that which one
        loads never depends on how their names sort.
        """
        if source.first_party:
            return None
        others = [
            other
            for other in sources
            if other.entry_point == source.entry_point
            and normalize(other.distribution) != normalize(source.distribution)
            and (other.first_party or self.selection.refusal(other) is None)
        ]
        if not others:
            return None
        builtin = next((other for other in others if other.first_party), None)
        if builtin is not None:
            return (
                f"entry point name {source.entry_point!r} belongs to the built-in plugin "
                f"{builtin.distribution}; {source.distribution} is not loaded"
            )
        names = ", ".join(sorted(other.distribution for other in others))
        return (
            f"entry point name {source.entry_point!r} is also used by {names}; "
            "neither is loaded until one is uninstalled"
        )

    def _guarded(self, plugin: LoadedPlugin) -> types.ModuleType:
        """What pluggy registers for ``plugin``: its hook implementations, each guarded so
        that it runs as ``plugin`` (``current_plugin``) and a raise is recorded, not passed
        on. The plugin's own module is left as it is."""
        module = plugin.module
        marker = f"{hookspecs.PROJECT_NAME}_impl"
        copy = types.ModuleType(getattr(module, "__name__", None) or plugin.source.value)
        items = (
            vars(module).items()
            if isinstance(module, types.ModuleType)
            else ((name, getattr(module, name, None)) for name in dir(module))
        )
        for name, value in list(items):
            opts = getattr(value, marker, None)
            if not (callable(value) and isinstance(opts, dict)):
                continue
            hook = opts.get("specname") or name
            wrapper = bool(opts.get("hookwrapper") or opts.get("wrapper"))
            guard = _guarded_wrapper if wrapper else _guarded_call
            copy.__dict__[name] = guard(value, plugin, hook, self._failed)
        return copy

    def _failed(self, plugin: LoadedPlugin, hook: str, error: BaseException) -> None:
        earlier = plugin.failures.get(hook)
        if earlier is not None:
            earlier.count += 1
            logger.debug("plugin %s failed in %s again: %s", plugin.name, hook, error_line(error))
            return
        plugin.failures[hook] = HookFailure(hook, error_line(error), _traceback(error))
        if _is_registration(hook):
            self.mark_broken(plugin, error)
            return
        logger.warning(
            "plugin %s failed in %s (further failures there are counted, not logged): %s",
            plugin.name,
            hook,
            error_line(error),
            exc_info=error,
            extra={REPORTED: True},
        )

    def _broken(self, source: PluginSource, error: str, trace: str | None = None) -> LoadedPlugin:
        logger.warning(
            "plugin %s %s skipped: %s",
            source.distribution,
            source.version,
            error,
            extra={REPORTED: True},
        )
        return LoadedPlugin(source, PluginStatus.ERROR, error=error, traceback=trace)

    def mark_broken(self, plugin: LoadedPlugin, error: BaseException | str) -> None:
        """Record that ``plugin`` failed in a hook (or has settings it cannot use), and stop
        calling it."""
        plugin.status = PluginStatus.ERROR
        if isinstance(error, BaseException):
            plugin.error, plugin.traceback = error_line(error), _traceback(error)
        else:
            plugin.error = error
        name = plugin.registered_as
        if name is not None and self.manager.has_plugin(name):
            self.manager.unregister(name=name)
        logger.warning(
            "plugin %s %s skipped: %s",
            plugin.source.distribution,
            plugin.source.version,
            plugin.error,
            extra={REPORTED: True},
        )


Failed = Callable[[LoadedPlugin, str, BaseException], None]


def _guarded_call(function: Callable[..., Any], plugin: LoadedPlugin, hook: str, failed: Failed):
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        token = _running.set(plugin)
        noted = _returned.get()
        # A hook this implementation calls in turn is not its answer: not noted as one.
        inner_token = _returned.set(None)
        observer = _observer.get()
        began = time.monotonic() if observer is not None else 0.0
        try:
            value = function(*args, **kwargs)
        except BaseException as error:  # even KeyboardInterrupt: one plugin's fault
            failed(plugin, hook, error)
            if observer is not None:
                observer(plugin, time.monotonic() - began, error)
            return None
        finally:
            _returned.reset(inner_token)
            _running.reset(token)
        if observer is not None:
            observer(plugin, time.monotonic() - began, None)
        if noted is not None and value is not None:
            noted.append((plugin, value))
        return value

    return guarded


def _guarded_wrapper(function: Callable[..., Any], plugin: LoadedPlugin, hook: str, failed: Failed):
    """A wrapper (old- or new-style) guarded as ``_guarded_call`` guards a plain
    implementation: a raise before or after its ``yield`` is recorded, and the wrapper then
    passes the call through as if it were not there."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        observer = _observer.get()
        began = time.monotonic()

        def fail(error: BaseException) -> None:
            failed(plugin, hook, error)
            if observer is not None:  # a raising wrapper is a failed check too
                observer(plugin, time.monotonic() - began, error)

        token = _running.set(plugin)
        try:
            inner = function(*args, **kwargs)
            next(inner)
        except BaseException as error:
            fail(error)
            return (yield)
        finally:
            _running.reset(token)
        try:
            outcome = yield
        except BaseException as error:  # new-style: the call failed inside; the wrapper sees it
            token = _running.set(plugin)
            try:
                inner.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                _running.reset(token)
            raise RuntimeError(f"a {hook} wrapper yielded twice") from None
        token = _running.set(plugin)
        try:
            inner.send(outcome)
        except StopIteration as stop:
            if observer is not None:
                observer(plugin, time.monotonic() - began, None)
            return stop.value
        except BaseException as error:
            fail(error)
            return outcome
        finally:
            _running.reset(token)
        inner.close()
        fail(RuntimeError(f"the {hook} wrapper yielded twice"))
        return outcome

    return guarded
