"""protege's own transports, ``outbox`` and ``smtp``: an internal plugin, registered before
the installed ones, offering them through ``register_transports`` as any plugin would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protege.delivery.outbox import OutboxTransport
from protege.delivery.smtp import SmtpTransport
from protege.delivery.transports import Transport
from protege.hookspecs import hookimpl

BUILTIN_TRANSPORTS: dict[str, type[Transport]] = {
    "outbox": OutboxTransport,
    "smtp": SmtpTransport,
}


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Offer ``outbox`` and ``smtp``."""
    for name, transport in BUILTIN_TRANSPORTS.items():
        register(name, transport)
