"""Signing in, sessions, CSRF tokens, login rate limiting and the headers on every answer."""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from protege.models import Operator

SECRET_VARIABLE = "PROTEGE_DASHBOARD_SECRET"
SECRET_FILE = "dashboard-secret"
# No script, no outside origin, no framing: pages are forms and links on our own origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
PUBLIC_PREFIXES = ("/login", "/static/", "/ingress/")


def session_secret(data_dir: Path) -> str:
    """The key sessions are signed with: ``$PROTEGE_DASHBOARD_SECRET``, else one made once
    and kept (readable by its owner only) in the data directory, so sessions outlive a
    restart and every dashboard process on one data directory shares it."""
    given = os.environ.get(SECRET_VARIABLE)
    if given:
        return given
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            return path.read_text().strip()
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32))
    return path.read_text().strip()


def session_key(operator: Operator) -> str:
    """What a session holds to stay valid: it changes when the operator's password does, or
    when they log out (``end_sessions``); the operator gone, nothing matches. Each change
    ends every session made before it."""
    made = f"{operator.id}:{operator.session_generation}:{operator.password_hash}"
    return hashlib.sha256(made.encode()).hexdigest()[:32]


def end_sessions(operator: Operator) -> None:
    """End every session of ``operator``, on the server: a copy of an old cookie, kept or
    stolen, no longer signs anyone in."""
    Operator.update(session_generation=Operator.session_generation + 1).where(
        Operator.id == operator.id
    ).execute()


def current_operator(session: dict[str, Any]) -> Operator | None:
    """The operator this session signed in, if it still stands."""
    name, key = session.get("operator"), session.get("key")
    if not isinstance(name, str) or not isinstance(key, str):
        return None
    found = Operator.get_or_none(Operator.name == name)
    if found is None or not hmac.compare_digest(session_key(found), key):
        return None
    return found


def csrf_token(request: Request) -> str:
    """This session's CSRF token, made on first use; every form carries it."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def checked_form(request: Request) -> FormData:
    """The posted form, once its CSRF token is found to be this session's; 403 otherwise."""
    form = await request.form(max_files=0, max_fields=200)
    sent = form.get("csrf_token")
    expected = request.session.get("csrf")
    if not isinstance(sent, str) or not isinstance(expected, str):
        raise HTTPException(403, "the form has no valid CSRF token: reload the page and try again")
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise HTTPException(403, "the form has no valid CSRF token: reload the page and try again")
    return form


class LoginLimiter:
    """At most ``attempts`` failed logins per client address, and per operator name, in any
    ``window`` seconds; kept in this process's memory."""

    def __init__(
        self, attempts: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.attempts = attempts
        self.window = window
        self.clock = clock
        self._failures: dict[str, collections.deque[float]] = {}

    def _recent(self, key: str) -> collections.deque[float]:
        found = self._failures.setdefault(key, collections.deque())
        while found and found[0] <= self.clock() - self.window:
            found.popleft()
        return found

    def blocked(self, *keys: str) -> bool:
        """Whether any of ``keys`` has used up its attempts."""
        return any(len(self._recent(key)) >= self.attempts for key in keys)

    def attempt(self, *keys: str) -> bool:
        """Count an attempt against each of ``keys`` before it is checked, and whether it
        may be checked at all (no key has used up its attempts). Counted first, so that a
        burst of guesses sent at once, each waiting on the slow hash, meets the limit too;
        ``succeeded`` takes a right one back."""
        if self.blocked(*keys):
            return False
        self.failed(*keys)
        return True

    def succeeded(self, *keys: str) -> None:
        """Take back the attempt ``attempt`` counted, for one that turned out right."""
        for key in keys:
            recent = self._recent(key)
            if recent:
                recent.pop()

    def failed(self, *keys: str) -> None:
        """Count a failed attempt against each of ``keys``."""
        for key in keys:
            self._recent(key).append(self.clock())
        if len(self._failures) > 100_000:  # a flood of names: forget the quiet ones
            for key in [k for k, v in self._failures.items() if not v]:
                del self._failures[key]


class RequireLogin:
    """Sends every request for a page to the login page unless its session signed in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(PUBLIC_PREFIXES):
            await self.app(scope, receive, send)
            return
        operator = current_operator(scope["session"])
        if operator is None:
            scope["session"].pop("operator", None)
            wanted = scope["path"] if scope["method"] in ("GET", "HEAD") else "/"
            response = RedirectResponse(f"/login?next={quote(wanted)}", status_code=303)
            await response(scope, receive, send)
            return
        scope["state"] = {**scope.get("state", {}), "operator": operator}
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Adds the Content-Security-Policy and its companions to every answer."""

    HEADERS = (
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-store"),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in self.HEADERS if n not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


class OnItsInstallation:
    """Serves each request on the database of the dashboard's installation, so that a
    host with several installations open in one process can mount a dashboard for each."""

    def __init__(self, app: ASGIApp, installation: Any) -> None:
        self.app = app
        self.installation = installation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.installation.activated():  # threads the request uses copy this context
            await self.app(scope, receive, send)
