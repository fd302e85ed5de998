"""OAuth2 access tokens for XOAUTH2 logins (IMAP and submission), from a configured command.

protege does not run an OAuth2 flow of its own: the operator names a command that prints a
current access token (``gcloud auth print-access-token``, ``oama access you@gmail.com``, a
script of theirs around MSAL), and protege runs it, without a shell, when a login needs a
token. A token is reused for a few minutes, and asked for again at once after a login
refused it. Neither the token nor what the command printed on failure reaches a log.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time

from protege.errors import ProtegeError

# Providers' tokens live an hour; reusing one for five minutes spares a command per mail
# and still leaves a revoked grant noticed soon.
REUSE_SECONDS = 300.0
COMMAND_SECONDS = 30.0
MAX_TOKEN_CHARS = 16_384


class TokenUnavailable(ProtegeError):
    """The token command failed, timed out or printed no token."""


_cache: dict[str, tuple[float, str]] = {}
_lock = threading.Lock()


def access_token(command: str, *, fresh: bool = False) -> str:
    """A current access token printed by ``command`` (reused for ``REUSE_SECONDS`` unless
    ``fresh``); ``TokenUnavailable`` saying why there is none."""
    now = time.monotonic()
    with _lock:
        cached = _cache.get(command)
        if cached is not None and not fresh and now - cached[0] < REUSE_SECONDS:
            return cached[1]
    token = _run(command)
    with _lock:
        _cache[command] = (now, token)
    return token


def forget(command: str) -> None:
    """Drop the token kept for ``command`` (a login refused it)."""
    with _lock:
        _cache.pop(command, None)


def xoauth2(user: str, token: str) -> str:
    """The XOAUTH2 initial response for ``user`` with ``token`` (Google's and Microsoft's
    format), before base64."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01"


def _run(command: str) -> str:
    words = shlex.split(command)
    program = words[0] if words else command
    try:
        done = subprocess.run(
            words,
            capture_output=True,
            timeout=COMMAND_SECONDS,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise TokenUnavailable(
            f"oauth2_command: {program} is not a program found on PATH"
        ) from None
    except PermissionError:
        raise TokenUnavailable(
            f"oauth2_command: {program} may not be run (permission denied)"
        ) from None
    except subprocess.TimeoutExpired:
        raise TokenUnavailable(
            f"oauth2_command: {program} printed no token within {COMMAND_SECONDS:.0f} s"
        ) from None
    except OSError as error:
        raise TokenUnavailable(
            f"oauth2_command: {program} could not be run: {error.strerror}"
        ) from None
    if done.returncode != 0:
        # Its error output may carry a secret (a refresh token in a URL): only its size.
        raise TokenUnavailable(
            f"oauth2_command: {program} failed (exit status {done.returncode}, "
            f"{len(done.stderr)} bytes on stderr, not shown)"
        )
    token = done.stdout.decode("utf-8", "replace").strip()
    if not token or len(token) > MAX_TOKEN_CHARS or any(c.isspace() for c in token):
        raise TokenUnavailable(
            f"oauth2_command: {program} did not print one access token (one line, no spaces)"
        )
    return token
