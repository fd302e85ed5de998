"""Calling a hook one plugin at a time, through pluggy, so that what each plugin did (it
raised, it took long, it decided something) is known by the plugin's name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pluggy


@attrs.frozen
class PluginCall:
    """One plugin's share of a hook: its registered name and a pluggy hook caller that
    reaches only its implementations (its own wrappers included)."""

    plugin: str
    call: Callable[..., list[Any]]


def each_plugin(manager: pluggy.PluginManager, hook: str) -> list[PluginCall]:
    """The plugins implementing ``hook``, in the order pluggy calls them (``tryfirst``
    first, the last registered before the earlier ones), each with a caller of its own.

    The callers are pluggy's own subset hook callers, so ordering options and wrappers
    apply within each plugin; a plugin's wrapper does not wrap another plugin's code.
    """
    implementations = getattr(manager.hook, hook).get_hookimpls()
    plugins: dict[str, object] = {}
    for implementation in reversed(implementations):  # pluggy calls from the end
        plugins.setdefault(implementation.plugin_name, implementation.plugin)
    return [
        PluginCall(
            name,
            manager.subset_hook_caller(
                hook, remove_plugins=[other for key, other in plugins.items() if key != name]
            ),
        )
        for name in plugins
    ]


def signature(manager: pluggy.PluginManager, hook: str) -> tuple[int, ...]:
    """What identifies the implementations of ``hook`` now: it changes when a plugin is
    registered or unregistered, so callers kept from ``each_plugin`` can be made again."""
    return tuple(id(i) for i in getattr(manager.hook, hook).get_hookimpls())
