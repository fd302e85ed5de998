"""What the dashboard hands every ingress, its own and plugins' alike: the request read the
hardened way, its password checked, the mail handed to ``ingest``; and the endpoint that
serves an ingress, so that no ingress answers without its secret set and none that raises
takes the dashboard down."""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from protege import Ingress, IngressRefused, admin
from protege_dashboard import ingress_requests
from protege_dashboard.ingress_handover import ingest_answered
from protege_dashboard.ingress_requests import Form

logger = logging.getLogger(__name__)

# JSON escaping and form encoding around a message can double it; beyond that, refuse
# before reading on.
ENVELOPE_FACTOR = 2
ENVELOPE_OVERHEAD = 1024 * 1024
# RFC 5321's least a server must take per message.
MAX_ENVELOPE_RECIPIENTS = 100
MAX_ENVELOPE_CHARS = MAX_ENVELOPE_RECIPIENTS * 256  # an address is at most 254 characters


def check_basic_auth(request: Request, password: str) -> None:
    """The request's Basic password is ``password``; refused (401), and limited per client
    address as dashboard logins are (429), otherwise."""
    limiter = request.app.state.login_limiter
    keys = (f"ingress:{request.client.host if request.client else 'unknown'}",)
    if not limiter.attempt(*keys):
        raise IngressRefused(429, "too many wrong passwords: try again later")
    header = request.headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    given = ""
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            given = ""
    # An empty expected password opens nothing: the request must name the real one.
    if not password or not hmac.compare_digest(given.encode(), password.encode()):
        raise IngressRefused(401, "wrong password", {"WWW-Authenticate": 'Basic realm="protege"'})
    limiter.succeeded(*keys)


def envelope_recipients(addresses: Sequence[str], where: str) -> list[str]:
    """The envelope recipients ``where`` names: 422 when none, 413 past the limit."""
    if len(addresses) > MAX_ENVELOPE_RECIPIENTS or sum(map(len, addresses)) > MAX_ENVELOPE_CHARS:
        raise IngressRefused(413, f"more than {MAX_ENVELOPE_RECIPIENTS} envelope recipients")
    found = [a.strip().strip("<>").strip() for a in addresses]
    found = [a for a in found if a]
    if not found:
        raise IngressRefused(422, f"no envelope recipient: {where}")
    if len(found) > MAX_ENVELOPE_RECIPIENTS:
        raise IngressRefused(413, f"more than {MAX_ENVELOPE_RECIPIENTS} envelope recipients")
    return found


class RequestIntake:
    """The ``protege.Intake`` of one request to one ingress."""

    def __init__(self, request: Request, secret: str) -> None:
        self.request = request
        self.secret = secret

    @property
    def app(self) -> admin.Installation:
        """The installation the dashboard serves."""
        return self.request.app.state.installation

    @property
    def max_message_bytes(self) -> int:
        """The largest message the installation takes."""
        return self.app.config.mail.max_message_bytes

    @property
    def envelope_limit(self) -> int:
        """The largest body that may wrap a message: JSON escaping or a form's encoding."""
        return self.max_message_bytes * ENVELOPE_FACTOR + ENVELOPE_OVERHEAD

    def check_password(self, password: str | None = None) -> None:
        """401 unless the Basic password is ``password`` (the secret by default)."""
        check_basic_auth(self.request, self.secret if password is None else password)

    def check_type(self, *allowed: str) -> None:
        """415 unless the body is one of ``allowed``, with no content coding."""
        ingress_requests.check_type(self.request, *allowed)

    def _cap(self, limit: int | None, default: int) -> int:
        # An ingress may read less than the default, never more than a message of the
        # installation's limit wrapped in JSON or a form.
        return min(limit or default, self.envelope_limit)

    async def read_body(self, limit: int | None = None) -> bytes:
        """The raw body, capped at ``limit`` (the message limit by default)."""
        cap = self._cap(limit, self.max_message_bytes)
        return await ingress_requests.read_body(self.request, cap)

    async def read_json(self, limit: int | None = None) -> Any:
        """The body as JSON, capped at ``limit`` (room for an escaped message by default)."""
        cap = self._cap(limit, self.envelope_limit)
        return await ingress_requests.read_json(self.request, cap)

    async def read_form(self, limit: int | None = None, *, files: bool = False) -> Form:
        """The posted form, capped at ``limit`` (room for an encoded message by default)."""
        cap = self._cap(limit, self.envelope_limit)
        return await ingress_requests.read_form(self.request, cap, files=files)

    async def deliver(
        self, raw: bytes, recipients: Sequence[str], envelope_sender: str | None = None
    ) -> Response:
        """Hand ``raw`` to ``ingest`` for ``recipients``; the answer to send."""
        if isinstance(recipients, str):  # one address given bare: not a list of letters
            recipients = [recipients]
        if not isinstance(raw, bytes):
            raise TypeError("deliver takes the message as bytes")
        found = envelope_recipients(list(recipients), "the request names none")
        return await ingest_answered(self.request, raw, found, envelope_sender)


def _plain(status: int, said: str, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(f"{said}\n", status_code=status, headers=headers)


def endpoint(ingress: Ingress) -> Callable[[Request], Any]:
    """The route endpoint serving ``ingress``: closed (404) without its secret; a refusal
    said in one plain line; anything else it raises logged and answered 500."""

    async def serve(request: Request) -> Response:
        secret = request.app.state.secrets.get(ingress.name)
        if secret is None:
            return _plain(404, f"the {ingress.name} ingress is not configured")
        try:
            answer = await ingress.receive(request, RequestIntake(request, secret))
        except IngressRefused as refused:
            return _plain(refused.status, str(refused), refused.headers)
        except Exception:
            logger.exception("the %s ingress failed on a request", ingress.name)
            return _plain(500, f"the {ingress.name} ingress failed; see the dashboard's log")
        if not isinstance(answer, Response):
            logger.error(
                "the %s ingress answered %r, not a response: answered 500",
                ingress.name,
                type(answer).__name__,
            )
            return _plain(500, f"the {ingress.name} ingress gave no answer")
        return answer

    return serve
