"""Whose code a registered ingress or page is: the dashboard's own, or which plugin's, told by
the module its class or function comes from. It ranks what two registrations of one name or
path contend for, and names the loser's plugin in the report."""

from __future__ import annotations

import re

import attrs

from protege import admin

DISTRIBUTION = "protege-dashboard"
PACKAGE = "protege_dashboard"


@attrs.frozen(order=True)
class Owner:
    """Who registered something, in the order that decides a clash: the dashboard's own
    first, then plugins by distribution name, then code no loaded plugin owns."""

    rank: int
    distribution: str

    @property
    def builtin(self) -> bool:
        """True for the dashboard's own ingresses and pages."""
        return self.rank == 0

    def __str__(self) -> str:
        return self.distribution


def owner_of(registered: object, app: admin.Installation) -> Owner:
    """The owner of ``registered`` (an instance, a class or a function), among the plugins
    loaded for ``app``."""
    module = getattr(registered, "__module__", None) or type(registered).__module__ or ""
    package = module.partition(".")[0]
    if package == PACKAGE:
        return Owner(0, DISTRIBUTION)
    for plugin in app.plugins.plugins:
        plugin_module = getattr(plugin.module, "__name__", None)
        if plugin_module is not None and plugin_module.partition(".")[0] == package:
            return Owner(1, _normalized(plugin.source.distribution))
    return Owner(2, f"module {module or 'unknown'}")


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()
