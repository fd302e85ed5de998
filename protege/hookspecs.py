"""The hooks a protege plugin may implement.

A plugin is a module named by an entry point in the ``protege`` group; it implements any of the
hooks below with functions decorated by ``protege.hookimpl``::

    from protege import Tool, hookimpl

    class GetForecastTool(Tool):
        ...

    @hookimpl
    def register_tools(register):
        register(GetForecastTool)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from protege.tool import Tool

PROJECT_NAME = "protege"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer tool classes to the manifest by calling ``register(ToolClass)`` for each.

    Called each time a manifest is built (once per command, once when the server starts),
    so it should only register, with no side effects. A class that breaks the tool
    contract is reported and left out; the plugin's other tools still register. If this hook
    raises, none of the plugin's tools are registered and the plugin is reported as broken.
    A tool whose id a host tool, a built-in tool, or an earlier plugin (by distribution name)
    already uses is shadowed: listed by ``protege tools``, never offered to a model.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``protege`` command line with ``cli.add_command(...)``.

    Called only when a command that protege itself does not define is invoked, so plugins
    are never imported to print ``protege --help``. A command whose name protege already uses
    is ignored.
    """


@hookspec
def plugin_settings() -> Any:
    """Declare the plugin's settings: return an attrs class, or a JSON Schema (a dict) of
    an object.

    The operator writes them in ``[plugins.DISTRIBUTION]`` of ``protege.toml``; they are
    checked when the manifest is built, with errors naming each wrong key as protege names its
    own, and reach the plugin's tools as ``context.config.plugin_settings("DISTRIBUTION")``
    (an instance of the attrs class, or the checked dict with the schema's defaults filled
    in). A key that would hold a secret (``password``, ``token``, ``api_key``...) is refused:
    declare ``..._env`` naming the environment variable that holds it. A plugin whose
    settings are wrong is reported and skipped, like one that fails to import.
    """


@hookspec
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Called once each time an installation opens (and by ``protege doctor``), to offer
    outbound mail transports by name: call ``register(name, TransportClass)`` for each.

    ``name`` is what ``[mail] transport`` (or ``PROTEGE_MAIL_TRANSPORT``) chooses: a
    lower-case letter, then lower-case letters, digits, ``-`` and ``_``. ``TransportClass``
    subclasses ``protege.Transport``; only the chosen one is made, once per installation,
    called with the installation's ``Config`` (its ``plugin_settings(DISTRIBUTION)`` holds
    the plugin's own ``[plugins.DISTRIBUTION]`` settings). The delivery loop then calls its
    ``send(message, envelope)`` once per attempt at a mail, from its own threads and several
    at once, with the exact bytes to send and a ``protege.Envelope`` (sender, recipients,
    whether SMTPUTF8 is needed, Message-ID, attempt); ``send`` returns a
    ``protege.Outcome`` per recipient: delivered, deferred (tried again after the backoff)
    or refused (for good), each with its reason. ``send`` raising ``protege.MailRefused``
    refuses everyone still waiting; raising anything else fails that attempt only (counted,
    and tried again as a deferral is) and never stops the delivery loop.

    protege's own ``outbox`` and ``smtp`` are registered through this hook; their names
    cannot be taken. A name two plugins register cannot be chosen. A name nothing registers
    stops the installation from opening (``protege serve`` refuses to start; ``protege
    doctor`` reports it), naming the known ones. This hook should only register.

    Example::

        from protege import Outcome, Transport, hookimpl

        class PigeonTransport(Transport):
            def send(self, message, envelope):
                loft = self.config.plugin_settings("protege-pigeon")["loft"]
                release(loft, message)
                return [Outcome.delivered(address) for address in envelope.recipients]

        @hookimpl
        def register_transports(register):
            register("pigeon", PigeonTransport)
    """


@hookspec
def register_blob_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Called once each time an installation opens (and by ``protege doctor``), to offer
    blob stores (where stored files keep their bytes) by name: call ``register(name,
    factory)`` for each.

    ``name`` is what ``[blobs] store`` (or ``PROTEGE_BLOB_STORE``) chooses: a lower-case
    letter, then lower-case letters, digits, ``-`` and ``_``. ``factory`` is called once per
    installation, and only for the chosen name, with the installation's ``Config`` (read
    the plugin's own settings from ``config.plugin_settings(DISTRIBUTION)``), and returns an
    object that keeps the ``protege.BlobStore`` contract: bytes put, got, checked and deleted
    by their SHA-256 digest, from any thread. The installation hands the store down in its
    config, so ``protege.blobs.store(..., config=context.config)`` and
    ``protege.blobs.read(blob, context.config)`` reach it from tools and plugins. A factory
    that raises stops the installation from opening, with its error.

    protege's own ``local`` and ``s3`` are registered through this hook; their names cannot
    be taken. A name two plugins register cannot be chosen; a name nothing registers stops
    the installation from opening, naming the known ones. This hook should only register.

    Example::

        from protege import hookimpl

        class VaultStore:
            ...  # put, get, exists, delete, mark, check (see protege.BlobStore)

        @hookimpl
        def register_blob_stores(register):
            register("vault", lambda config: VaultStore(config.plugin_settings("protege-vault")))
    """
