"""Handing checked mail to an SMTP relay, and telling the truth about each recipient.

A relay may accept some recipients and refuse others. Permanent refusals (5xx) are final;
temporary ones (4xx, or no connection) are deferred: the delivery loop tries those
recipients again later. A failure that concerns the whole mail (login refused, a
certificate that does not verify, DATA refused for good) ends it for everyone still waiting.
"""

from __future__ import annotations

import email.generator
import email.parser
import email.policy
import functools
import io
import ipaddress
import logging
import smtplib
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from protege.config import MailSettings, is_host_name

logger = logging.getLogger(__name__)


@attrs.frozen
class Refusal:
    """One recipient the relay would not take, with its answer."""

    address: str
    code: int
    reason: str

    @property
    def permanent(self) -> bool:
        """Whether retrying cannot help (a 5xx answer)."""
        return self.code >= 500

    def as_dict(self) -> dict[str, object]:
        """The refusal as stored on the message and shown to the model."""
        return {"address": self.address, "code": self.code, "reason": self.reason}


@attrs.frozen
class Handover:
    """What one attempt at the relay did with a mail: who has it, who was refused for good,
    who should be tried again later, and, when the whole mail failed, why."""

    delivered: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    deferred: tuple[Refusal, ...] = ()
    error: str | None = None


class FinalFailure(Exception):
    """A failure of the whole mail that retrying will not fix (a login refused, a
    certificate that does not verify): its message says why, in one line."""


def send(
    raw: bytes,
    sender: str,
    recipients: list[str],
    settings: MailSettings,
    *,
    root: Path,
    international: bool = False,
) -> Handover:
    """One attempt to send ``raw`` from ``sender`` to ``recipients`` through ``settings``'
    relay; the caller decides when to try the deferred recipients again.

    ``root`` is where a relative ``smtp_ca_file`` is found. ``international`` asks the relay
    for SMTPUTF8.
    """
    return send_with(
        raw, sender, recipients, lambda: _connected(settings, root), international=international
    )


def send_with(
    raw: bytes,
    sender: str,
    recipients: list[str],
    connect: Callable[[], smtplib.SMTP],
    *,
    international: bool = False,
) -> Handover:
    """One attempt to send ``raw`` through the server ``connect`` gives (greeted, secured
    and logged in as it needs; raising ``FinalFailure`` for a failure of the whole mail):
    what became of each recipient, as ``send`` reports it."""
    try:
        answers = _attempt(raw, sender, recipients, connect, international)
    except FinalFailure as error:
        return Handover(error=str(error))
    except smtplib.SMTPRecipientsRefused as error:
        answers = {a: _refusal(a, code, text) for a, (code, text) in error.recipients.items()}
    except smtplib.SMTPResponseException as error:
        if error.smtp_code >= 500:
            return Handover(error=f"SMTP {error.smtp_code}: {_text(error.smtp_error)}")
        answers = {a: _refusal(a, error.smtp_code, error.smtp_error) for a in recipients}
    except (OSError, smtplib.SMTPException) as error:
        answers = {a: Refusal(a, 0, f"{type(error).__name__}: {error}") for a in recipients}
    deferred = tuple(r for r in answers.values() if not r.permanent)
    if deferred:
        logger.warning(
            "SMTP delivery to %s deferred: %s", [r.address for r in deferred], reason(deferred[0])
        )
    return Handover(
        delivered=tuple(a for a in recipients if a not in answers),
        refused=tuple(r for r in answers.values() if r.permanent),
        deferred=deferred,
    )


def _connected(settings: MailSettings, root: Path) -> smtplib.SMTP:
    """A connection to ``[mail] smtp_host``, secured and logged in as ``[mail]`` asks."""
    # Named once connected (EHLO comes later): the default name may be the connection's
    # own address.
    smtp = Client(
        settings.smtp_host, settings.smtp_port, local_hostname="[]", timeout=settings.smtp_timeout
    )
    smtp.data_timeout = settings.smtp_data_timeout
    try:
        if smtp.sock is None:
            raise smtplib.SMTPServerDisconnected("the relay closed the connection")
        smtp.local_hostname = ehlo_name(settings, smtp.sock.getsockname()[0])
        if settings.smtp_starttls:
            try:
                smtp.starttls(context=_tls_context(settings, root))
            except ssl.SSLCertVerificationError as error:
                raise FinalFailure(
                    f"the certificate of {settings.smtp_host} did not verify "
                    f"({error.verify_message}); set [mail] smtp_ca_file if it is signed by "
                    "your own authority"
                ) from None
        if settings.smtp_username:
            try:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            except smtplib.SMTPAuthenticationError as error:
                raise FinalFailure(
                    f"SMTP refused the login of {settings.smtp_username}: {_text(error.smtp_error)}"
                ) from None
    except BaseException:
        smtp.close()
        raise
    return smtp


def _attempt(
    raw: bytes,
    sender: str,
    recipients: list[str],
    connect: Callable[[], smtplib.SMTP],
    international: bool,
) -> dict[str, Refusal]:
    """One connection; returns the recipients refused while others were accepted."""
    smtp = connect()
    try:
        options = ["SMTPUTF8"] if international else []
        smtp.ehlo_or_helo_if_needed()
        if not raw.isascii():
            if smtp.has_extn("8bitmime"):
                options.append("BODY=8BITMIME")
            else:
                raw = seven_bit(raw)
        answered = smtp.sendmail(sender, recipients, raw, mail_options=options)
    except BaseException:
        smtp.close()
        raise
    # The relay has the mail: whatever QUIT answers (an error, nothing at all) changes
    # nothing about that, and must not make it look unsent and send it again.
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        smtp.close()
    return {a: _refusal(a, code, text) for a, (code, text) in answered.items()}


def ehlo_name(settings: MailSettings, local_address: str) -> str:
    """The name to greet the relay with: ``[mail] ehlo_name``, else this machine's fully
    qualified name when it is a real one, else the address literal of ``local_address``
    (the connection's own end), as RFC 5321 asks of a client without a name."""
    if settings.ehlo_name:
        return settings.ehlo_name
    name = _machine_name()
    if name is not None:
        return name
    address = ipaddress.ip_address(local_address.partition("%")[0])
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            return f"[IPv6:{address.compressed}]"
        address = address.ipv4_mapped
    return f"[{address}]"


@functools.cache
def _machine_name() -> str | None:
    """This machine's fully qualified name, or None when it has no real one (no dot, or a
    name such as localhost.localdomain that stands for no machine). Asked once: it may
    take a DNS lookup."""
    name = socket.getfqdn().rstrip(".").lower()
    first, _, rest = name.partition(".")
    if not is_host_name(name) or first == "localhost" or rest in ("localdomain", "local"):
        return None
    return name


def seven_bit(raw: bytes) -> bytes:
    """``raw`` with each part sent as 8bit re-encoded in a 7-bit transfer encoding (the
    email package's choice for its charset, base64 for UTF-8), for a relay that does not
    offer 8BITMIME. The text read from each part is the same."""
    message = email.parser.BytesParser(policy=email.policy.SMTP).parsebytes(raw)
    out = io.BytesIO()
    generator = email.generator.BytesGenerator(out, policy=email.policy.SMTP.clone(cte_type="7bit"))
    generator.flatten(message)
    return out.getvalue()


class Client(smtplib.SMTP):
    """``smtplib.SMTP`` waiting ``data_timeout`` for the relay's answer to the mail itself:
    a relay may check the whole mail (content filters) before it answers, and a sender that
    gives up then would hand it the same mail again."""

    data_timeout: float | None = None

    def data(self, msg: Any) -> tuple[int, bytes]:
        if self.sock is not None and self.data_timeout is not None:
            self.sock.settimeout(self.data_timeout)
        return super().data(msg)


def _tls_context(settings: MailSettings, root: Path) -> ssl.SSLContext:
    if not settings.smtp_ca_file:
        return ssl.create_default_context()  # the system's authorities; the host name is checked
    try:
        return ssl.create_default_context(cafile=str(root / settings.smtp_ca_file))
    except (OSError, ssl.SSLError) as error:
        raise FinalFailure(f"cannot use smtp_ca_file {settings.smtp_ca_file}: {error}") from None


def _refusal(address: str, code: int, text: bytes | str) -> Refusal:
    return Refusal(address, code, _text(text))


def reason(refusal: Refusal) -> str:
    """The refusal as one line: its SMTP code and text."""
    return f"SMTP {refusal.code}: {refusal.reason}" if refusal.code else refusal.reason


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
