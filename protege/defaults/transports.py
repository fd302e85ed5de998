"""protege's own mail transports, ``outbox`` and ``smtp`` (``protege.delivery.outbox`` and
``protege.delivery.smtp``), offered through ``register_transports`` as any plugin would."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from protege.config import Config
from protege.hookspecs import hookimpl


def outbox(config: Config) -> Any:
    """The ``outbox`` transport: ``.eml`` files under the data directory."""
    return _class("protege.delivery.outbox", "OutboxTransport")(config)


def smtp(config: Config) -> Any:
    """The ``smtp`` transport: the relay ``[mail]`` names."""
    return _class("protege.delivery.smtp", "SmtpTransport")(config)


def _class(module: str, name: str) -> Any:
    # Imported when made, not when the plugins load: see protege.defaults.
    return getattr(importlib.import_module(module), name)


BUILTIN_TRANSPORTS: dict[str, Callable[[Config], Any]] = {"outbox": outbox, "smtp": smtp}


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Offer ``outbox`` and ``smtp``."""
    for name, factory in BUILTIN_TRANSPORTS.items():
        register(name, factory)
