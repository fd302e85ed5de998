"""Whose registration an ingress or page is: the dashboard's own, or which plugin's, as
protege attributes the hook call. It ranks what two registrations of one name or path
contend for, and names the loser's plugin in the report."""

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


OWN = Owner(0, DISTRIBUTION)


def current_owner() -> Owner:
    """Whose hook implementation is registering now: protege tells, by the plugin it is
    calling, so a class or function claiming another module cannot pass for the dashboard's.
    A ``register`` kept and called after its hook returned is refused."""
    plugin = admin.current_plugin()
    if plugin is None:
        raise RuntimeError("register is for the hook's implementations, while they run")
    name = normalized(plugin.source.distribution)
    return OWN if name == DISTRIBUTION else Owner(1, name)


def normalized(distribution: str) -> str:
    """A distribution name in canonical form (PEP 503), as Owner names them."""
    return re.sub(r"[-_.]+", "-", distribution).lower()
