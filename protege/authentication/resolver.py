"""DNS for sender authentication: pinned records first, then dnspython, with a TTL-bounded cache.

A resolver is any callable ``resolver(name, rdtype) -> list[str]``: for TXT each record's
strings joined, for A/AAAA the address, for MX ``"preference host"``, for PTR the host; an
empty list for NXDOMAIN or no data. It raises ``TimeoutError`` for a temporary failure
(a timeout, no server answering, SERVFAIL), which authenticates nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Resolver = Callable[[str, str], list[str]]

DEFAULT_TIMEOUT = 5.0  # seconds for one lookup, retries included
CACHE_ENTRIES = 10_000  # answers kept, each only for its TTL
# What one mail may cost in DNS, all methods together: a sender whose name servers answer
# slowly (or a mail made to ask a great deal) holds a gateway thread this long at most,
# then its verdict is a temporary error.
MAIL_SECONDS = 10.0
MAIL_LOOKUPS = 40


def pinned_records(value: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Pinned TXT records as ``[mail.authentication.dns]`` holds them (a name to a string or
    a list of strings), keyed by the name in lowercase without a final dot; ``ValueError``
    saying what is wrong."""
    pinned: dict[str, tuple[str, ...]] = {}
    for name, records in value.items():
        if not isinstance(name, str) or not name.strip(".").strip():
            raise ValueError(f"dns: {name!r} is not a DNS name")
        if isinstance(records, str):
            records = [records]
        if not isinstance(records, list | tuple) or not all(isinstance(r, str) for r in records):
            raise ValueError(f"dns: {name} must be a TXT record (a string) or a list of them")
        pinned[_key(name)] = tuple(records)
    return pinned


def _key(name: str) -> str:
    return name.strip().rstrip(".").lower()


class DnsResolver:
    """Answers lookups from pinned TXT records, then from DNS (unless ``offline``).

    Pinned records stand for the whole TXT answer of their name: an internal domain, the
    test suite and the demo authenticate mail without the internet. Other answers come from
    the system's DNS servers through dnspython, cached for their TTL; an ``offline``
    resolver answers only what is pinned and finds nothing else.
    """

    def __init__(
        self,
        pinned: Mapping[str, str | Sequence[str]] | None = None,
        *,
        offline: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.pinned = pinned_records(pinned or {})
        self.offline = offline
        self.timeout = timeout
        self._resolver: Any = None
        self._lock = threading.Lock()

    def __call__(self, name: str, rdtype: str) -> list[str]:
        key = _key(name)
        rdtype = rdtype.upper()
        if rdtype == "TXT" and key in self.pinned:
            return list(self.pinned[key])
        if self.offline or not key:
            return []
        return self._lookup(key, rdtype)

    def _dns(self) -> Any:
        with self._lock:
            if self._resolver is None:
                import dns.resolver  # loaded by the first lookup that needs the network

                resolver = dns.resolver.Resolver(configure=True)
                resolver.cache = dns.resolver.LRUCache(CACHE_ENTRIES)
                resolver.lifetime = self.timeout
                self._resolver = resolver
            return self._resolver

    def _lookup(self, name: str, rdtype: str) -> list[str]:
        import dns.exception
        import dns.name
        import dns.resolver

        resolver = self._dns()
        try:
            answer = resolver.resolve(name, rdtype, search=False, lifetime=self.timeout)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except (dns.name.NameTooLong, dns.name.LabelTooLong, dns.name.EmptyLabel):
            return []  # no such name can exist
        except dns.exception.DNSException as error:  # timeouts, SERVFAIL, no servers
            raise TimeoutError(f"DNS lookup of {name} {rdtype} failed: {error}") from None
        return [_text(rdata, rdtype) for rdata in answer]


def _text(rdata: Any, rdtype: str) -> str:
    if rdtype in ("TXT", "SPF"):
        return b"".join(rdata.strings).decode("utf-8", "replace")
    if rdtype in ("A", "AAAA"):
        return str(rdata.address)
    if rdtype == "MX":
        return f"{rdata.preference} {rdata.exchange.to_text(omit_final_dot=True)}"
    return str(rdata.to_text()).rstrip(".")


class Budget:
    """A resolver for one mail: ``resolver``, until ``seconds`` have passed or ``lookups``
    were asked; after that every lookup is a temporary failure (``TimeoutError``)."""

    def __init__(
        self,
        resolver: Resolver,
        seconds: float = MAIL_SECONDS,
        lookups: int = MAIL_LOOKUPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resolver = resolver
        self.clock = clock
        self.deadline = clock() + seconds
        self.left = lookups

    def __call__(self, name: str, rdtype: str) -> list[str]:
        if self.left <= 0:
            raise TimeoutError("this mail asked for more DNS lookups than one mail may")
        if self.clock() >= self.deadline:
            raise TimeoutError("the DNS time one mail may take ran out")
        self.left -= 1
        return self.resolver(name, rdtype)
