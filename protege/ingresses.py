"""The contract of an HTTP mail ingress: what a plugin registers through ``register_ingresses``.

An ingress is one HTTP way in for mail, served by the dashboard at ``POST /ingress/NAME``. The
dashboard owns everything around it: the route, the secret (read from the environment variable
the ingress names; without it the ingress is closed and answers 404 before it runs), the
reading of the request (checks before the body, a capped body, parsing off the event loop),
and the handover to the same ``ingest`` the SMTP gateway uses. The ingress decides only what is
particular to its provider: how the request proves who sent it, and where in the request the
message and its envelope recipients are. This module imports no web framework: the request an
ingress receives is the framework's own (Starlette's, in protege-dashboard).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from protege.installation import Installation


class IngressRefused(Exception):
    """Raised by an ingress (or the intake's checks) to answer with ``status`` and one plain
    line, ``said``, instead of taking the mail; ``headers`` go on the answer (a 401's
    ``WWW-Authenticate``, a 503's ``Retry-After``)."""

    def __init__(self, status: int, said: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(said)
        self.status = status
        self.headers = headers or {}


class PostedForm(Protocol):
    """A form posted to an ingress, as ``Intake.read_form`` returns it: each field's first
    value as the bytes sent, and the file parts in order."""

    @property
    def files(self) -> Sequence[Any]:
        """The file parts, in order (each with ``field``, ``filename``, ``content_type`` and
        ``data``)."""

    def get(self, name: str) -> bytes | None:
        """The field ``name``'s bytes (None when the form has no such field)."""

    def text(self, name: str) -> str | None:
        """The field ``name`` as text (UTF-8, undecodable bytes replaced); None when empty."""

    def size(self, name: str) -> int:
        """How many bytes the field ``name`` was sent as, without decoding it."""


class Intake(Protocol):
    """What the dashboard hands an ingress with each request: the hardened ways to read it,
    the check of its password, and the handover of the mail.

    Every read is capped (by default at ``[mail] max_message_bytes``, with room for the
    encoding around it in JSON and forms), refuses a content coding, and parses in a worker
    thread; each raises ``IngressRefused`` (413, 415, 422) for a request it will not read.
    """

    @property
    def app(self) -> Installation:
        """The installation the mail is for (its configuration, database and plugins)."""

    @property
    def secret(self) -> str:
        """The ingress's secret, from the environment variable its ``secret_env`` names."""

    @property
    def max_message_bytes(self) -> int:
        """The largest message the installation takes, in bytes."""

    def check_password(self, password: str | None = None) -> None:
        """Refuse the request (401) unless its HTTP Basic password is ``password`` (the
        ingress's ``secret`` by default), compared in constant time; wrong passwords are
        limited per client address as dashboard logins are (429)."""

    def check_type(self, *allowed: str) -> None:
        """Refuse the request (415) unless its body is one of the media types ``allowed``,
        sent as it is (no content coding). Judged before any of the body is read."""

    async def read_body(self, limit: int | None = None) -> bytes:
        """The raw body, refused (413) as soon as it passes ``limit`` bytes (the message
        limit by default), or at once when its declared length does. A ``limit`` may lower
        a read's cap, never raise it past twice the message limit and 1 MiB."""

    async def read_json(self, limit: int | None = None) -> Any:
        """The body as JSON, parsed in a worker thread; 422 when it is not JSON."""

    async def read_form(self, limit: int | None = None, *, files: bool = False) -> PostedForm:
        """The posted form (multipart or URL-encoded), parsed as it arrives in a worker
        thread; 413 past the limit or too many fields, 422 when it does not parse or
        (unless ``files``) carries a file part."""

    async def deliver(
        self, raw: bytes, recipients: Sequence[str], envelope_sender: str | None = None
    ) -> Any:
        """Hand ``raw`` (the message's exact bytes) to ``ingest`` for the envelope
        ``recipients`` (never the To or Cc headers), and return the answer to send: 204 taken,
        413 too large, 422 refused (no recipient, no agent at the address, the sender not
        admitted), 503 storage unavailable for now. Who sent it is decided by protege's own
        DKIM check of ``raw``."""


class Ingress:
    """Base of an HTTP way in for mail; subclass it, set ``name`` and ``secret_env``, and write
    ``receive``.

    ``receive(request, intake)`` is called for each ``POST /ingress/NAME`` once the secret is
    known to be set. It must authenticate the request first (``intake.check_password()``, or
    a provider's signature checked against ``intake.secret``), before it reads the body; then
    read the body with the intake's readers, find the raw message and the envelope
    recipients, and return ``await intake.deliver(...)``. It refuses by raising
    ``IngressRefused``; anything else it raises is logged with its traceback and answered 500,
    and the dashboard goes on serving.
    """

    #: The ingress's name: its path is ``/ingress/NAME``. Lowercase letters, digits, ``-``
    #: and ``_``, starting with a letter.
    name: ClassVar[str] = ""
    #: The environment variable holding its secret (a password, a signing key). An ingress
    #: whose variable is unset or empty is closed: it answers 404 and never runs.
    secret_env: ClassVar[str | None] = None

    async def receive(self, request: Any, intake: Intake) -> Any:
        """Take the mail ``request`` carries and return the answer (a Response of the web
        framework ``request`` belongs to, usually the one ``intake.deliver`` returns)."""
        raise NotImplementedError
