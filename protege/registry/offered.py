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
from protege.plugins import PluginHost, error_line
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

    def build(self, name: str, config: Config) -> Any:
        """The ``name`` implementation made for ``config``; ``ConfigError`` (one line) when
        no single one has that name or making it failed."""
        refusal = self.refusal(name)
        if refusal is not None:
            raise ConfigError(refusal)
        factory = self.factories[name]
        try:
            return factory(config)
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


def offered(plugins: PluginHost, hook: str, *, kind: str, setting: str) -> Offered:
    """Call ``hook`` (a ``register_...(register)`` hook) once and collect what it offers."""
    found: dict[str, list[Factory]] = {}
    problems: list[str] = []

    def register(name: str, factory: Factory) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(
                f"{_describe(factory)} registers a {kind} named {name!r}, which is not a name "
                "(a lower-case letter, then lower-case letters, digits, - and _)"
            )
        elif not callable(factory):
            problems.append(f"the {kind} {name!r} registered is {factory!r}, not a class")
        elif factory not in found.setdefault(name, []):
            found[name].append(factory)

    try:
        getattr(plugins.hook, hook)(register=register)
    except Exception as error:  # a plugin's implementation, or a wrapper: not fatal
        logger.warning("%s failed: %s", hook, error_line(error), exc_info=True)
        problems.append(f"{hook} failed: {error_line(error)}")
    factories: dict[str, Factory] = {}
    ambiguous: dict[str, tuple[str, ...]] = {}
    for name, candidates in found.items():
        own = [f for f in candidates if _is_protege_own(f)]
        chosen = own[:1] or candidates
        for ignored in candidates:
            if own and ignored not in own:
                problems.append(
                    f"{_describe(ignored)} registers a {kind} named {name!r}, which is "
                    "protege's own: it is ignored"
                )
        if len(chosen) == 1:
            factories[name] = chosen[0]
        else:
            ambiguous[name] = tuple(sorted(_describe(f) for f in chosen))
            problems.append(
                f"{' and '.join(ambiguous[name])} each register a {kind} named {name!r}"
            )
    for problem in problems:
        logger.warning("%s", problem, extra={REPORTED: True})
    return Offered(kind, setting, factories, ambiguous, tuple(problems))


def _is_protege_own(factory: Factory) -> bool:
    module = getattr(factory, "__module__", None) or ""
    return module == "protege" or module.startswith("protege.")


def _describe(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or repr(factory)
    return f"{module}.{name}" if module else name
