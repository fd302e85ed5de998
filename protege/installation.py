"""The installation: what every part of a running protege is handed, built once.

The command line, the SMTP server with its workers, and the test fixtures each build one
``Installation`` and pass it down, as datasette passes its instance to every hook. Nothing
below this module reads configuration or builds a manifest on its own.
"""

from __future__ import annotations

import functools
from pathlib import Path

import attrs
import peewee

from protege import db
from protege.config import Config
from protege.gateway.outbound import deliver as deliver_by_transport
from protege.harness.runner import SendMail
from protege.plugins import PluginHost, plugin_host
from protege.registry import Manifest, build_manifest


@attrs.frozen
class Installation:
    """Everything one protege installation runs with: its configuration (and with it the
    database and the data directory holding blobs and the outbox), the tools it offers, and
    the means to send mail."""

    config: Config
    manifest: Manifest
    deliver: SendMail
    # The database protege's records are bound to (through the proxy ``protege.db.database``,
    # which peewee models need); blobs and the outbox live under ``data_dir``.
    database: peewee.Database
    # The plugins loaded for it (protege's internal ones included): call hooks through
    # ``plugins.hook``.
    plugins: PluginHost

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
    plugins = plugin_host() if plugins is None else plugins
    if manifest is None:
        manifest = build_manifest(config, plugins)
    # From here on, each plugin's table is its checked settings (what its tools read).
    config = attrs.evolve(config, plugins=manifest.settings)
    return Installation(
        config=config,
        manifest=manifest,
        deliver=functools.partial(deliver_by_transport, config=config),
        database=db.database.obj,
        plugins=plugins,
    )
