"""The installation: what every part of a running protege is handed, built once.

The command line, the SMTP server with its workers, and the test fixtures each build one
``Installation`` and pass it down, as datasette passes its instance to every hook. Nothing
below this module reads configuration or builds a manifest on its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from protege import db
from protege.config import Config
from protege.gateway.outbound import deliver as deliver_by_transport
from protege.plugins import PluginHost, plugin_host
from protege.registry import Manifest, build_manifest

Deliver = Callable[..., dict[str, Any]]
"""Sends mail as an agent: ``deliver(agent=, run=, mail=, attachments=)`` returns what
happened (see ``protege.gateway.outbound.deliver``)."""


@attrs.frozen
class Installation:
    """Everything one protege installation runs with: its configuration (and with it the
    database and the data directory holding blobs and the outbox), the tools it offers, and
    the means to send mail."""

    config: Config
    manifest: Manifest
    deliver: Deliver

    @property
    def data_dir(self) -> Path:
        """Where blobs and the outbox live."""
        return self.config.data_dir


def open_installation(
    config: Config,
    *,
    manifest: Manifest | None = None,
    plugins: PluginHost | None = None,
    connect: bool = True,
) -> Installation:
    """The installation ``config`` describes: its database connected (unless told not to),
    its manifest built from its host modules and the installed plugins (unless given), and
    mail sent through its transport."""
    if connect:
        db.connect(config.database_url)
    if manifest is None:
        manifest = build_manifest(config, plugin_host() if plugins is None else plugins)
    return Installation(
        config=config,
        manifest=manifest,
        deliver=functools.partial(deliver_by_transport, config=config),
    )
