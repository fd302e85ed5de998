"""Signing in and out."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protege_dashboard.operators import authenticate
from protege_dashboard.security import (
    checked_form,
    current_operator,
    end_sessions,
    session_key,
)
from protege_dashboard.web import redirect, render


def _next(value: object) -> str:
    # Only a path on this site: never an address elsewhere ("//evil.example", "/\\evil").
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or text.startswith(("//", "/\\")) or "\\" in text:
        return "/"
    return text


async def login(request: Request) -> Response:
    """The login form; on POST, checks the password, at most so many tries a window."""
    wanted = _next(request.query_params.get("next", "/"))
    if request.method in ("GET", "HEAD"):  # Starlette answers HEAD wherever GET is
        if current_operator(request.session) is not None:
            return redirect(wanted)
        return render(request, "login.html", error=None, next=wanted, name="")
    form = await checked_form(request)
    name = str(form.get("name", ""))[:200]
    wanted = _next(form.get("next", "/"))
    limiter = request.app.state.login_limiter
    client = request.client.host if request.client else "unknown"
    keys = (f"address:{client}", f"name:{name.casefold()}")
    if not limiter.attempt(*keys):  # counted before the hash: see LoginLimiter.attempt
        return render(
            request,
            "login.html",
            status_code=429,
            error="too many failed attempts: wait a few minutes and try again",
            next=wanted,
            name=name,
        )
    # scrypt takes a while and much memory on purpose: off the event loop.
    operator = await run_in_threadpool(authenticate, name, str(form.get("password", "")))
    if operator is None:
        return render(
            request,
            "login.html",
            status_code=401,
            error="wrong name or password",
            next=wanted,
            name=name,
        )
    limiter.succeeded(*keys)
    request.session.clear()  # a new session (and CSRF token) for the signed-in operator
    request.session.update({"operator": operator.name, "key": session_key(operator)})
    return redirect(wanted)


async def logout(request: Request) -> Response:
    """End this operator's sessions: this one, and any other browser's, so that no copy of
    the cookie still signs in."""
    await checked_form(request)
    end_sessions(request.state.operator)
    request.session.clear()
    return redirect("/login")


async def home(request: Request) -> Response:
    """The agents are where an operator starts."""
    return redirect("/agents")


ROUTES = [
    Route("/", home),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
]
