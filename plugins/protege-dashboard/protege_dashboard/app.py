"""The dashboard's ASGI application: pages behind a login, and the mail ingresses."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from protege import admin
from protege_dashboard import (
    access_pages,
    approval_pages,
    auth_pages,
    ingress,
    ingress_registry,
    plugin_pages,
    work_pages,
)
from protege_dashboard.security import (
    LoginLimiter,
    OnItsInstallation,
    RequireLogin,
    SecurityHeaders,
    session_secret,
)
from protege_dashboard.settings import DashboardSettings
from protege_dashboard.web import environment

STATIC = Path(__file__).parent / "static"
SESSION_COOKIE = "protege_session"


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if request.url.path.startswith("/ingress/"):
        return PlainTextResponse(f"{error.detail}\n", status_code=error.status_code)
    page = environment.get_template("error.html").render(
        status=error.status_code, detail=error.detail
    )
    return Response(page, status_code=error.status_code, media_type="text/html")


def create_app(
    installation: admin.Installation,
    settings: DashboardSettings,
    environ: Mapping[str, str] | None = None,
) -> Starlette:
    """The dashboard for ``installation``, as ``protege dashboard`` serves it, with the
    ingresses and pages its plugins register (``register_ingresses``, ``dashboard_pages``);
    the ingresses' secrets are read from ``environ`` (the process's environment by default)."""
    environ = os.environ if environ is None else environ
    ingresses = ingress_registry.IngressRegistry(installation)
    served = ingresses.collect(ingress.INGRESSES)
    builtin = [
        *auth_pages.ROUTES,
        *access_pages.ROUTES,
        *approval_pages.ROUTES,
        *work_pages.ROUTES,
        *ingress_registry.routes(served),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    pages = plugin_pages.PageRegistry(installation, builtin)
    added = pages.collect()
    app = Starlette(
        routes=[*builtin, *plugin_pages.routes(added)],
        middleware=[
            Middleware(OnItsInstallation, installation=installation),
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=settings.hosts()),
            Middleware(
                SessionMiddleware,
                secret_key=session_secret(installation.data_dir),
                session_cookie=SESSION_COOKIE,
                max_age=int(settings.session_hours * 3600),
                same_site="strict",
                https_only=settings.secure_cookies,
            ),
            Middleware(RequireLogin),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.installation = installation
    app.state.settings = settings
    app.state.secrets = ingress_registry.secrets(served, settings, environ)
    app.state.ingresses = served
    app.state.menu = plugin_pages.menu(added)
    # What plugins offered and the dashboard left out, as its log reported it.
    app.state.refused_extensions = (*ingresses.refused, *pages.refused)
    app.state.login_limiter = LoginLimiter(settings.login_attempts, settings.login_window_seconds)
    return app
