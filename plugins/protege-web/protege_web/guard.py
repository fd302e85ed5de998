"""The SSRF guard: which addresses, if any, a URL from outside may be fetched from.

A URL reaches ``web_fetch`` from the model, which may have read it in a stranger's mail or
page. The guard parses it once, strictly, resolves its host with the resolver the connection
will use, and checks every address against its own tables of ranges that are not the public
internet (``ipaddress``'s flags are not enough: on Python 3.11 ``is_global`` is True for
several of them). The fetch then connects to a checked address and nowhere else.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import quote

import attrs
import idna

from protege import ProtegeError
from protege_web.tools import MAX_URL_LENGTH

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str], Iterable[str]]
"""Takes a host name, returns the IP addresses (as text) it resolves to."""

SCHEMES = {"http": 80, "https": 443}

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# (range, what it is): every IPv4 range that is not the public internet.
BLOCKED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified ('this network')"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "shared address space (carrier-grade NAT)"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local (cloud metadata lives here)"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved for IETF protocol assignments"),
    (_V4("192.0.2.0/24"), "reserved for documentation"),
    (_V4("192.88.99.0/24"), "reserved (former 6to4 relay anycast)"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "reserved for benchmarking"),
    (_V4("198.51.100.0/24"), "reserved for documentation"),
    (_V4("203.0.113.0/24"), "reserved for documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved (and broadcast)"),
)

# IPv6 ranges holding an IPv4 address, which is checked in turn: (range, name, where the
# 32 bits sit, counted from the right of the 128).
EMBEDDING_V6: tuple[tuple[ipaddress.IPv6Network, str, int], ...] = (
    (_V6("::ffff:0:0/96"), "IPv4-mapped", 0),
    (_V6("::/96"), "IPv4-compatible", 0),
    (_V6("64:ff9b::/96"), "NAT64", 0),
    (_V6("2002::/16"), "6to4", 80),
)

# Only 2000::/3 is global unicast; inside it, these are not the public internet either.
GLOBAL_UNICAST_V6 = _V6("2000::/3")
BLOCKED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("2001::/32"), "Teredo (a tunnel to an address the guard cannot see)"),
    (_V6("2001::/23"), "reserved for IETF protocol assignments"),
    (_V6("2001:db8::/32"), "reserved for documentation"),
    (_V6("3fff::/20"), "reserved for documentation"),
)
OUTSIDE_GLOBAL_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("64:ff9b:1::/48"), "local-use NAT64"),
    (_V6("100::/64"), "discard-only"),
    (_V6("fc00::/7"), "unique-local"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),
    (_V6("ff00::/8"), "multicast"),
)

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


class BlockedURL(ProtegeError):
    """A URL the guard will not let anything fetch; the message says why."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"refused {_shown(url)}: {reason}")
        self.url = url
        self.reason = reason


@attrs.frozen
class Target:
    """A URL as the guard parsed and checked it: what to connect to, and what to say there.

    ``host`` is the name for the ``Host`` header and TLS (ASCII, IDNA-encoded); ``addresses``
    are those the connection may use, every one checked; ``target`` is the request target
    (path and query, percent-encoded); ``url`` the URL rebuilt from these parts.
    """

    scheme: str
    host: str
    port: int
    target: str
    addresses: tuple[IPAddress, ...]

    @property
    def url(self) -> str:
        """The URL rebuilt from its checked parts (the default port left out)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == SCHEMES[self.scheme] else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.target}"

    @property
    def host_header(self) -> str:
        """The ``Host`` header for a request to this URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"


def check_url(
    url: str, *, resolver: Resolver | None = None, allow_networks: Iterable[str] = ()
) -> list[IPAddress]:
    """The IP addresses ``url`` may be fetched from, or ``BlockedURL`` saying why none.

    ``resolver`` (the system's by default) must be the one the connection would use;
    ``allow_networks`` (CIDR ranges, from ``[plugins.protege-web] allow_networks``) are let
    through although private or reserved.
    """
    return list(check(url, resolver=resolver, allow_networks=allow_networks).addresses)


def check(
    url: str, *, resolver: Resolver | None = None, allow_networks: Iterable[str] = ()
) -> Target:
    """``check_url``'s work, giving the whole ``Target`` a fetch connects to."""
    scheme, host, port, target, literal = _parse(url)
    allowed = [ipaddress.ip_network(n) for n in allow_networks]
    if literal is not None:
        answers: Sequence[IPAddress] = [literal]
    else:
        answers = _resolve(url, host, resolver or system_resolver)
    for address in answers:
        if not any(address in network for network in allowed if network.version == address.version):
            reason = blocked_reason(address)
            if reason is not None:
                named = f"{address}" if literal is not None else f"{host} is {address}, which"
                raise BlockedURL(url, f"{named} is {reason}")
    return Target(scheme, host, port, target, tuple(answers))


def blocked_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not on the public internet (so not to be fetched), or None."""
    if isinstance(address, ipaddress.IPv4Address):
        for v4, name in BLOCKED_V4:
            if address in v4:
                return f"{name} ({v4})"
        return None
    for network, name in OUTSIDE_GLOBAL_V6[:2]:  # :: and ::1 before "IPv4-compatible"
        if address in network:
            return f"{name} ({network})"
    for embedding, name, shift in EMBEDDING_V6:
        if address in embedding:
            inner = ipaddress.IPv4Address((int(address) >> shift) & 0xFFFFFFFF)
            reason = blocked_reason(inner)
            return None if reason is None else f"{name} for {inner}, {reason}"
    if address not in GLOBAL_UNICAST_V6:
        for network, name in OUTSIDE_GLOBAL_V6:
            if address in network:
                return f"{name} ({network})"
        return "reserved (outside global unicast 2000::/3)"
    for network, name in BLOCKED_V6:
        if address in network:
            return f"{name} ({network})"
    return None


def system_resolver(host: str) -> list[str]:
    """The operating system's answers for ``host`` (``getaddrinfo``)."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _resolve(url: str, host: str, resolver: Resolver) -> list[IPAddress]:
    try:
        raw = list(resolver(host))
    except (OSError, UnicodeError) as error:
        raise BlockedURL(url, f"{host} does not resolve ({error})") from None
    if not raw:
        raise BlockedURL(url, f"{host} does not resolve")
    answers: list[IPAddress] = []
    for text in raw:
        try:
            if "%" in str(text):
                raise ValueError(text)
            address = ipaddress.ip_address(str(text))
        except ValueError:
            raise BlockedURL(url, f"{host} resolves to {text!r}, not an IP address") from None
        if address not in answers:
            answers.append(address)
    return answers


def _parse(url: str) -> tuple[str, str, int, str, IPAddress | None]:
    """Scheme, host, port, request target, and the address when the host is a literal."""
    if not isinstance(url, str) or not url:
        raise BlockedURL(str(url), "not a URL")
    if len(url) > MAX_URL_LENGTH:
        raise BlockedURL(url, f"longer than {MAX_URL_LENGTH} characters")
    for character in url:
        if character.isspace() or unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp"):
            raise BlockedURL(url, f"it holds whitespace or a control character ({character!r})")
    if "\\" in url:
        raise BlockedURL(url, "it holds a backslash")
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if scheme not in SCHEMES:
        raise BlockedURL(url, "only http and https URLs are fetched")
    rest = url[match.end() :] if match else ""
    if not rest.startswith("//"):
        raise BlockedURL(url, f"expected {scheme}:// followed by a host")
    rest = rest[2:]
    end = min([i for i in (rest.find(c) for c in "/?#") if i >= 0], default=len(rest))
    authority, rest = rest[:end], rest[end:]
    if "@" in authority:
        raise BlockedURL(url, "user names and passwords in URLs are refused")
    host_text, port = _split_port(url, authority, SCHEMES[scheme])
    host, literal = _host(url, host_text)
    target = rest.split("#", 1)[0]
    if not target.startswith("/"):
        target = "/" + target
    return scheme, host, port, quote(target, safe="!#$%&'()*+,/:;=?@[]~-._"), literal


def _split_port(url: str, authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise BlockedURL(url, "an unclosed [ in the host")
        host, after = authority[: close + 1], authority[close + 1 :]
        if after and not after.startswith(":"):
            raise BlockedURL(url, "unexpected text after the bracketed address")
        port_text = after[1:] if after else None
    elif authority.count(":") > 1:
        raise BlockedURL(url, "an IPv6 address must be in brackets")
    else:
        host, _, port_text = authority.partition(":")
        port_text = port_text if ":" in authority else None
    if port_text is None:
        return host, default
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise BlockedURL(url, f"bad port {port_text!r}")
    return host, int(port_text)


def _host(url: str, text: str) -> tuple[str, IPAddress | None]:
    """The host as sent (ASCII), and its address when it is an IP literal in any spelling."""
    if not text:
        raise BlockedURL(url, "no host")
    if text.startswith("["):
        inner = text[1:-1]
        if "%" in inner:
            raise BlockedURL(url, "IPv6 zone ids are refused")
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise BlockedURL(url, f"{text} is not an IPv6 address") from None
        return str(v6), v6
    if "%" in text:
        raise BlockedURL(url, "percent-escapes in the host are refused")
    try:
        ascii_host = text.lower() if text.isascii() else idna.encode(text, uts46=True).decode()
    except UnicodeError as error:  # idna.IDNAError among them
        raise BlockedURL(url, f"the host is not a valid international name ({error})") from None
    name = ascii_host[:-1] if ascii_host.endswith(".") else ascii_host
    labels = name.split(".")
    if _NUMBER.fullmatch(labels[-1]):  # a number last: the host is an IPv4 address, or nothing
        v4 = _ipv4(labels)
        if v4 is None:
            raise BlockedURL(url, f"{text} is not a valid IPv4 address")
        return str(v4), v4
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise BlockedURL(url, f"{text} is not a valid host name")
    return ascii_host, None


def _ipv4(parts: list[str]) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any spelling resolvers accept: 1 to 4 parts, each decimal, octal
    (leading 0) or hex (0x), the last filling the remaining bytes."""
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        if not _NUMBER.fullmatch(part):
            return None
        if part[:2].lower() == "0x":
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                return None
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part, 10))
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _shown(url: str) -> str:
    return repr(url if len(url) <= 200 else url[:200] + "…")
