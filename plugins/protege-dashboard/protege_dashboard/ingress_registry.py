"""The ingresses a dashboard serves: collected through ``register_ingresses`` (the dashboard's
own four among them), checked against the contract, one per name, each a route."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Mapping

import attrs
from starlette.routing import Route

from protege import Ingress, admin
from protege_dashboard import ingress_intake
from protege_dashboard.owners import Owner, owner_of
from protege_dashboard.settings import INGRESSES as BUILTIN_INGRESSES
from protege_dashboard.settings import DashboardSettings, IngressSecrets

logger = logging.getLogger(__name__)

# An ingress's name is the last segment of its path, and names it in the log.
INGRESS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def ingress_problem(ingress: object) -> str | None:
    """Why ``ingress`` cannot be served, or None when it keeps the contract."""
    if not isinstance(ingress, Ingress):
        return f"{ingress!r} is not an instance of protege.Ingress"
    name = getattr(ingress, "name", None)
    if not isinstance(name, str) or not INGRESS_NAME.match(name):
        return (
            f"its name {name!r} is not lowercase letters, digits, '-' and '_' starting "
            "with a letter (at most 40)"
        )
    if not isinstance(ingress.secret_env, str) or not ingress.secret_env:
        return "it names no secret_env: an ingress without a secret would take anyone's mail"
    if not inspect.iscoroutinefunction(ingress.receive):
        return "its receive is not an async def"
    return None


@attrs.frozen
class Registered:
    """One ingress, who registered it, and when (ties between one owner's are by order)."""

    ingress: Ingress
    owner: Owner
    order: int


@attrs.define
class IngressRegistry:
    """What ``register_ingresses`` offered, ranked: the dashboard's own ingresses keep their
    names; a plugin's that breaks the contract or takes a name already served is reported
    and left out."""

    app: admin.Installation
    offered: list[Registered] = attrs.Factory(list)
    refused: list[str] = attrs.Factory(list)

    def register(self, ingress: Ingress) -> None:
        """``register`` as the hook hands it to implementations."""
        owner = owner_of(ingress, self.app)
        problem = ingress_problem(ingress)
        if problem is not None:
            self._refuse(f"an ingress from {owner} is left out: {problem}")
            return
        self.offered.append(Registered(ingress, owner, len(self.offered)))

    def _refuse(self, reason: str) -> None:
        self.refused.append(reason)
        logger.warning("%s", reason)

    def collect(self, builtin: tuple[Ingress, ...]) -> tuple[Ingress, ...]:
        """Call the hook, then the ingresses to serve, one per name. ``builtin`` (the
        dashboard's own) are served even when the dashboard's implementation did not take
        part (it is not loaded as a plugin here, or the hook call failed before it ran)."""
        try:
            self.app.plugins.hook.register_ingresses(register=self.register)
        except Exception:
            logger.exception("register_ingresses failed: ingresses registered before it are served")
        present = {id(r.ingress) for r in self.offered}
        for ingress in builtin:
            if id(ingress) not in present:
                self.register(ingress)
        served: dict[str, Registered] = {}
        for entry in sorted(self.offered, key=lambda r: (r.owner, r.order)):
            holder = served.get(entry.ingress.name)
            if holder is None:
                served[entry.ingress.name] = entry
            elif holder.ingress is not entry.ingress:
                self._refuse(
                    f"the {entry.ingress.name} ingress from {entry.owner} is left out: "
                    f"/ingress/{entry.ingress.name} is served by {holder.owner}'s"
                )
        return tuple(entry.ingress for entry in served.values())


def routes(ingresses: tuple[Ingress, ...]) -> list[Route]:
    """One route per ingress: ``POST /ingress/NAME``."""
    return [
        Route(
            f"/ingress/{ingress.name}",
            ingress_intake.endpoint(ingress),
            methods=["POST"],
            name=f"ingress-{ingress.name}",
        )
        for ingress in ingresses
    ]


def secrets(
    ingresses: tuple[Ingress, ...], settings: DashboardSettings, environ: Mapping[str, str]
) -> IngressSecrets:
    """Each served ingress's secret: the dashboard's own from the variables its settings
    name, a plugin's from the variable its ``secret_env`` names."""
    found = {
        ingress.name: environ.get(ingress.secret_env or "", "")
        for ingress in ingresses
        if ingress.name not in BUILTIN_INGRESSES
    }
    own = settings.secrets(environ).values
    return IngressSecrets({**{k: v for k, v in found.items() if v}, **own})
