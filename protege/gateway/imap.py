"""Logging in to an IMAP mailbox, as ``[mail.imap.NAME]`` describes it.

The client is imapclient (maintained since 2009, on PyPI as IMAPClient): it wraps the
standard library's imaplib with parsed responses, IDLE, MOVE, UIDPLUS and XOAUTH2, and runs
in the reader's own thread, where a blocking client is simplest to reason about. Every
failure to reach or log in to a mailbox is a ``MailboxUnavailable`` saying why in one line;
the password and tokens never appear in it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from pathlib import Path
from typing import Any

from protege.errors import ProtegeError
from protege.gateway import oauth2
from protege.mailbox_settings import STARTTLS, TLS, MailboxSettings


class MailboxUnavailable(ProtegeError):
    """A mailbox could not be reached, logged in to, or read (for now, or for good)."""


def tls_context(ca_file: str | None, root: Path) -> ssl.SSLContext:
    """A context verifying the server's certificate and name, against the system's
    authorities or ``ca_file`` (relative to ``root``)."""
    if not ca_file:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(root / ca_file))
    except (OSError, ssl.SSLError) as error:
        raise MailboxUnavailable(f"cannot use ca_file {ca_file}: {error}") from None


def connect(name: str, settings: MailboxSettings, root: Path) -> Any:
    """A logged-in ``imapclient.IMAPClient`` for mailbox ``name``; ``MailboxUnavailable``
    when it cannot be had (the reason in one line)."""
    import imapclient
    import imapclient.exceptions

    host, port = settings.address
    where = f"mailbox {name} ({host}:{port})"
    context = tls_context(settings.ca_file, root)
    client = None
    try:
        client = imapclient.IMAPClient(
            host, port, ssl=settings.security == TLS, ssl_context=context, timeout=settings.timeout
        )
        client.normalise_times = False  # INTERNALDATE with its zone: stored in UTC
        if settings.security == STARTTLS:
            if not client.has_capability("STARTTLS"):
                raise MailboxUnavailable(
                    f"{where} does not offer STARTTLS, and protege sends no password in clear"
                )
            client.starttls(context)
        _log_in(client, settings)
        return client
    except MailboxUnavailable:
        _close(client)
        raise
    except ssl.SSLCertVerificationError as error:
        _close(client)
        raise MailboxUnavailable(
            f"{where}: the certificate did not verify ({error.verify_message}); set ca_file "
            "if it is signed by your own authority"
        ) from None
    except imapclient.exceptions.LoginError as error:
        _close(client)
        raise MailboxUnavailable(
            f"{where} refused the login of {settings.username}: {_said(error)}"
        ) from None
    except Exception as error:  # whatever the server or the socket did: said, not raised
        _close(client)
        raise MailboxUnavailable(f"{where}: {describe(error)}") from None


def _log_in(client: Any, settings: MailboxSettings) -> None:
    import imapclient.exceptions

    if settings.oauth2_command is None:
        if settings.password is None:
            raise MailboxUnavailable(
                f"the password of {settings.username} is not set: put it in the environment "
                f"variable {settings.password_env}"
            )
        if (settings.username + settings.password).isascii():
            client.login(settings.username, settings.password)
        else:  # LOGIN takes ASCII only; AUTHENTICATE PLAIN carries UTF-8 (RFC 4616)
            client.plain_login(settings.username, settings.password)
        return
    try:
        token = oauth2.access_token(settings.oauth2_command)
    except oauth2.TokenUnavailable as error:
        raise MailboxUnavailable(str(error)) from None
    try:
        client.oauth2_login(settings.username, token)
    except imapclient.exceptions.LoginError:
        oauth2.forget(settings.oauth2_command)  # the next attempt asks for a new one
        raise


def describe(error: BaseException) -> str:
    """``error`` in one line, as an operator reads it."""
    if isinstance(error, socket.timeout | TimeoutError):
        return "the server did not answer in time"
    if isinstance(error, ConnectionRefusedError):
        return "the connection was refused (is the host and port right?)"
    if isinstance(error, socket.gaierror):
        return f"the host name could not be resolved ({error.strerror})"
    if isinstance(error, ssl.SSLError):
        return f"TLS failed: {error.reason or error}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return _said(error) or type(error).__name__


def _said(error: BaseException) -> str:
    text = str(error)
    if text.startswith("b'") or text.startswith('b"'):
        text = text[2:-1]
    return " ".join(text.split())[:300]


def _close(client: Any) -> None:
    if client is None:
        return
    with contextlib.suppress(Exception):  # already gone: nothing to close
        client.shutdown()


def log_out(client: Any) -> None:
    """Log out of ``client`` if the connection still lets us; close it either way."""
    try:
        client.logout()
    except Exception:  # a dropped connection has nothing to log out of
        _close(client)
