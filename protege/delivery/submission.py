"""The ``submission`` transport: each mail handed to the provider's submission server
(``[mail.submission]``) as a mail client would hand it, logged in, over TLS; and a copy put
in the Sent folder of the agent's mailbox, where people look for it.

STARTTLS is required on the plain port (587) and TLS is implicit on 465; the certificate
and the host name are verified; AUTH is required (a server that does not offer it gets no
mail). What the server answers for each recipient is reported as the ``smtp`` transport
reports it. The Sent copy is made once per mail, after the server took it for someone: a
copy already there (the same Message-ID) is not made again, and a copy that cannot be made
is logged, never a reason to send the mail again.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
import smtplib
import ssl
from collections.abc import Iterable
from typing import Any

from protege.access import routing_key
from protege.config import Config
from protege.delivery.transports import Envelope, MailRefused, Outcome, Transport, outcomes_of
from protege.errors import ConfigError
from protege.gateway import oauth2, relay
from protege.gateway.imap import MailboxUnavailable, connect, describe, log_out, tls_context
from protege.mailbox_settings import TLS, MailboxSettings, SubmissionSettings

logger = logging.getLogger(__name__)


class _TlsClient(relay.Client, smtplib.SMTP_SSL):
    """``relay.Client`` over implicit TLS (port 465)."""


class SubmissionTransport(Transport):
    """Sends through ``[mail.submission]``, logged in; see the module's description."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        settings = config.mail.submission
        self.settings: SubmissionSettings = settings
        if not settings.host or not settings.username:
            raise ConfigError(
                '[mail] transport = "submission" needs [mail.submission] host and username'
            )
        if settings.oauth2_command is None and settings.password is None:
            raise ConfigError(
                f"[mail.submission]: the password of {settings.username} is not set: put it "
                f"in the environment variable {settings.password_env}, or set oauth2_command"
            )
        self.context = _context(settings, config)
        # Sent copies are made apart from the hand-off, so that the delivery is recorded
        # before them: a crash while one is made loses a copy, never sends the mail again.
        self._copies = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="protege-sent-copy"
        )

    def close(self) -> None:
        """Wait for the Sent copies under way (for a clean shutdown, and tests)."""
        self._copies.shutdown(wait=True)

    def send(self, message: bytes, envelope: Envelope) -> Iterable[Outcome]:
        """One attempt at the submission server, then the Sent copy."""
        answer = relay.send_with(
            message,
            envelope.sender,
            list(envelope.recipients),
            self.open_connection,
            international=envelope.smtputf8,
        )
        if answer.error is not None:
            raise MailRefused(answer.error)
        if answer.delivered and sent_mailbox(self.config, envelope.sender) is not None:
            try:
                self._copies.submit(self._copy_to_sent, message, envelope)
            except RuntimeError:  # closed: the copy is made here, the mail is sent
                self._copy_to_sent(message, envelope)
        return outcomes_of(answer)

    def open_connection(self) -> smtplib.SMTP:
        """A connection to the submission server, secured and logged in; ``FinalFailure``
        for what no retry can help (a certificate, a login refused)."""
        settings = self.settings
        host, port = settings.address
        where = f"the submission server {host}:{port}"
        implicit = settings.tls == TLS
        try:
            if implicit:
                smtp: relay.Client = _TlsClient(
                    host, port, local_hostname="[]", timeout=settings.timeout, context=self.context
                )
            else:
                smtp = relay.Client(host, port, local_hostname="[]", timeout=settings.timeout)
        except ssl.SSLCertVerificationError as error:
            raise relay.FinalFailure(_untrusted(where, error)) from None
        smtp.data_timeout = settings.data_timeout
        try:
            if smtp.sock is None:
                raise smtplib.SMTPServerDisconnected(f"{where} closed the connection")
            smtp.local_hostname = relay.ehlo_name(self.config.mail, smtp.sock.getsockname()[0])
            if not implicit:
                smtp.ehlo()
                if not smtp.has_extn("starttls"):
                    raise relay.FinalFailure(
                        f"{where} does not offer STARTTLS, and protege sends no password in clear"
                    )
                try:
                    smtp.starttls(context=self.context)
                except ssl.SSLCertVerificationError as error:
                    raise relay.FinalFailure(_untrusted(where, error)) from None
            smtp.ehlo()
            if not smtp.has_extn("auth"):
                raise relay.FinalFailure(f"{where} does not offer AUTH: protege logs in to submit")
            self._log_in(smtp, where)
        except BaseException:
            smtp.close()
            raise
        return smtp

    def _log_in(self, smtp: smtplib.SMTP, where: str) -> None:
        settings = self.settings
        username = settings.username or ""
        try:
            if settings.oauth2_command is None:
                smtp.login(username, settings.password or "")
                return
            self._oauth2_log_in(smtp, settings.oauth2_command, username)
        except smtplib.SMTPAuthenticationError as error:
            if error.smtp_code < 500:  # the server's trouble for now: tried again later
                raise
            raise relay.FinalFailure(
                f"{where} refused the login of {username}: {_text(error.smtp_error)}"
            ) from None
        except smtplib.SMTPException as error:
            if "No suitable authentication method" in str(error):
                raise relay.FinalFailure(
                    f"{where} offers no login method protege can use with a password"
                ) from None
            raise

    def _oauth2_log_in(self, smtp: smtplib.SMTP, command: str, username: str) -> None:
        """XOAUTH2 with the command's token; a token refused is asked for afresh once (it
        may have run out while reused). A command that fails is a failure for now."""
        for fresh in (False, True):
            try:
                token = oauth2.access_token(command, fresh=fresh)
            except oauth2.TokenUnavailable as error:
                raise smtplib.SMTPException(str(error)) from None
            response = oauth2.xoauth2(username, token)

            def answer(challenge: bytes | None = None, response: str = response) -> str:
                # After a refusal the server sends its reason as a challenge; an empty
                # answer ends the exchange (RFC 7628's way, which XOAUTH2 follows).
                return response if challenge is None else ""

            try:
                smtp.auth("XOAUTH2", answer, initial_response_ok=True)
                return
            except smtplib.SMTPAuthenticationError:
                oauth2.forget(command)
                if fresh:
                    raise

    # -- the Sent copy ---------------------------------------------------------------------

    def _copy_to_sent(self, message: bytes, envelope: Envelope) -> None:
        found = sent_mailbox(self.config, envelope.sender)
        if found is None:
            return
        name, mailbox = found
        try:
            copy_to_sent(name, mailbox, self.config, message, envelope.message_id)
        except Exception as error:  # the mail is sent: a missing copy must not resend it
            logger.warning(
                "mail %s was sent, but its copy could not be put in %s of mailbox %s: %s",
                envelope.message_id,
                mailbox.sent_folder,
                name,
                error if isinstance(error, MailboxUnavailable) else describe(error),
            )


def sent_mailbox(config: Config, sender: str) -> tuple[str, MailboxSettings] | None:
    """The ``[mail.imap.NAME]`` mailbox of the agent ``sender`` with a ``sent_folder``."""
    key = routing_key(sender)
    for name, mailbox in config.mail.imap.items():
        if mailbox.sent_folder and key is not None and routing_key(mailbox.agent) == key:
            return name, mailbox
    return None


def copy_to_sent(
    name: str, mailbox: MailboxSettings, config: Config, message: bytes, message_id: str
) -> bool:
    """Put ``message`` in ``mailbox``'s Sent folder, seen, unless a mail with its Message-ID
    is there already; whether a copy was made."""
    client = connect(name, mailbox, config.root)
    try:
        folder = mailbox.sent_folder or "Sent"
        client.select_folder(folder)
        if client.search(["HEADER", "Message-ID", message_id]):
            return False
        client.append(
            folder, message, flags=[b"\\Seen"], msg_time=datetime.datetime.now(datetime.UTC)
        )
        return True
    finally:
        log_out(client)


def _context(settings: SubmissionSettings, config: Config) -> ssl.SSLContext:
    try:
        return tls_context(settings.ca_file, config.root)
    except MailboxUnavailable as error:
        raise ConfigError(f"[mail.submission]: {error}") from None


def _untrusted(where: str, error: Any) -> str:
    return (
        f"the certificate of {where} did not verify ({error.verify_message}); set "
        "[mail.submission] ca_file if it is signed by your own authority"
    )


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
