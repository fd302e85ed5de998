"""The hooks a protege plugin may implement, and protege's own defaults implement too.

Each specification's docstring is its reference documentation: ``scripts/hook-docs`` writes
them into docs/plugins.md. A plugin is a module named by an entry point in the ``protege``
group; it implements any of the hooks below with functions decorated by
``protege.hookimpl``::

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

    from protege.config import Config
    from protege.context import RunContext
    from protege.ingresses import Ingress
    from protege.installation import Installation
    from protege.registry.manifest import ToolRegistration
    from protege.sections import PromptSection

PROJECT_NAME = "protege"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_tools(
    register: ToolRegistration, config: Config, recorded: Callable[[str], Any]
) -> None:
    """Called each time a manifest is built: once per command (`protege tools`, `protege sync`,
    `protege runs start`), once when `protege serve` starts, once per test that uses
    `protege_app`. It should only register, with no side effects.

    `register` is a function: call `register(ToolClass)` once for each tool the plugin offers,
    with the class itself, not an instance, while the hook runs (a `register` kept and called
    later raises). A class that breaks the tool contract (no description, an id a model cannot
    use, an invalid input schema) is reported by `protege doctor` and left out; the plugin's
    other tools still register. If the hook raises, none of the plugin's tools are registered
    and the plugin is reported as broken. A tool whose id another tool already holds is
    shadowed (host beats built-in beats plugin; between plugins the first by distribution
    name wins), listed by `protege tools`, never renamed.

    The other two arguments are for plugins whose tools live outside the process (protege-mcp
    offers the tools of MCP servers); a hook that does not name them is not given them.
    `config` is the installation's configuration, with each plugin's checked settings
    (`config.plugin_settings("protege-mcp")`). `recorded` is a function: `recorded(key)` is
    what this plugin recorded under `key` at the last `protege sync` (see `refresh_tools`),
    or None. Two more calls say
    what could not be offered: `register.withhold(tool_id, reason)` names a tool known from
    the record that cannot be offered now (its server was down at the last sync): it is not
    offered, but sync keeps it in *All Tools* and toolkits keep it as a member, skipped and
    reported with `reason`; `register.reject(reason)` reports something the plugin could not
    make a tool of (a name that cannot be a tool id), as a class breaking the contract is.

    Example::

        import random

        from protege import Tool, hookimpl


        class RollDiceTool(Tool):
            description = "Rolls a die. Use it whenever a random pick is needed."

            def use(self, context):
                return self.success(face=random.randint(1, 6))


        @hookimpl
        def register_tools(register):
            register(RollDiceTool)

    A plugin offering the tools its last sync recorded (see ``refresh_tools``)::

        @hookimpl
        def register_tools(register, config, recorded):
            for spec in recorded("catalogue") or []:
                register(tool_class_for(spec, config.plugin_settings("acme-tools")))
    """


@hookspec
def refresh_tools(
    app: Installation, record: Callable[[str, Any], None], recorded: Callable[[str], Any]
) -> list[str] | None:
    """Called by `protege sync` (``Installation.sync``), after the database is migrated and
    before the manifest that sync applies is built, so that a plugin whose tools are listed
    by something outside the process (an MCP server) lists them now and records what it
    found. `record` is a function: `record(key, data)` keeps `data` (anything JSON can
    hold) under `key` for this plugin, replacing what an earlier sync recorded there
    (`record(key, None)` forgets the key), and every process's `register_tools` reads it
    back as `recorded(key)` until the next sync. `recorded` is the same reader, here giving
    what the earlier sync recorded. Serving never lists anything itself, so a server down
    while protege serves changes nothing offered. `app` is the installation being synced
    (``app.config.plugin_settings(...)`` holds the plugin's checked settings).

    Record what failed too (a server that did not answer), so that `register_tools` can
    withhold the tools the earlier record knew rather than forget them. Return lines for
    `protege sync` to report (a server that did not answer, a tool whose description
    changed since the last sync), or None. Take as long as the listing needs, within the
    plugin's own limits: sync waits. If the hook raises, sync goes on, keeps what was
    recorded before, and reports the plugin's failure.

    Example::

        from protege import hookimpl

        @hookimpl
        def refresh_tools(app, record, recorded):
            catalogue = fetch_catalogue(app.config.plugin_settings("acme-tools"))
            if catalogue != recorded("catalogue"):
                record("catalogue", catalogue)
                return ["acme-tools: the catalogue changed"]
            return None
    """


@hookspec
def close_installation(app: Installation) -> None:
    """Called once when an installation closes (``Installation.close()``), after its
    servers stopped, so that a plugin ends what it opened for it: sessions, connections,
    child processes. `app` is the installation closing (its ``manifest`` holds the plugin's
    tool classes, and with them what they opened). It must not raise; if it does, the error
    is logged and the others are still called.

    Example::

        from protege import hookimpl

        @hookimpl
        def close_installation(app):
            for entry in app.manifest:
                if issubclass(entry.tool_class, AcmeTool):
                    entry.tool_class.pool.close()
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Called only when someone runs a command protege does not define itself, so `protege
    --help` and the built-in commands never import a plugin.

    `cli` is a click group: add each command (a `click.Command` or a group) with
    `cli.add_command(command)`. A name protege already uses is ignored and `protege doctor`
    reports the clash; when two plugins add one name, the first by distribution name keeps
    it. If the hook raises, protege prints a one-line warning naming the plugin and goes on
    without its commands. Plugin commands are not listed by `protege --help`; `protege
    plugins` shows which plugins implement the hook.

    Example::

        from protege import hookimpl


        @hookimpl
        def register_commands(cli):
            from the_scoop.commands import demo  # loaded only when a command is run

            cli.add_command(demo)
    """


@hookspec
def plugin_settings() -> Any:
    """Called each time a manifest is built, before `register_tools`. It declares the
    plugin's settings by returning an attrs class (as protege's own sections are) or a JSON
    Schema of an object.

    The operator writes them in `[plugins.DISTRIBUTION]` of `protege.toml`. They are checked
    as protege checks its own keys: an unknown key, a value of the wrong type or one a
    validator refuses is reported by `protege doctor` and `protege plugins`, naming the key
    (`'timeout_seconds' must be > 0: 0.0 @ plugins.protege-weather`), and the plugin is
    skipped until it is fixed; with a JSON Schema, keys it does not list are refused unless
    it sets `additionalProperties`, and its defaults are filled in. A secret is never written
    in the file: a key such as `api_key`, `password` or `token` is refused, and the plugin
    declares `api_key_env`, the name of the variable holding it. A tool reads the checked
    settings (the attrs instance, or the dict) as
    `context.config.plugin_settings("protege-weather")`; in a test,
    `protege.testing.with_plugin_settings(protege_app, "protege-weather", {...})` gives the
    installation those settings would make, or raises protege's error.

    Example::

        import attrs

        from protege import hookimpl


        @attrs.frozen(kw_only=True)
        class WeatherSettings:
            base_url: str = "https://api.open-meteo.com"
            timeout_seconds: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))


        @hookimpl
        def plugin_settings():
            return WeatherSettings
    """


@hookspec
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Called once each time an installation opens (and by ``protege doctor``), to offer
    outbound mail transports by name: `register` takes each, as
    ``register(name, TransportClass)``.

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
    blob stores (where stored files keep their bytes) by name: `register` takes each, as
    ``register(name, factory)``.

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
            def __init__(self, settings):
                self.settings = settings

            # put, get, exists, delete, mark, check: see protege.BlobStore

        @hookimpl
        def register_blob_stores(register):
            register("vault", lambda config: VaultStore(config.plugin_settings("protege-vault")))
    """


@hookspec
def register_ingresses(register: Callable[[Ingress], Any]) -> None:
    """Called once when the dashboard starts, in the thread that builds it, to collect the HTTP
    ways in for mail: call ``register(ingress)`` with an instance of a ``protege.Ingress``
    subclass for each, and the dashboard serves it at ``POST /ingress/NAME``.

    protege-dashboard's own relay, Postmark, SendGrid and Mailgun ingresses are registered
    through this hook too. ``register`` takes an instance; an ingress that breaks the contract
    (a name that is not a path segment, no ``secret_env``, a ``receive`` that is not ``async
    def``) is reported in the dashboard's log and left out. A name already registered is
    reported and left out too: the dashboard's own ingresses keep theirs, and between two
    plugins the first by distribution name keeps it. An ingress whose secret is not set in
    the environment answers 404 and never runs.

    Each request reaches ``ingress.receive(request, intake)``, ``request`` being the
    Starlette request and ``intake`` a ``protege.Intake``: the ingress authenticates the
    request first (``intake.check_password()``, or its provider's signature checked with
    ``intake.secret``), reads it with the intake's capped readers, and returns ``await
    intake.deliver(raw, recipients, envelope_sender)``, which answers 204 (taken), 413, 422
    or 503 as the SMTP gateway answers 250, 552, 550 and 451. It refuses by raising
    ``protege.IngressRefused(status, reason)``; anything else it raises is logged with its
    traceback and answered 500, and the dashboard goes on serving. An implementation that
    raises is logged with its traceback and what its plugin registered is withdrawn; the
    dashboard's own ingresses are always served.

    Example::

        from protege import Ingress, IngressRefused, hookimpl

        class AcmeMailIngress(Ingress):
            name = "acme"
            secret_env = "ACME_MAIL_PASSWORD"

            async def receive(self, request, intake):
                intake.check_password()
                intake.check_type("application/json")
                payload = await intake.read_json()
                if not isinstance(payload, dict) or "mime" not in payload:
                    raise IngressRefused(422, "no mime field")
                raw = payload["mime"].encode()
                return await intake.deliver(raw, payload.get("to", []))

        @hookimpl
        def register_ingresses(register):
            register(AcmeMailIngress())
    """


@hookspec
def dashboard_pages(app: Installation, register: Callable[..., Any]) -> None:
    """Called once when the dashboard starts, in the thread that builds it, to add pages to
    it: call ``register(path, page, title=..., menu=None, methods=("GET",))`` for each.

    `app` is the installation the dashboard serves; `register` takes the page's `path` (a
    Starlette path, ``/stock`` or ``/stock/{flavor}``), the `page` function, its `title`,
    the `menu` label that puts a link to it in the dashboard's menu (None for no link), and
    the HTTP `methods` it answers (``GET`` and ``POST`` only).

    Every page is behind the dashboard's login, as the built-in pages are: a visitor who is
    not signed in is sent to the login page, and a POST whose form does not carry the
    session's CSRF token is refused (403) before the page runs. A path the dashboard already
    answers (``/agents``, ``/login``, anything under ``/ingress/`` or ``/static/``) is
    reported in the dashboard's log and left out; between two plugins, the first by
    distribution name keeps a path.

    The dashboard calls ``page(request, view)`` (a plain function in a worker thread, an
    ``async def`` on the event loop): ``request`` is the Starlette request and ``view`` a
    ``protege.DashboardView`` (``app``, the signed-in ``operator``, the ``csrf_token`` and
    ``csrf_field`` for the page's own forms, and the checked ``form`` of a POST). It returns
    HTML text, shown inside the dashboard's layout under `title` (the plugin escapes what it
    puts in that text), or a Starlette response, sent as it is. A page that raises answers
    an error page (500), its traceback in the log, and the dashboard goes on serving. An
    implementation of this hook that raises is logged with its traceback, and none of its
    plugin's pages is served.

    Example::

        import html

        from protege import hookimpl

        @hookimpl
        def dashboard_pages(app, register):
            def stock(request, view):
                flavors = app.config.plugin_settings("acme-stock")["flavors"]
                items = "".join(f"<li>{html.escape(f)}</li>" for f in flavors)
                return f"<h1>Stock</h1><ul>{items}</ul>"

            register("/stock", stock, title="Stock", menu="Stock")
    """


@hookspec
def prompt_sections(
    app: Installation, context: RunContext
) -> PromptSection | list[PromptSection] | None:
    """Called once at the start of each attempt at a run, to add sections to the run's
    system prompt: return a ``PromptSection``, a list of them, or None for none.

    `app` is the installation the run belongs to; `context` is the run's frozen
    ``RunContext``, the object its tools get. Compute the sections from `context` alone, so
    that nothing of one run reaches another, and mark text that came from outside (mail,
    records customers wrote, web pages) ``Trust.UNTRUSTED``: it is fenced as untrusted tool
    results are, so nothing in it can close its fence or pass for an instruction.

    It runs in the worker thread that prepares the run (it may use the database), before
    the model is first asked, so every turn of the attempt sees the same prompt; a run
    resumed later (after an approval, or by another worker) is asked again. Keep it quick:
    the run waits for it before its first model request. Sections come in the order the
    implementations are called (``tryfirst``/``trylast`` move one), after the host app's
    own ``Resolver`` sections. A section whose name a host resolver declares is never used
    (the host's wins), nor a second section of a name already taken. Each section is cut to
    ``[runs] max_prompt_section_chars`` and all of them together to
    ``max_prompt_sections_chars``, with a note saying so.

    Each section is taken from the implementation that returned it, so that it is
    attributed to its plugin: a wrapper sees the call and the sections but cannot change
    them. An implementation that raises is recorded against its plugin; anything returned
    that is not a section is left out and logged with the plugin's name; the run goes on
    either way. Each model request records which sections its prompt carried, from where,
    and which were left out and why.

    Example::

        from protege import PromptSection, Trust, hookimpl

        @hookimpl
        def prompt_sections(app, context):
            if context.message is None:
                return None
            notes = customer_notes(context.message.sender)
            return PromptSection("customer_notes", notes, Trust.UNTRUSTED) if notes else None
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

        from protege import hookimpl


        @hookimpl
        def inspect_inbound(app, message):
            if "wire transfer" in message.body.lower():
                message.flag("mentions a wire transfer")
            if message.sender_address.endswith("@competitor.example"):
                message.hold("mail from a competitor waits for an operator")
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

        from protege import hookimpl


        @hookimpl
        def on_event(app, run, event):
            if event.kind == "model_response":
                tokens = event.payload.get("usage", {}).get("total_tokens", 0)
                statsd.incr("protege.tokens", tokens, tags=[f"agent:{run.agent}"])
    """
