"""What both web tools share: their limits, an HTTP client that ignores the environment,
and reading a body (compressed or not) without ever holding more of it than the cap."""

from __future__ import annotations

import codecs
import zlib
from email.message import Message
from typing import TYPE_CHECKING

import attrs
import httpx

from protege import ProtegeError
from protege_web.settings import settings_of

if TYPE_CHECKING:
    from protege import RunContext

USER_AGENT = "protege-web/0.1 (an AI colleague's web tool)"
# Only what the bounded decoder below can undo; httpx would add br and zstd when installed.
ACCEPT_ENCODING = "gzip, deflate"
CHUNK_ALLOWANCE = 64 * 1024


class FetchFailed(ProtegeError):
    """The web answered in a way the tool cannot use; the message says how."""


@attrs.frozen(kw_only=True)
class Limits:
    """The limits of one fetch or search, from ``[plugins.protege-web]`` in ``protege.toml``."""

    timeout: float = 15.0
    max_bytes: int = 2 * 1024 * 1024
    max_chars: int = 20_000
    max_redirects: int = 5
    allow_networks: tuple[str, ...] = ()
    search_url: str = "https://html.duckduckgo.com/html/"

    @classmethod
    def of(cls, context: RunContext) -> Limits:
        """The limits the run's configuration sets."""
        web = settings_of(context)
        return cls(
            timeout=web.timeout_seconds,
            max_bytes=web.max_bytes,
            max_chars=web.max_chars,
            max_redirects=web.max_redirects,
            allow_networks=tuple(web.allow_networks),
            search_url=web.search_url,
        )


class Web:
    """Sends single GET requests straight to an httpx transport: no client in between, so
    nothing is read from the environment (no proxy variables: a proxy would resolve names
    behind the guard's back; no netrc), no cookie is kept from one request to the next, and
    no redirect is followed or even parsed. ``transport`` stands in for the internet in
    tests; by default it is a plain connection pool."""

    def __init__(self, limits: Limits, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.timeout = httpx.Timeout(limits.timeout).as_dict()
        self.owned = transport is None
        self.transport = transport or httpx.AsyncHTTPTransport(trust_env=False, retries=0)

    async def __aenter__(self) -> Web:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.owned:
            await self.transport.aclose()

    async def get(
        self,
        url: httpx.URL | str,
        headers: dict[str, str],
        *,
        params: dict[str, str] | None = None,
        server_name: str | None = None,
    ) -> httpx.Response:
        """Send one GET; the response's body is left to stream. ``server_name`` is the TLS
        server name (SNI, and the name the certificate must match) when ``url`` holds an
        address rather than the name."""
        extensions: dict[str, object] = {"timeout": self.timeout}
        if server_name is not None:
            extensions["sni_hostname"] = server_name
        request = httpx.Request(
            "GET",
            url,
            params=params,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING, **headers},
            extensions=extensions,
        )
        response = await self.transport.handle_async_request(request)
        response.request = request
        return response


def media_type(response: httpx.Response) -> tuple[str, str | None]:
    """The response's media type (lowercase, ``""`` when absent) and declared charset."""
    header = response.headers.get("content-type", "")
    if not header:
        return "", None
    message = Message()
    message["content-type"] = header
    charset = message.get_param("charset")
    return message.get_content_type(), charset if isinstance(charset, str) else None


# Codecs a page may name that are not character sets, or decode in more than linear time
# (punycode), or are not for text at all (base64, zlib, rot13): UTF-8 is used instead.
_NOT_CHARSETS = {"punycode", "idna", "raw-unicode-escape", "unicode-escape", "utf-7", "mbcs"}


def text_charset(charset: str | None) -> str | None:
    """``charset`` as a codec name, if it is a character set to decode a page with."""
    if not charset:
        return None
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError):
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_CHARSETS:
        return None
    return info.name


def decode_text(body: bytes, charset: str | None) -> str:
    """Text from ``body`` in ``charset`` when it is a character set (see ``text_charset``),
    else UTF-8; bytes that do not decode (a character cut at the cap, say) become U+FFFD."""
    return body.decode(text_charset(charset) or "utf-8", errors="replace")


async def read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the decoded body, and whether there was more.

    The body is read as it arrives and decompressed here, never more than the room left, so
    a gzip bomb expands no further than the cap in memory; the compressed bytes read are
    capped too, so a stream that never produces output still ends.
    """
    decoder = _Decoder(response.headers.get("content-encoding", ""))
    kept = bytearray()
    raw_seen = 0
    async for chunk in response.aiter_raw():
        raw_seen += len(chunk)
        room = limit - len(kept)
        piece = decoder.feed(chunk, room + 1)
        if len(piece) > room:
            kept += piece[:room]
            return bytes(kept), True
        kept += piece
        if raw_seen > 2 * limit + CHUNK_ALLOWANCE:
            return bytes(kept), True
    return bytes(kept), False


class _Decoder:
    """Undoes one content coding (gzip, deflate or none), a bounded amount at a time. A gzip
    body may be several members one after the other (RFC 1952): each is decoded in turn."""

    def __init__(self, header: str) -> None:
        coding = header.strip().lower()
        if coding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise FetchFailed(f"the server sent the body in an unsupported coding ({header!r})")
        self.coding = coding
        self._inflater: zlib._Decompress | None = None
        self._between_members = False
        if coding in ("gzip", "x-gzip"):
            self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes, at_most: int) -> bytes:
        """The decoded bytes ``data`` gives, no more than ``at_most`` of them."""
        if self.coding in ("", "identity"):
            return data[:at_most]
        if self._inflater is None:  # deflate: zlib-wrapped as the RFC says, or raw as some send
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        decoded = bytearray()
        while len(decoded) < at_most:
            if self._inflater.eof:
                if self.coding == "deflate":
                    break  # a deflate stream is one; what follows its end is not part of it
                data = self._inflater.unused_data + data
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._between_members = True
            if self._between_members:
                # Zero bytes some servers pad the last member with, as Python's gzip allows.
                data = data.lstrip(b"\x00")
                if not data:
                    break
                self._between_members = False
            if not data:
                break
            try:
                decoded += self._inflater.decompress(data, at_most - len(decoded))
            except zlib.error as error:
                raise FetchFailed(f"the {self.coding} body is corrupt ({error})") from None
            data = self._inflater.unconsumed_tail
            if not data and not self._inflater.eof:
                break
        return bytes(decoded)
