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

    from protege.ingresses import Ingress
    from protege.installation import Installation
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
    raises is logged with its traceback; what was registered before it raised is served, and
    the dashboard's own ingresses always are.

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
    answers (``/agents``, ``/login``, anything under ``/ingress/`` or ``/static/``), or one
    a plugin registered first, is reported in the dashboard's log and left out.

    The dashboard calls ``page(request, view)`` (a plain function in a worker thread, an
    ``async def`` on the event loop): ``request`` is the Starlette request and ``view`` a
    ``protege.DashboardView`` (``app``, the signed-in ``operator``, the ``csrf_token`` and
    ``csrf_field`` for the page's own forms, and the checked ``form`` of a POST). It returns
    HTML text, shown inside the dashboard's layout under `title` (the plugin escapes what it
    puts in that text), or a Starlette response, sent as it is. A page that raises answers
    an error page (500), its traceback in the log, and the dashboard goes on serving. An
    implementation of this hook that raises is logged with its traceback; the pages
    registered before it raised are served.

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
