"""HTTP ways in for mail, for deployments that cannot take SMTP from the internet.

Each hands the raw message to the same ``ingest`` as the SMTP gateway, with its limits and
refusals, and answers as the gateway would: 204 where it says 250, 422 where it says 550
(no agent has the address, or the sender is refused: the reason stays in the log), 413
where it says 552 (too large), 503 where it says 451 (try again later); and 401 for a wrong
password or signature, 415 for a body of the wrong type.

- ``POST /ingress/relay``: the raw message (``message/rfc822``), HTTP basic auth.
- ``POST /ingress/postmark``: Postmark's inbound webhook (JSON, ``RawEmail``), basic auth.
- ``POST /ingress/sendgrid``: SendGrid's Inbound Parse, basic auth: the raw MIME (``email``)
  or, without it, the parsed fields (``headers``, ``text``, ``html``), rebuilt into a message.
- ``POST /ingress/mailgun``: a Mailgun route's ``body-mime``, its HMAC signature checked.

Who sent the mail is decided as for SMTP, by ``ingest``'s DKIM check of the raw message
(there is no SMTP session here, so no SPF). A message rebuilt from parsed fields proves
nothing by itself. A provider's own SPF and DKIM results (SendGrid's ``SPF`` and ``dkim``
fields, Mailgun's ``X-Mailgun-Spf`` and ``X-Mailgun-Dkim-Check-Result``, the ``Received-SPF``
and ``Authentication-Results`` Postmark puts on top of ``Headers``) count only for an ingress
named in the settings' ``trust_provider_verdicts``, and only once the request's password or
signature was checked: then a pass aligned with the From domain proves the sender (method
``relay``); when they prove nothing, protege's own check of the raw message still decides.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from python_multipart import create_form_parser
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from protege import admin
from protege.authentication import Resolver, Verdict, unverified
from protege_dashboard.provider_verdicts import (
    ProviderReport,
    from_domain,
    mailgun_report,
    postmark_report,
    provider_verdict,
    sendgrid_report,
)
from protege_dashboard.provider_verdicts import (
    form_text as _text,
)
from protege_dashboard.settings import DashboardSettings

logger = logging.getLogger(__name__)
# JSON escaping and form encoding around a message can double it; beyond that, refuse
# before reading on.
ENVELOPE_FACTOR = 2
ENVELOPE_OVERHEAD = 1024 * 1024


class Refused(Exception):
    """An answer other than 204, with the status and the line to say."""

    def __init__(self, status: int, said: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(said)
        self.status = status
        self.headers = headers or {}


def _settings(request: Request) -> DashboardSettings:
    return request.app.state.settings


def _secret(request: Request, ingress: str) -> str:
    secret = request.app.state.secrets.get(ingress)
    if secret is None:
        raise Refused(404, f"the {ingress} ingress is not configured")
    return secret


def _check_basic_auth(request: Request, password: str) -> None:
    """The request's Basic password is ``password``; refused (401), and limited per client
    address as dashboard logins are (429), otherwise."""
    limiter = request.app.state.login_limiter
    keys = (f"ingress:{request.client.host if request.client else 'unknown'}",)
    if not limiter.attempt(*keys):
        raise Refused(429, "too many wrong passwords: try again later")
    header = request.headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    given = ""
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            given = ""
    if not hmac.compare_digest(given.encode(), password.encode()):
        raise Refused(401, "wrong password", {"WWW-Authenticate": 'Basic realm="protege"'})
    limiter.succeeded(*keys)


def _check_type(request: Request, *allowed: str) -> None:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise Refused(415, f"send the body as it is, not {encoding}-encoded")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in allowed:
        raise Refused(415, f"send {' or '.join(allowed)}, not {media or 'no content type'}")


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"the body is over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


MAX_FIELDS = 100


def _form(request: Request, body: bytes) -> dict[str, bytes]:
    """The fields of a posted form as bytes, exactly as sent: a message in a field keeps
    every byte, whatever its character set. A file part is refused."""
    fields: dict[str, bytes] = {}

    def on_field(field: Any) -> None:
        if len(fields) >= MAX_FIELDS:
            raise Refused(422, f"the form has more than {MAX_FIELDS} fields")
        name = (field.field_name or b"").decode("utf-8", "replace")
        fields.setdefault(name, field.value or b"")

    def on_file(file: Any) -> None:
        raise Refused(422, "the form may not carry files")

    headers = {
        "Content-Type": request.headers.get("content-type", "").encode("latin-1", "replace"),
        "Content-Length": str(len(body)).encode(),
    }
    try:
        parser = create_form_parser(
            headers, on_field, on_file, config={"MAX_MEMORY_FILE_SIZE": len(body) + 1}
        )
        parser.write(body)
        parser.finalize()
    except Refused:
        raise
    except Exception as error:  # python-multipart's word for a body it cannot read
        raise Refused(422, f"the form does not parse: {error}") from None
    return fields


def _raw(text: str) -> bytes:
    # A message that came as text (JSON, form fields) goes back to bytes as UTF-8; a lone
    # surrogate that JSON may carry becomes "?" rather than an error.
    return text.encode("utf-8", "replace")


def _field(form: dict[str, bytes], name: str) -> bytes:
    value = form.get(name)
    if not value:
        raise Refused(422, f"the form has no {name!r} field")
    return value


def _resolver(request: Request) -> Resolver:
    """The DNS resolver of this app's ingresses: one, kept on the app so that its cache
    serves every request, built again only when ``[mail.authentication]`` changed."""
    settings = request.app.state.installation.config.mail.authentication
    kept = getattr(request.app.state, "ingress_resolver", None)
    if kept is None or kept[0] != settings:
        kept = (settings, settings.resolver())
        request.app.state.ingress_resolver = kept
    return kept[1]


async def _ingest(
    request: Request,
    raw: bytes,
    recipients: list[str] | None = None,
    envelope_sender: str | None = None,
    verdict: Verdict | None = None,
) -> Response:
    config = request.app.state.installation.config
    try:
        delivered = await run_in_threadpool(
            admin.ingest,
            raw,
            config=config,
            recipients=recipients,
            envelope_sender=envelope_sender,
            resolver=_resolver(request),
            verdict=verdict,
        )
    except admin.MailRejected as rejection:
        status = 413 if rejection.code == 552 else 422
        return PlainTextResponse(f"{rejection}\n", status_code=status)
    except admin.StorageUnavailable as error:
        logger.error("could not store inbound mail for now: %s", error)
        return PlainTextResponse(
            "the message could not be stored; try again later\n",
            status_code=503,
            headers={"Retry-After": "60"},
        )
    if admin.all_refused(delivered):
        for refused in delivered:
            logger.info("refused mail %s: %s", refused.message.id, refused.reason)
        return PlainTextResponse("this address does not accept your message\n", status_code=422)
    return Response(status_code=204)


# --- the providers' own verdicts ---------------------------------------------------------


async def _verdict_for(
    request: Request,
    ingress: str,
    raw: bytes,
    report: Callable[[], ProviderReport] | None,
    *,
    rebuilt: bool = False,
) -> Verdict | None:
    """The verdict to hand ``ingest`` for ``raw``, which came through ``ingress`` (its
    password or signature already checked); None lets ``ingest`` check the raw message's
    DKIM itself. ``report`` reads the provider's own results, used only when the settings
    trust that ingress's; a ``rebuilt`` message (from parsed fields) proves nothing else."""
    if request.app.state.installation.config.mail.authentication.mode == "off":
        return None  # ingest records that nothing was checked
    verdict = None
    if report is not None and ingress in _settings(request).trust_provider_verdicts:
        # Its DMARC lookup may wait on DNS: off the event loop, as ingest is.
        verdict = await run_in_threadpool(provider_verdict, raw, report(), _resolver(request))
        if verdict.authenticated:
            return verdict
    if not rebuilt:
        return None
    if verdict is not None:
        return verdict
    return unverified(
        f"rebuilt from the {ingress} webhook's parsed fields, which prove nothing by "
        "themselves (no provider verdicts trusted)",
        from_domain(raw),
    )


def _limit(request: Request, factor: int = 1, overhead: int = 0) -> int:
    return request.app.state.installation.config.mail.max_message_bytes * factor + overhead


def _answering(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as refused:
            return PlainTextResponse(
                f"{refused}\n", status_code=refused.status, headers=refused.headers
            )

    endpoint.__doc__ = handler.__doc__
    return endpoint


@_answering
async def relay(request: Request) -> Response:
    """A raw RFC 822 message, as Action Mailbox's relay ingress takes it."""
    _check_basic_auth(request, _secret(request, "relay"))
    _check_type(request, "message/rfc822")
    return await _ingest(request, await _body(request, _limit(request)))


@_answering
async def postmark(request: Request) -> Response:
    """Postmark's inbound webhook, with "include raw email content" on."""
    _check_basic_auth(request, _secret(request, "postmark"))
    _check_type(request, "application/json")
    body = await _body(request, _limit(request, ENVELOPE_FACTOR, ENVELOPE_OVERHEAD))
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Refused(422, "the body is not JSON") from None
    raw = payload.get("RawEmail") if isinstance(payload, dict) else None
    if not isinstance(raw, str) or not raw:
        raise Refused(422, "no RawEmail: turn on the webhook's raw email content")
    message = _raw(raw)
    verdict = await _verdict_for(request, "postmark", message, lambda: postmark_report(payload))
    return await _ingest(request, message, verdict=verdict)


MIME_FIELDS = ("content-type", "content-transfer-encoding", "mime-version")


def rebuilt_from_fields(form: dict[str, bytes]) -> bytes:
    """A message rebuilt from SendGrid's parsed fields: the original header block
    (``headers``) without its MIME fields, over the ``text`` (else the ``html``) part,
    decoded by the charset ``charsets`` names for it and sent on as UTF-8."""
    header_block = _field(form, "headers").replace(b"\r\n", b"\n").strip(b"\n")
    kept: list[bytes] = []
    dropping = False
    for line in header_block.split(b"\n"):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.split(b":", 1)[0].strip().lower().decode("latin-1") in MIME_FIELDS
        if not dropping:
            kept.append(line)
    try:
        charsets = json.loads(_text(form, "charsets") or "{}")
    except ValueError:
        charsets = {}
    part, subtype = ("text", "plain") if form.get("text") else ("html", "html")
    charset = charsets.get(part) if isinstance(charsets, dict) else None
    written = form.get(part) or b""
    try:
        content = written.decode(charset if isinstance(charset, str) else "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        content = written.decode("utf-8", "replace")
    kept += [
        b"MIME-Version: 1.0",
        f"Content-Type: text/{subtype}; charset=utf-8".encode(),
        b"Content-Transfer-Encoding: 8bit",
    ]
    body = content.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")
    return b"\r\n".join(kept) + b"\r\n\r\n" + body


@_answering
async def sendgrid(request: Request) -> Response:
    """SendGrid's Inbound Parse webhook: the raw, full MIME message (``email``) when "send
    raw" is on, else the parsed fields, from which a message is rebuilt."""
    _check_basic_auth(request, _secret(request, "sendgrid"))
    _check_type(request, "multipart/form-data")
    body = await _body(request, _limit(request, ENVELOPE_FACTOR, ENVELOPE_OVERHEAD))
    form = _form(request, body)
    rebuilt = not form.get("email") and bool(form.get("headers"))
    raw = rebuilt_from_fields(form) if rebuilt else _field(form, "email")
    recipients, sender = None, None
    envelope = _text(form, "envelope")
    if envelope:
        try:
            parsed = json.loads(envelope)
        except ValueError:
            raise Refused(422, "the envelope field is not JSON") from None
        if isinstance(parsed, dict):
            to = parsed.get("to")
            if isinstance(to, list) and all(isinstance(a, str) for a in to):
                recipients = to
            sender = parsed.get("from") if isinstance(parsed.get("from"), str) else None
    verdict = await _verdict_for(
        request, "sendgrid", raw, lambda: sendgrid_report(form, sender), rebuilt=rebuilt
    )
    return await _ingest(request, raw, recipients, sender, verdict)


class SeenTokens:
    """Mailgun tokens already used, so a captured request cannot be replayed while its
    timestamp is still fresh."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()

    def first_use(self, token: str) -> bool:
        """Whether ``token`` is new (remembering it)."""
        if token in self._seen:
            return False
        self._seen[token] = None
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return True


@_answering
async def mailgun(request: Request) -> Response:
    """A Mailgun route forwarding to a URL ending in ``mime``: ``body-mime``, signed."""
    key = _secret(request, "mailgun")
    _check_type(request, "multipart/form-data", "application/x-www-form-urlencoded")
    body = await _body(request, _limit(request, ENVELOPE_FACTOR, ENVELOPE_OVERHEAD))
    form = _form(request, body)
    timestamp, token = _text(form, "timestamp"), _text(form, "token")
    signature = _text(form, "signature")
    if not (timestamp and token and signature):
        raise Refused(401, "the request is not signed")
    # Whole seconds only: "nan" would never age, and a sign, a space or a fraction has no
    # place in what Mailgun signs.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise Refused(401, "the timestamp is not a time in whole seconds")
    expected = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, str(signature)):
        raise Refused(401, "wrong signature")
    age = abs(time.time() - int(timestamp))
    if age > _settings(request).mailgun_max_age_seconds:
        raise Refused(401, "the signature is too old")
    if not request.app.state.mailgun_tokens.first_use(str(token)):
        raise Refused(401, "this signed request was used already")
    raw = _field(form, "body-mime")
    recipient = _text(form, "recipient")
    recipients = [recipient] if recipient else None
    sender = _text(form, "sender")
    verdict = await _verdict_for(request, "mailgun", raw, lambda: mailgun_report(form, raw, sender))
    return await _ingest(request, raw, recipients, sender, verdict)


ROUTES = [
    Route("/ingress/relay", relay, methods=["POST"]),
    Route("/ingress/postmark", postmark, methods=["POST"]),
    Route("/ingress/sendgrid", sendgrid, methods=["POST"]),
    Route("/ingress/mailgun", mailgun, methods=["POST"]),
]
