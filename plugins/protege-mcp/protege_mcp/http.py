"""The streamable HTTP transport: the SDK's ``streamable_http_client`` over an
``httpx2.AsyncClient`` built here, so that the headers come from the configured variables,
TLS is always verified (against the system's authorities or the configured CA file alone),
and no response body may pass a byte cap (a flooding server cannot fill memory).

Header values, and a URL's user, password and query, never appear in errors or logs: the
SDK's and httpx2's loggers are given a filter that shows URLs without them.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from types import TracebackType

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client

from protege_mcp.settings import shown_url

# Room for the JSON-RPC envelope (and SSE framing) around a result of the largest size.
ENVELOPE_BYTES = 64 * 1024
CONNECT_SECONDS = 10.0
# The loggers that may write a request's URL.
URL_LOGGERS = ("httpx2", "httpcore2", "mcp.client.streamable_http", "mcp.shared._httpx_utils")
_URL = re.compile(r"https?://[^\s\"'<>]+")


class ResponseTooLarge(httpx2.StreamError):
    """A response body passed the transport's byte cap (the server is flooding)."""


class _RedactedUrls(logging.Filter):
    """Shows every URL of a log record without its user, password or query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            try:
                record.msg = record.getMessage()
            except Exception:
                return True
            record.args = None
        if isinstance(record.msg, str) and "://" in record.msg:
            record.msg = _URL.sub(lambda found: shown_url(found.group()), record.msg)
        return True


def redact_logged_urls() -> None:
    """Give the loggers that write request URLs the filter that hides their secrets (once;
    a filter is stateless, so every ``Connections`` of the process may rely on it)."""
    for name in URL_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(item, _RedactedUrls) for item in target.filters):
            target.addFilter(_RedactedUrls())


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int) -> None:
        self.inner = inner
        self.max_bytes = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        count = 0
        async for chunk in self.inner:
            count += len(chunk)
            if count > self.max_bytes:
                raise ResponseTooLarge(f"the server's answer was over {self.max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that fails a response whose body passes ``max_bytes`` (counted
    as it arrives, so no more than that is ever held), and one that is compressed (whose
    size would say nothing of what it becomes). A long-lived GET (the server's stream of
    notifications) is not counted in all; each of its events is capped by the SDK."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self.inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through the wrapped transport; its response, its body capped."""
        response = await self.inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            raise ResponseTooLarge(f"the server sent a compressed answer ({encoding[:20]})")
        if request.method == "GET":
            return response
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedStream(stream, self.max_bytes),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.inner.aclose()


def ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """A TLS context verifying certificates and host names: against ``ca_file`` alone
    when given (an ``OSError`` or ``ssl.SSLError`` when it cannot be read), else against
    the system's authorities."""
    if ca_file is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=ca_file)


class HttpTransport:
    """An MCP transport (an async context manager yielding the session's read and write
    streams) to the streamable HTTP server at ``url``.

    Every request carries ``headers`` (their values read from the environment by the
    caller); TLS is verified against ``ca_file`` alone when given; no response body may
    pass ``max_response_bytes``; proxies and CA settings of the environment are not
    used. ``timeout`` bounds connecting, writing and waiting for each read. A ``ca_file``
    that cannot be read fails here (``OSError`` or ``ssl.SSLError``), before any request.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        ca_file: str | None = None,
        max_response_bytes: int,
        timeout: float = 30.0,
        name: str = "",
    ) -> None:
        self.url = url
        self.headers = dict(headers)
        self.ca_file = ca_file
        self.max_response_bytes = max_response_bytes
        self.timeout = timeout
        self.name = name or shown_url(url)
        self.ssl_context = ssl_context(ca_file)
        self._stack: AsyncExitStack | None = None

    def __repr__(self) -> str:
        return f"HttpTransport({shown_url(self.url)!r})"

    def client(self) -> httpx2.AsyncClient:
        """The HTTP client the SDK's transport talks through."""
        inner = httpx2.AsyncHTTPTransport(verify=self.ssl_context, trust_env=False)
        return httpx2.AsyncClient(
            headers={**self.headers, "Accept-Encoding": "identity"},
            timeout=httpx2.Timeout(min(self.timeout, CONNECT_SECONDS), read=max(self.timeout, 1.0)),
            follow_redirects=False,
            trust_env=False,
            transport=CappedTransport(inner, self.max_response_bytes),
        )

    async def __aenter__(self) -> TransportStreams:
        redact_logged_urls()
        stack = AsyncExitStack()
        try:
            client = await stack.enter_async_context(self.client())
            streams = await stack.enter_async_context(
                streamable_http_client(
                    self.url,
                    http_client=client,
                    max_sse_event_size=self.max_response_bytes,
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return streams

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        return await stack.__aexit__(exc_type, exc, traceback)
