"""The dashboard's ASGI application: pages behind a login, and the mail ingresses."""

from __future__ import annotations

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
from protege_dashboard import access_pages, approval_pages, auth_pages, ingress, work_pages
from protege_dashboard.security import (
    LoginLimiter,
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
    """The dashboard for ``installation``, as ``protege dashboard`` serves it; the ingresses'
    secrets are read from ``environ`` (the process's environment by default)."""
    app = Starlette(
        routes=[
            *auth_pages.ROUTES,
            *access_pages.ROUTES,
            *approval_pages.ROUTES,
            *work_pages.ROUTES,
            *ingress.ROUTES,
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[
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
    app.state.secrets = settings.secrets(environ)
    app.state.login_limiter = LoginLimiter(settings.login_attempts, settings.login_window_seconds)
    return app
