"""The installation: protege's application object, what every part of it is handed.

A host app, the command line, the SMTP server with its workers, and the test fixtures each
build one ``Installation`` and pass it down, as datasette passes its instance to every hook;
a host closes it when done, as it closes an ``httpx.Client``. Nothing below this module
reads configuration or builds a manifest on its own, and two installations in one process
each keep to their own database and data directory.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import peewee

from protege import db, dbroute
from protege.blobs import BlobStore, blob_store_for, with_blob_store
from protege.config import Config, load_config
from protege.errors import ConfigError, ProtegeError
from protege.gateway.inbound import Delivered, ingest
from protege.gateway.outbound import queue_mail
from protege.harness.runner import QueueMail
from protege.plugins import PluginHost, normalize
from protege.registry import Manifest, build_manifest
from protege.registry.listings import read_listings, refresh_listings
from protege.registry.offered import Offered, offered
from protege.serving import Server, serve
from protege.toolkits import SyncReport, refuse_incomplete, sync
from protege.transports import Transport
from protege.worker import drain

if TYPE_CHECKING:
    from protege.models import Run


class InstallationClosed(ConfigError):
    """The installation was used after ``close()``."""


class InstallationServing(ProtegeError):
    """The installation was closed while a server of it runs (stop the server first)."""


@attrs.define
class _Lifetime:
    """What changes over an installation's life (the rest of it is frozen)."""

    owns_database: bool
    closed: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    # Closes the database if the installation is dropped unclosed (a REPL's reassignment).
    finalizer: weakref.finalize | None = None
    servers: int = 0  # its servers started and not yet stopped (``protege.serving``)

    def serving(self) -> None:
        """A server of the installation starts: ``InstallationClosed`` once it is closed."""
        with self.lock:
            if self.closed:
                raise InstallationClosed("this protege installation is closed")
            self.servers += 1

    def served(self) -> None:
        """A server of the installation has stopped."""
        with self.lock:
            self.servers -= 1


@attrs.frozen
class Installation:
    """Everything one protege installation runs with: its configuration (and with it the
    database, the data directory, and the blob store it resolved), the tools it offers, the
    means to queue mail, and the transport that sends it.

    Build it with ``open_installation``; use it as a context manager (or call ``close()``)
    so that the database it opened is closed. Its own methods (``sync``, ``receive``,
    ``run_queued``) work on its database wherever they are called; other code using
    protege's records does so inside ``with installation.activated():`` when several
    installations are open in one process (with one, that is where they go anyway).
    """

    config: Config
    manifest: Manifest
    queue_mail: QueueMail
    # The database protege's records use in this installation's work (through the proxy
    # ``protege.db.database``, which peewee models need; see ``protege.dbroute``); blobs
    # and the outbox live under ``data_dir``.
    database: peewee.Database | None
    # The plugins loaded for it (protege's internal ones included): call hooks through
    # ``plugins.hook``.
    plugins: PluginHost
    # What sends its mail: the transport ``[mail] transport`` names, made once for it; hand
    # it to ``protege.delivery`` (``send_pending(config, transport=...)``, ``DeliveryLoop``).
    transport: Transport
    _lifetime: _Lifetime = attrs.field(
        factory=lambda: _Lifetime(owns_database=False), alias="lifetime", repr=False
    )

    @property
    def data_dir(self) -> Path:
        """Where blobs and the outbox live."""
        return self.config.data_dir

    @property
    def blob_store(self) -> BlobStore:
        """Where stored files keep their bytes: the store ``[blobs] store`` names, made when
        the installation opened and carried by its ``config`` (what tools are handed)."""
        return blob_store_for(self.config)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._lifetime.closed

    @contextlib.contextmanager
    def activated(self) -> Iterator[Installation]:
        """Within the block, protege's records in this thread or task are this
        installation's (and threads protege starts there inherit it)."""
        if self._lifetime.closed:
            raise InstallationClosed("this protege installation is closed")
        if self.database is None:
            yield self
            return
        with dbroute.using(self.database):
            yield self

    def sync(self) -> SyncReport:
        """What ``protege sync`` does after each deploy: migrate the database, have plugins
        whose tools live outside the process (MCP servers) list and record them, then
        rebuild the system toolkits from the manifest that record makes.

        The report's ``manifest`` is that manifest. This installation keeps offering the
        one it was opened with; open a new installation (restart ``serve``) to offer what
        the sync recorded."""
        refuse_incomplete(self.manifest)  # before anything is recorded or changed
        with self.activated():
            applied = db.migrate()
            problems = refresh_listings(self)
            manifest = self.manifest
            if any("refresh_tools" in p.hooks for p in self.plugins.plugins):
                manifest = build_manifest(self.config, self.plugins, listings=read_listings)
            report = sync(manifest)
        return attrs.evolve(
            report, migrations=applied + report.migrations, listing_problems=problems
        )

    def receive(
        self,
        raw: bytes,
        *,
        recipients: Sequence[str] | None = None,
        **session: Any,
    ) -> list[Delivered]:
        """Take one raw email as the SMTP gateway would: store it for each agent it is for
        (``recipients``, else its To, Cc and Delivered-To) and queue their runs. ``session``
        passes what an SMTP session knows (``envelope_sender``, ``client_ip``, ``helo``) to
        sender authentication. Raises ``MailRejected`` for mail refused whole."""
        with self.activated():
            return ingest(raw, config=self.config, recipients=recipients, app=self, **session)

    def run_queued(self) -> list[Run]:
        """Carry out the queued runs in this thread until none is left, then send the mail
        they queued; returns the runs carried out."""
        with self.activated():
            return drain(self)

    def serve(self, **options: Any) -> Server:
        """A server for this installation on the running event loop: the SMTP gateway,
        the workers with their delivery loop, and the scheduler (``options`` as
        ``protege.serving.serve`` takes them). Use it as ``async with app.serve(): ...``."""
        return serve(self, **options)

    def close(self) -> None:
        """Close what this installation opened for itself (its database); idempotent.
        ``InstallationServing`` while a server of it runs: stop that first."""
        lifetime = self._lifetime
        with lifetime.lock:
            if lifetime.closed:
                return
            if lifetime.servers:
                raise InstallationServing(
                    "this protege installation is being served: stop its server "
                    "(leave `async with serve(...)`) before closing it"
                )
            lifetime.closed = True
        if lifetime.finalizer is not None:
            lifetime.finalizer.detach()
        self.plugins.hook.close_installation(app=self)
        if lifetime.owns_database and self.database is not None:
            _close_database(self.database)

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
    config: Config | None = None,
    *,
    manifest: Manifest | None = None,
    plugins: PluginHost | None = None,
    connect: bool = True,
) -> Installation:
    """The installation ``config`` describes: a database of its own connected (unless told
    not to: then it uses the one bound for the process, ``protege.db.connect``), its
    manifest built from its host modules and the installed plugins (unless given), its blob
    store and mail transport found by name among those the plugins register (protege's own
    included) and made once. Close it when done (``close()`` or ``with``).

    ``ConfigError`` (one line) when ``[mail] transport`` or ``[blobs] store`` names nothing
    registered, or the chosen one cannot be made; ``DatabaseError`` when the database cannot
    be opened. Without ``config``, the one ``protege.toml`` in the working directory (or
    above it) and the environment describe."""
    config = load_config() if config is None else config
    plugins = PluginHost() if plugins is None else plugins
    transports, stores = offered_transports(plugins), offered_stores(plugins)
    # Refused before anything is connected or imported for tools.
    for refusal in (
        transports.refusal(config.mail.transport),
        stores.refusal(config.blobs.store),
    ):
        if refusal is not None:
            raise ConfigError(refusal)
    if not connect:
        bound = db.database.process_database  # never another installation's own
        return _assemble(config, manifest, plugins, transports, stores, bound, False)
    # Its threads' connections are kept too, to be closed with the installation.
    database = db.open_connected(config.database_url, tracked=True)
    dbroute.opened(database)
    try:
        with dbroute.using(database):
            made = _assemble(config, manifest, plugins, transports, stores, database, True)
    except BaseException:
        _close_database(database)
        raise
    made._lifetime.finalizer = weakref.finalize(
        made, _dropped, database, db.redacted(config.database_url)
    )
    return made


def _close_database(database: peewee.Database) -> None:
    dbroute.closed(database)
    db.close_idle_connections(database)
    db.close_everywhere(database)


def _dropped(database: peewee.Database, url: str) -> None:
    warnings.warn(
        f"a protege installation on {url} was dropped without close(): closing its database",
        ResourceWarning,
        stacklevel=2,
    )
    _close_database(database)


def _on_database(queue: QueueMail, database: peewee.Database | None) -> QueueMail:
    """``queue``, working on ``database`` from whatever thread a tool calls it."""
    if database is None:
        return queue

    def queued(*args: Any, **kwargs: Any) -> Any:
        with dbroute.using(database):
            return queue(*args, **kwargs)

    return queued


def _assemble(
    config: Config,
    manifest: Manifest | None,
    plugins: PluginHost,
    transports: Offered,
    stores: Offered,
    database: peewee.Database | None,
    owns_database: bool,
) -> Installation:
    if manifest is None:
        manifest = build_manifest(config, plugins, listings=read_listings)
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
        queue_mail=_on_database(functools.partial(queue_mail, config=config), database),
        database=database,
        plugins=plugins,
        transport=transports.build(config.mail.transport, config, refused),
        lifetime=_Lifetime(owns_database=owns_database),
    )
