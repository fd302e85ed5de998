"""What went wrong with an MCP server, in protege's words: ``ServerUnavailable`` and the
one-line descriptions of what failed, which never repeat a server's own text, a header's
value or the secrets of a URL."""

from __future__ import annotations

import logging
import re
import ssl

import httpx2
import mcp_types
import pydantic
from mcp.shared.exceptions import MCPError

from protege_mcp.http import ResponseTooLarge
from protege_mcp.settings import shown_url

logger = logging.getLogger(__name__)

MAX_SHOWN_CHARS = 300


class ServerUnavailable(Exception):
    """A configured MCP server could not serve a call or a listing: it is not configured,
    could not be started or reached, ended, flooded, or is being waited for after failing.
    The message is one line written by protege (never the server's own words), safe to show
    the model and operators."""


def one_line(text: str) -> str:
    """``text`` on one line, its URLs without secrets, cut to ``MAX_SHOWN_CHARS``."""
    flat = " ".join(text.split())
    flat = re.sub(r"https?://[^\s\"'<>]+", lambda found: shown_url(found.group()), flat)
    return flat if len(flat) <= MAX_SHOWN_CHARS else flat[: MAX_SHOWN_CHARS - 1] + "…"


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside ``error``'s groups (``error`` itself when it is no group)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def ssl_reason(error: BaseException) -> str:
    """Why a TLS or connection error happened, in a few words."""
    text = str(error) or type(error).__name__
    found = re.search(r"certificate verify failed: ([^(]+)", text)
    if found:
        return found.group(1).strip()
    return one_line(text)[:120]


def describe(name: str, error: BaseException, transport: object, seconds: float) -> str:
    """What went wrong opening or using the server ``name`` (``error``, raised while
    ``transport`` was in use, within ``seconds``), in protege's words: never the server's
    own text, a header's value or a URL's secrets."""
    found = leaves(error)
    for leaf in found:
        if isinstance(leaf, ServerUnavailable):
            return str(leaf).removeprefix(f"MCP server {name}: ")
    failure = getattr(transport, "failure", None)
    if failure:
        return str(failure)
    # Before the exit status: a server stopped for being slow, or for refusing the session,
    # has one too.
    for leaf in found:
        if isinstance(leaf, TimeoutError):
            return f"it did not complete its start-up within {seconds:g} s"
        if isinstance(leaf, MCPError) and leaf.code != mcp_types.CONNECTION_CLOSED:
            return f"it refused to start a session (error {leaf.code})"
    code = getattr(transport, "returncode", None)
    if code is not None:
        _log_stderr(name, transport)
        return f"it exited at start-up (status {code}; its stderr is in the log)"
    for leaf in found:
        if isinstance(leaf, ResponseTooLarge):
            return str(leaf)
        if isinstance(leaf, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(leaf):
            return f"its TLS certificate could not be verified ({ssl_reason(leaf)})"
        if isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout):
            return f"it could not be reached ({ssl_reason(leaf)})"
        if isinstance(leaf, httpx2.TransportError):
            return f"the connection failed ({type(leaf).__name__})"
        if isinstance(leaf, OSError):
            where = f": {leaf.filename}" if leaf.filename else ""
            return f"it could not be started ({leaf.strerror or type(leaf).__name__}{where})"
        if isinstance(leaf, MCPError):
            _log_stderr(name, transport)
            return "it closed the connection at start-up (its stderr is in the log)"
        if isinstance(leaf, pydantic.ValidationError):
            return "it answered with messages that are not MCP"
    first = found[0]
    logger.warning("MCP server %s failed", name, exc_info=first)
    return f"it failed ({type(first).__name__})"


def _log_stderr(name: str, transport: object) -> None:
    """Log, as a warning, the last lines a server wrote to stderr before it ended at its
    start-up: what an operator running ``protege sync`` needs to see why (its stderr is
    otherwise logged as information only, since servers talk there while they work). Only
    the log gets them: never the record, the model or the dashboard."""
    tail = list(getattr(transport, "stderr_tail", ()) or ())[-5:]
    if tail:
        logger.warning(
            "MCP server %s ended at start-up; its last stderr lines: %s", name, " | ".join(tail)
        )
