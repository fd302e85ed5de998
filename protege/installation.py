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
from protege.blobs import BlobStore, blob_store_for, with_blob_store
from protege.config import Config
from protege.errors import ConfigError
from protege.gateway.outbound import queue_mail
from protege.harness.runner import QueueMail
from protege.plugins import PluginHost, normalize, plugin_host
from protege.registry import Manifest, build_manifest
from protege.registry.offered import Offered, offered
from protege.transports import Transport


@attrs.frozen
class Installation:
    """Everything one protege installation runs with: its configuration (and with it the
    database, the data directory, and the blob store it resolved), the tools it offers, the
    means to queue mail, and the transport that sends it."""

    config: Config
    manifest: Manifest
    queue_mail: QueueMail
    # The database protege's records are bound to (through the proxy ``protege.db.database``,
    # which peewee models need); blobs and the outbox live under ``data_dir``.
    database: peewee.Database
    # The plugins loaded for it (protege's internal ones included): call hooks through
    # ``plugins.hook``.
    plugins: PluginHost
    # What sends its mail: the transport ``[mail] transport`` names, made once for it; hand
    # it to ``protege.delivery`` (``send_pending(config, transport=...)``, ``DeliveryLoop``).
    transport: Transport

    @property
    def data_dir(self) -> Path:
        """Where blobs and the outbox live."""
        return self.config.data_dir

    @property
    def blob_store(self) -> BlobStore:
        """Where stored files keep their bytes: the store ``[blobs] store`` names, made when
        the installation opened and carried by its ``config`` (what tools are handed)."""
        return blob_store_for(self.config)


def offered_transports(plugins: PluginHost) -> Offered:
    """The mail transports the plugins (protege's own included) register, by name."""
    return offered(
        plugins,
        "register_transports",
        kind="mail transport",
        setting="[mail] transport",
        methods=("send",),
    )


def offered_stores(plugins: PluginHost) -> Offered:
    """The blob stores the plugins (protege's own included) register, by name."""
    return offered(
        plugins,
        "register_blob_stores",
        kind="blob store",
        setting="[blobs] store",
        methods=("put", "get", "exists", "delete", "mark", "check"),
    )


def open_installation(
    config: Config,
    *,
    manifest: Manifest | None = None,
    plugins: PluginHost | None = None,
    connect: bool = True,
) -> Installation:
    """The installation ``config`` describes: its database connected (unless told not to),
    its manifest built from its host modules and the installed plugins (unless given), its
    blob store and mail transport found by name among those the plugins register (protege's
    own included) and made once.

    ``ConfigError`` (one line) when ``[mail] transport`` or ``[blobs] store`` names nothing
    registered, or the chosen one cannot be made."""
    plugins = plugin_host() if plugins is None else plugins
    transports, stores = offered_transports(plugins), offered_stores(plugins)
    # Refused before anything is connected or imported for tools.
    for refusal in (
        transports.refusal(config.mail.transport),
        stores.refusal(config.blobs.store),
    ):
        if refusal is not None:
            raise ConfigError(refusal)
    if connect:
        db.connect(config.database_url)
    if manifest is None:
        manifest = build_manifest(config, plugins)
    written = config.plugins
    # From here on, each plugin's table is its checked settings (what its tools read, and
    # what a plugin's transport or blob store is made with).
    config = attrs.evolve(config, plugins=manifest.settings)
    refused = {
        normalize(report.plugin.source.distribution): report.settings_error
        for report in manifest.plugins
        if report.settings_error
    }
    if refused:
        # None of a refused plugin's hooks may run for this installation (an inspector,
        # a listener, a prompt section on its defaults): it gets a host where it is broken.
        plugins = plugins.without(refused)
        # The refused tables stay as written, so that opening this config again refuses
        # them again rather than taking the plugin's defaults.
        config = attrs.evolve(
            config,
            plugins={
                **{name: written.get(name) for name in refused if name in written},
                **config.plugins,
            },
        )
    config = with_blob_store(config, stores.build(config.blobs.store, config, refused))
    return Installation(
        config=config,
        manifest=manifest,
        queue_mail=functools.partial(queue_mail, config=config),
        database=db.database.obj,
        plugins=plugins,
        transport=transports.build(config.mail.transport, config, refused),
    )
