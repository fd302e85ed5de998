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
def on_event(app: Any, run: Any, event: Any) -> None:
    """Called once for each event of a run, after the batch holding it was committed to the
    run's trail, so that a listener (traces, metrics, a live view) follows runs as they go.

    Calls come from one dispatcher thread of the application, never from the run's own
    thread: for each run, events arrive exactly in the order they were committed, and the
    batch that ends a run arrives with the run's final status in ``run.status``. A listener
    that raises is logged (with its plugin's name) and the run goes on; a slow one is logged
    too, and holds up only the listeners behind it, never a run. The dispatcher's queue is
    bounded: when listeners fall that far behind, further events are dropped, counted and
    the count logged, rather than slow a run down. The return value is ignored.

    ``app`` is the installation (``app.config``, ``app.plugins``...). ``run`` is a
    ``protege.RunSnapshot``: the run as it stood when the batch was committed (``id``,
    ``agent``, ``kind``, ``status``, ``correlation_id``...), a copy no other thread changes.
    ``event`` is a ``protege.CommittedEvent``: its ``seq`` and ``kind``, and its payload read
    afresh on each access (``event.payload`` as a dict, ``event.typed`` as the harness's own
    event class), so one listener cannot change what another sees.

    Example::

        @hookimpl
        def on_event(app, run, event):
            if event.kind == "model_response":
                tokens = event.payload.get("usage", {}).get("total_tokens", 0)
                statsd.incr("protege.tokens", tokens, tags=[f"agent:{run.agent}"])
    """


@hookspec
def inspect_inbound(app: Any, message: Any) -> None:
    """Called for each inbound mail once it is stored for an agent, before a run is queued
    for it: an inspector may flag the mail, or hold it (stored and flagged, no run).

    Called in the thread that took the mail (the SMTP gateway's, an HTTP ingress's, the
    command line's), inside the transaction that stores it (so keep it quick: on SQLite,
    other mail waits meanwhile), once per agent the mail is for, by every plugin that
    implements it, in pluggy's order. Decisions only accumulate: ``message.flag(text)``
    adds a flag, ``message.hold(reason)`` keeps the mail from starting a run, and nothing an
    inspector does can take away another one's flag or hold. Each decision is recorded in
    the audit log under the deciding plugin's name. An inspector that raises holds the mail
    (flagged ``inspection_failed``): a failing check must not let through mail it might
    have stopped. The return value is ignored. protege's own sender authentication is an
    inspector: mail failing DMARC at a domain that asks for reject or quarantine is held,
    and a failed DNS lookup is flagged.

    ``app`` is the installation. ``message`` is a ``protege.InboundMail``: the stored mail's
    ``id``, ``agent``, ``sender`` (the From as written) and ``sender_address``, ``to``,
    ``cc``, ``subject``, ``body``, ``message_id``, ``status`` (``accepted``, or
    ``refused``/``ignored`` when it starts no run anyway), ``verdict`` (the sender
    authentication's ``Verdict``), and the ``flags`` and ``holds`` decided so far.

    Example::

        @hookimpl
        def inspect_inbound(app, message):
            if "wire transfer" in message.body.lower():
                message.flag("mentions a wire transfer")
            if message.sender_address.endswith("@competitor.example"):
                message.hold("mail from a competitor waits for an operator")
    """
