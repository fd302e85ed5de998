"""HTTP ways in for mail, for deployments that cannot take SMTP from the internet.

Each hands the raw message to the same ``ingest`` as the SMTP gateway, with its limits and
refusals, and answers as the gateway would: 204 where it says 250, 422 where it says 550
(no agent has the address, or the sender is refused: the reason stays in the log), 413
where it says 552 (too large), 503 where it says 451 (try again later); and 401 for a wrong
password or signature, 415 for a body of the wrong type.

- ``POST /ingress/relay``: the raw message (``message/rfc822``), HTTP basic auth; the
  envelope in the request's ``Protege-Envelope-To`` (and ``Protege-Envelope-From``) headers.
- ``POST /ingress/postmark``: Postmark's inbound webhook (JSON, ``RawEmail``), basic auth;
  for its ``OriginalRecipient``.
- ``POST /ingress/sendgrid``: SendGrid's Inbound Parse, basic auth: the raw MIME (``email``)
  or, without it, the parsed fields (``headers``, ``text``, ``html``, the attachments),
  rebuilt into a message; for its ``envelope``'s ``to``.
- ``POST /ingress/mailgun``: a Mailgun route's ``body-mime``, its HMAC signature checked;
  for its ``recipient``.

Mail goes to the envelope recipients the provider (or the relay) reports, never to the To,
Cc or Delivered-To headers, which whoever wrote the mail wrote. Every request is read as
``ingress_requests`` reads it: what can be checked before the body is, the body is capped
as it arrives, and it is parsed off the event loop.

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

import contextlib
import datetime
import hashlib
import hmac
import json
import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from protege import Ingress, Intake
from protege.models import UsedToken
from protege_dashboard.ingress_handover import ingest_answered, verdict_for
from protege_dashboard.ingress_intake import (
    MAX_ENVELOPE_CHARS,
    MAX_ENVELOPE_RECIPIENTS,
    envelope_recipients,
)
from protege_dashboard.ingress_requests import Form, Refused
from protege_dashboard.provider_verdicts import (
    mailgun_report,
    postmark_report,
    sendgrid_report,
)
from protege_dashboard.rebuilt import rebuilt_from_fields
from protege_dashboard.settings import DashboardSettings

__all__ = ["INGRESSES", "Mailgun", "Postmark", "Relay", "SendGrid"]

# The relay's envelope, in request headers its MTA writes (never the message's own).
ENVELOPE_TO = "Protege-Envelope-To"
ENVELOPE_FROM = "Protege-Envelope-From"
MAX_TOKEN_CHARS = 200  # Mailgun's are 50


def _settings(request: Request) -> DashboardSettings:
    return request.app.state.settings


def _raw(text: str) -> bytes:
    # A message that came as text (JSON, form fields) goes back to bytes as UTF-8; a lone
    # surrogate that JSON may carry becomes "?" rather than an error.
    return text.encode("utf-8", "replace")


def _field(form: Form, name: str) -> bytes:
    value = form.get(name)
    if not value:
        raise Refused(422, f"the form has no {name!r} field")
    return value


# --- the ways in -------------------------------------------------------------------------
# Their secrets' variables are named in the dashboard's settings (``relay_password_env``...);
# ``secret_env`` is each one's default there.


class Relay(Ingress):
    """A raw RFC 822 message from the operator's own MTA or script, its envelope in
    ``Protege-Envelope-To`` (one or more, comma-separated or repeated) and
    ``Protege-Envelope-From`` request headers."""

    name, secret_env = "relay", "PROTEGE_RELAY_PASSWORD"

    async def receive(self, request: Request, intake: Intake) -> Response:
        """Take one raw message for its envelope recipients."""
        intake.check_password()
        intake.check_type("message/rfc822")
        named = [
            address
            for value in request.headers.getlist(ENVELOPE_TO)
            for address in value.split(",")
        ]
        recipients = envelope_recipients(named, f"name it in a {ENVELOPE_TO} request header")
        given = request.headers.get(ENVELOPE_FROM)
        # Present but empty (or "<>"): the null return path of a bounce, as SMTP says it.
        sender = None if given is None else given.strip().strip("<>").strip()
        raw = await intake.read_body()
        return await ingest_answered(request, raw, recipients, sender)


class Postmark(Ingress):
    """Postmark's inbound webhook, with "include raw email content" on."""

    name, secret_env = "postmark", "PROTEGE_POSTMARK_PASSWORD"

    async def receive(self, request: Request, intake: Intake) -> Response:
        """Take ``RawEmail`` for the ``OriginalRecipient``."""
        intake.check_password()
        intake.check_type("application/json")
        payload = await intake.read_json()
        if not isinstance(payload, dict):
            raise Refused(422, "the body is not a JSON object")
        raw = payload.get("RawEmail")
        if not isinstance(raw, str) or not raw:
            raise Refused(422, "no RawEmail: turn on the webhook's raw email content")
        original = payload.get("OriginalRecipient")
        if not isinstance(original, str):
            raise Refused(422, "no OriginalRecipient as text")
        recipients = envelope_recipients([original], "OriginalRecipient is empty")
        message = _raw(raw)
        verdict = await verdict_for(request, self.name, message, lambda: postmark_report(payload))
        return await ingest_answered(request, message, recipients, verdict=verdict)


class SendGrid(Ingress):
    """SendGrid's Inbound Parse webhook: the raw, full MIME message (``email``) when "send
    raw" is on, else the parsed fields and attachments, from which a message is rebuilt."""

    name, secret_env = "sendgrid", "PROTEGE_SENDGRID_PASSWORD"

    async def receive(self, request: Request, intake: Intake) -> Response:
        """Take the message for the envelope's ``to``."""
        intake.check_password()
        intake.check_type("multipart/form-data")
        form = await intake.read_form(files=True)
        assert isinstance(form, Form)  # the dashboard's intake reads its own forms
        # The envelope is JSON and the rebuilt message a MIME tree: off the event loop.
        recipients, sender = await run_in_threadpool(self._envelope, form)
        rebuilt = not form.get("email") and bool(form.get("headers"))
        if rebuilt:
            raw = await run_in_threadpool(rebuilt_from_fields, form)
        else:
            raw = _field(form, "email")
        verdict = await verdict_for(
            request, self.name, raw, lambda: sendgrid_report(form.fields, sender), rebuilt=rebuilt
        )
        return await ingest_answered(request, raw, recipients, sender, verdict)

    @staticmethod
    def _envelope(form: Form) -> tuple[list[str], str | None]:
        """The recipients and sender of the form's ``envelope``; 422 without one."""
        try:
            envelope = json.loads(form.text("envelope") or "null")
        except (ValueError, RecursionError):
            raise Refused(422, "the envelope field is not JSON") from None
        if not isinstance(envelope, dict):
            raise Refused(422, "no envelope: the form has no JSON object in 'envelope'")
        to = envelope.get("to")
        if not (isinstance(to, list) and all(isinstance(a, str) for a in to)):
            raise Refused(422, "the envelope's 'to' is not a list of addresses")
        recipients = envelope_recipients(to, "the envelope's 'to' is empty")
        sender = envelope.get("from")
        return recipients, sender if isinstance(sender, str) else None


class Mailgun(Ingress):
    """A Mailgun route forwarding to a URL ending in ``mime``: ``body-mime``, signed, as a
    URL-encoded form (mail without attachments) or a multipart one (with)."""

    name, secret_env = "mailgun", "MAILGUN_SIGNING_KEY"

    async def receive(self, request: Request, intake: Intake) -> Response:
        """Take ``body-mime`` for the ``recipient``, once its signature is checked."""
        intake.check_type("multipart/form-data", "application/x-www-form-urlencoded")
        # Mailgun signs inside the form: it can only be checked once the form is read.
        form = await intake.read_form(files=True)
        assert isinstance(form, Form)  # the dashboard's intake reads its own forms
        token = await self._check_signature(request, form, intake.secret)
        taken = False
        try:
            # Only now are the big values decoded, in a worker thread: a URL-encoded message
            # costs seconds of Python to decode, which no unsigned request gets to spend.
            raw, recipients, sender = await run_in_threadpool(self._mail_of, form)
            verdict = await verdict_for(
                request, self.name, raw, lambda: mailgun_report(form.fields, raw, sender)
            )
            answer = await ingest_answered(request, raw, recipients, sender, verdict)
            taken = answer.status_code < 300
            return answer
        finally:
            if not taken:  # Mailgun sends the same signed fields again: let that retry in
                with contextlib.suppress(Exception):
                    await run_in_threadpool(UsedToken.forget, self.name, token)

    @staticmethod
    def _mail_of(form: Form) -> tuple[bytes, list[str], str | None]:
        """The message, its envelope recipients and its envelope sender."""
        if form.size("recipient") > MAX_ENVELOPE_CHARS:
            raise Refused(413, f"more than {MAX_ENVELOPE_RECIPIENTS} envelope recipients")
        named = (form.text("recipient") or "").split(",")
        recipients = envelope_recipients(named, "the form has no 'recipient'")
        return _field(form, "body-mime"), recipients, form.text("sender")

    async def _check_signature(self, request: Request, form: Form, key: str) -> str:
        """The token, once the form is found to carry Mailgun's HMAC-SHA256, with ``key``,
        of its timestamp followed by its token, the timestamp is within the window either
        side of now, and the token was never taken before (by any process on this
        database); 401 otherwise."""
        for name, longest in (("timestamp", 12), ("token", MAX_TOKEN_CHARS), ("signature", 128)):
            if form.size(name) > longest:  # before decoding it
                raise Refused(401, f"the {name} is not one Mailgun makes")
        timestamp, token = form.text("timestamp"), form.text("token")
        signature = form.text("signature")
        if not (timestamp and token and signature):
            raise Refused(401, "the request is not signed")
        # Whole seconds only: "nan" would never age, and a sign, a space or a fraction has
        # no place in what Mailgun signs.
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            raise Refused(401, "the timestamp is not a time in whole seconds")
        signed = f"{timestamp}{token}".encode()
        expected = hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise Refused(401, "wrong signature")
        window = _settings(request).mailgun_max_age_seconds
        if abs(time.time() - int(timestamp)) > window:
            raise Refused(401, "the signature is too old (or from the future)")
        # Kept until the timestamp leaves the window: a replay is refused by its age then.
        until = datetime.datetime.fromtimestamp(int(timestamp) + window, datetime.UTC)
        first = await run_in_threadpool(
            UsedToken.first_use, self.name, token, until.replace(tzinfo=None)
        )
        if not first:
            raise Refused(401, "this signed request was used already")
        return token


# The dashboard's own, registered through ``register_ingresses`` as a plugin's are.
INGRESSES: tuple[Ingress, ...] = (Relay(), Postmark(), SendGrid(), Mailgun())
