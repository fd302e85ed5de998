"""``web_fetch``: one http(s) page as readable text, fetched only from addresses the guard
checked, every redirect checked again, within one deadline and one size cap."""

from __future__ import annotations

import asyncio
from urllib.parse import urljoin

import attrs
import httpx

from protege_web.extract import html_to_text
from protege_web.guard import BlockedURL, Resolver, Target, check
from protege_web.http import (
    FetchFailed,
    Limits,
    Web,
    decode_text,
    media_type,
    read_capped,
    text_charset,
)

REDIRECTS = {301, 302, 303, 307, 308}
HTML_TYPES = {"text/html", "application/xhtml+xml"}
ACCEPT = "text/html, application/xhtml+xml, text/*;q=0.9, application/json;q=0.9, */*;q=0.1"


@attrs.frozen(kw_only=True)
class Page:
    """What a fetch found: the final URL (after redirects), the text, and whether any of the
    body or the text was cut off."""

    url: str
    status: int
    content_type: str
    title: str
    text: str
    truncated: bool


def is_text(content_type: str) -> bool:
    """Whether a media type is passed through as text (plain text, JSON, XML)."""
    major, _, minor = content_type.partition("/")
    structured = minor in ("json", "xml") or minor.endswith(("+json", "+xml"))
    return major == "text" or (major == "application" and structured)


async def fetch(
    url: str,
    limits: Limits,
    *,
    resolver: Resolver | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Page:
    """Fetch ``url`` as ``web_fetch`` does: ``BlockedURL`` when the guard refuses it or a
    redirect, ``FetchFailed`` for anything else that went wrong, including the deadline.

    ``resolver`` and ``transport`` are for tests: a resolver the guard (and so the
    connection) uses, and an httpx transport standing in for the internet.
    """
    try:
        async with asyncio.timeout(limits.timeout):
            body = await _follow(url, limits, resolver, transport)
    except (TimeoutError, httpx.TimeoutException):
        raise FetchFailed(f"no complete answer within {limits.timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise FetchFailed(f"could not fetch {url}: {type(error).__name__}: {error}") from None
    # Outside the deadline: it bounds the network, and parsing is bounded by the size cap.
    return await asyncio.to_thread(_readable, body, limits)


@attrs.frozen
class _Body:
    url: str
    status: int
    content_type: str
    charset: str | None
    data: bytes
    cut: bool


def _readable(body: _Body, limits: Limits) -> Page:
    content_type = body.content_type or _sniffed(body.data)
    if content_type in HTML_TYPES:
        title, text = html_to_text(
            body.data,
            base_url=body.url,
            charset=text_charset(body.charset),
            max_chars=limits.max_chars,
        )
    else:
        title, text = "", decode_text(body.data, body.charset)
    cut = body.cut
    if len(text) > limits.max_chars:
        text, cut = text[: limits.max_chars], True
    return Page(
        url=body.url,
        status=body.status,
        content_type=content_type,
        title=title,
        text=text,
        truncated=cut,
    )


async def _follow(
    url: str,
    limits: Limits,
    resolver: Resolver | None,
    transport: httpx.AsyncBaseTransport | None,
) -> _Body:
    current, previous = url, None
    for _hop in range(limits.max_redirects + 1):
        try:
            target = await asyncio.to_thread(
                check, current, resolver=resolver, allow_networks=limits.allow_networks
            )
        except BlockedURL as error:
            if previous is None:
                raise
            raise BlockedURL(current, f"{error.reason} (redirected from {previous})") from None
        async with Web(limits, transport) as web:
            response = await _connect(web, target)
            try:
                if response.status_code not in REDIRECTS:
                    return await _page(response, target, limits)
                location = response.headers.get("location", "")
            finally:
                await response.aclose()
        if not location:
            raise FetchFailed(f"{target.url} redirected ({response.status_code}) nowhere")
        previous, current = target.url, urljoin(target.url, location)
    raise FetchFailed(f"more than {limits.max_redirects} redirects, the last to {current}")


async def _connect(web: Web, target: Target) -> httpx.Response:
    """Send the request to one of the checked addresses, keeping the name in the ``Host``
    header and the TLS server name: the connection never resolves the name again."""
    error: httpx.ConnectError | None = None
    for address in target.addresses:
        url = httpx.URL(
            scheme=target.scheme,
            host=str(address),
            port=target.port,
            raw_path=target.target.encode("ascii"),
        )
        try:
            return await web.get(
                url,
                {"Host": target.host_header, "Accept": ACCEPT},
                server_name=target.host if target.scheme == "https" else None,
            )
        except httpx.ConnectError as failed:
            error = failed
    assert error is not None  # the guard gives at least one address
    raise error


async def _page(response: httpx.Response, target: Target, limits: Limits) -> _Body:
    status = response.status_code
    if status >= 400:
        raise FetchFailed(f"{target.url} answered HTTP {status} {response.reason_phrase}")
    if not 200 <= status < 300:
        raise FetchFailed(f"{target.url} answered HTTP {status}, which web_fetch cannot use")
    content_type, charset = media_type(response)
    if content_type and content_type not in HTML_TYPES and not is_text(content_type):
        raise FetchFailed(
            f"{target.url} is {content_type}; web_fetch reads only HTML, text and JSON"
        )
    data, cut = await read_capped(response, limits.max_bytes)
    return _Body(target.url, status, content_type, charset, data, cut)


def _sniffed(body: bytes) -> str:
    """A type for a body the server did not label: HTML, text, or refused as binary."""
    start = body[:1024].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "text/html"
    if b"\x00" in body[:8192]:
        raise FetchFailed("the server did not say what type the body is, and it is not text")
    return "text/plain"
