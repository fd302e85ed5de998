"""protege-dashboard: the operators' web dashboard and the HTTP ways in for mail.

Adds two commands to ``protege``: ``protege dashboard`` (serve it) and ``protege
operators`` (the accounts that may sign in), declares its settings, the
``[plugins.protege-dashboard]`` table of ``protege.toml``, and registers its four mail
ingresses (relay, Postmark, SendGrid, Mailgun) through ``register_ingresses``, as any plugin
adds one. It offers no tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protege import hookimpl

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from protege import Ingress


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``protege dashboard`` and ``protege operators``."""
    from protege_dashboard.commands import dashboard, operators

    cli.add_command(dashboard)
    cli.add_command(operators)


@hookimpl
def plugin_settings() -> Any:
    """The dashboard's settings: ``[plugins.protege-dashboard]``, checked by protege."""
    from protege_dashboard.settings import DashboardSettings

    return DashboardSettings


@hookimpl
def register_ingresses(register: Callable[[Ingress], Any]) -> None:
    """The relay, Postmark, SendGrid and Mailgun ingresses."""
    from protege_dashboard.ingress import INGRESSES

    for ingress in INGRESSES:
        register(ingress)
