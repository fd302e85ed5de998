"""Implementations plugins offer by name (mail transports, blob stores), and the one the
configuration chooses.

A hook such as ``register_transports(register)`` is called once; each ``register(name,
factory)`` offers a factory, called later with the installation's ``Config``. protege's own
names cannot be taken: another registration of one is reported and ignored. Two plugins
offering one name make that name ambiguous: choosing it is an error naming both, rather
than mail going through whichever loaded last.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from protege.config import Config
from protege.errors import REPORTED, ConfigError, did_you_mean
from protege.plugins import (
    INTERNAL_DISTRIBUTION,
    LoadedPlugin,
    PluginHost,
    PluginStatus,
    current_plugin,
    error_line,
    normalize,
)
from protege.reprs import fields_repr

logger = logging.getLogger(__name__)

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")

Factory = Callable[[Config], Any]


@attrs.frozen(repr=False)
class Offered:
    """What one hook offered: factories by name, the names several plugins offered, and
    the problems found while collecting them (one line each)."""

    __repr__ = fields_repr

    kind: str  # "mail transport", "blob store": how messages name one
    setting: str  # where the operator chooses one: "[mail] transport"
    factories: Mapping[str, Factory]
    ambiguous: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    problems: tuple[str, ...] = ()
    # The plugin that registered each name in ``factories``.
    owners: Mapping[str, LoadedPlugin] = attrs.field(factory=dict)
    # What whatever a factory makes must be able to do.
    methods: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name offered, sorted."""
        return tuple(sorted({*self.factories, *self.ambiguous}))

    def refusal(self, name: str) -> str | None:
        """Why ``name`` cannot be chosen (one line), or None when it can."""
        if name in self.ambiguous:
            return (
                f"{self.setting} = {name!r} is ambiguous: {' and '.join(self.ambiguous[name])} "
                f"each register a {self.kind} of that name; uninstall or disable one"
            )
        if name in self.factories:
            return None
        known = ", ".join(self.names) or "none"
        return (
            f"{self.setting} = {name!r}: no {self.kind} has that name"
            f"{did_you_mean(name, self.names)}; the known ones: {known}"
        )

    def build(self, name: str, config: Config, refused: Mapping[str, str] = {}) -> Any:
        """The ``name`` implementation made for ``config``; ``ConfigError`` (one line) when
        no single one has that name, its plugin broke or has settings it cannot use
        (``refused``, by distribution), or making it failed."""
        refusal = self.refusal(name)
        if refusal is not None:
            raise ConfigError(refusal)
        factory = self.factories[name]
        owner = self.owners.get(name)
        if owner is not None:
            why = refused.get(normalize(owner.source.distribution))
            if owner.status is PluginStatus.ERROR:
                why = owner.error
            if why is not None:
                raise ConfigError(
                    f"{self.setting} = {name!r} is offered by {owner.name}, which is not "
                    f"in use: {why}"
                )
        try:
            made = factory(config)
        except ConfigError:
            raise
        except Exception as error:
            logger.warning(
                "%s %s could not be made", self.kind, name, exc_info=True, extra={REPORTED: True}
            )
            raise ConfigError(
                f"the {self.kind} {name!r} ({_describe(factory)}) could not be made: "
                f"{error_line(error)}"
            ) from None
        missing = [m for m in self.methods if not callable(getattr(made, m, None))]
        if missing:  # found now, not at the first mail or file it fails
            raise ConfigError(
                f"the {self.kind} {name!r} ({_describe(factory)}) has no "
                f"{', '.join(m + '()' for m in missing)}"
            )
        return made


def offered(
    plugins: PluginHost, hook: str, *, kind: str, setting: str, methods: tuple[str, ...] = ()
) -> Offered:
    """Call ``hook`` (a ``register_...(register)`` hook) once and collect what it offers."""
    found: dict[str, list[tuple[LoadedPlugin, Factory]]] = {}
    problems: list[str] = []

    def register(name: str, factory: Factory) -> None:
        plugin = current_plugin()
        if plugin is None:  # kept by a plugin and called after the hook returned
            raise RuntimeError(f"register is for a {hook} hook, while it runs")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(
                f"{plugin.name} registers a {kind} named {name!r}, which is not a name "
                "(a lower-case letter, then lower-case letters, digits, - and _)"
            )
        elif not callable(factory):
            problems.append(f"the {kind} {name!r} {plugin.name} registers is {factory!r}")
        else:
            found.setdefault(name, []).append((plugin, factory))

    try:
        getattr(plugins.hook, hook)(register=register)
    except Exception as error:  # a wrapper that re-raised: not fatal
        logger.warning("%s failed: %s", hook, error_line(error), exc_info=True)
        problems.append(f"{hook} failed: {error_line(error)}")
    factories: dict[str, Factory] = {}
    owners: dict[str, LoadedPlugin] = {}
    ambiguous: dict[str, tuple[str, ...]] = {}
    for name, offers in found.items():
        # What a plugin registered before its hook raised is withdrawn with the plugin.
        offers = [(p, f) for p, f in offers if p.status is not PluginStatus.ERROR]
        own = [(p, f) for p, f in offers if p.source.distribution == INTERNAL_DISTRIBUTION]
        for plugin, _factory in offers:
            if own and plugin.source.distribution != INTERNAL_DISTRIBUTION:
                problems.append(
                    f"{plugin.name} registers a {kind} named {name!r}, which is "
                    "protege's own: it is ignored"
                )
        chosen = own[:1] or offers
        by = sorted({plugin.name for plugin, _ in chosen})
        if len(by) == 1:
            owners[name], factories[name] = chosen[-1]
        elif by:
            ambiguous[name] = tuple(by)
            problems.append(f"{' and '.join(by)} each register a {kind} named {name!r}")
    for problem in problems:
        logger.warning("%s", problem, extra={REPORTED: True})
    return Offered(kind, setting, factories, ambiguous, tuple(problems), owners, methods)


def _describe(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or repr(factory)
    return f"{module}.{name}" if module else name
