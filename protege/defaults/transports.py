"""protege's own mail transports, ``outbox``, ``smtp`` and ``submission``
(``protege.delivery.outbox``, ``.smtp`` and ``.submission``), offered through
``register_transports`` as any plugin would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protege.config import Config
from protege.defaults import imported
from protege.hookspecs import hookimpl


def outbox(config: Config) -> Any:
    """The ``outbox`` transport: ``.eml`` files under the data directory."""
    return imported("protege.delivery.outbox", "OutboxTransport")(config)


def smtp(config: Config) -> Any:
    """The ``smtp`` transport: the relay ``[mail]`` names."""
    return imported("protege.delivery.smtp", "SmtpTransport")(config)


def submission(config: Config) -> Any:
    """The ``submission`` transport: the provider's server ``[mail.submission]`` names."""
    return imported("protege.delivery.submission", "SubmissionTransport")(config)


BUILTIN_TRANSPORTS: dict[str, Callable[[Config], Any]] = {
    "outbox": outbox,
    "smtp": smtp,
    "submission": submission,
}


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Offer ``outbox``, ``smtp`` and ``submission``."""
    for name, factory in BUILTIN_TRANSPORTS.items():
        register(name, factory)
