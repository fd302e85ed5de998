"""Verdicts others recorded: a trusted relay's Authentication-Results (RFC 8601) and a
trusted sealer's ARC chain (RFC 8617).

Anyone can write an ``Authentication-Results`` header, so one counts only when the mail
came straight from a trusted relay's address, only the topmost one carrying a trusted
authserv-id is read, and only for the mail's own From domain.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from protege.authentication.dmarc import aligned
from protege.authentication.resolver import Resolver
from protege.authentication.signatures import _dkim, _Lookups

_AUTHSERV_ID = re.compile(r"\s*(?:\([^)]*\)\s*)?([^\s;()]+)")
_INSTANCE = re.compile(r"^\s*i\s*=\s*\d+\s*;", re.IGNORECASE)


@attrs.frozen
class Relayed:
    """What a relay or sealer recorded for the From domain: ``result`` (pass, fail, none)
    by ``by`` (an authserv-id or a sealing domain), the DMARC result it recorded, and why."""

    result: str
    by: str | None
    dmarc: str | None
    reason: str


def networks(values: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``trusted_relays`` as networks (``"198.51.100.16/28"``, ``"192.0.2.7"``); ``ValueError``
    naming the one that is neither."""
    found = []
    for value in values:
        try:
            found.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"trusted_relays: {value!r} is not an address or a network (192.0.2.7, "
                "198.51.100.16/28)"
            ) from None
    return tuple(found)


def from_trusted_relay(client_ip: str | None, relays: Sequence[Any]) -> bool:
    """Whether ``client_ip`` lies in one of the trusted networks."""
    if not client_ip or not relays:
        return False
    try:
        address = ipaddress.ip_address(client_ip.strip().strip("[]").split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == net.version and address in net for net in relays)


def _parsed(value: str) -> Any:
    import authres

    try:
        return authres.AuthenticationResultsHeader.parse_value(" ".join(value.split()))
    except Exception:  # authres raises its own SyntaxError, and others on odd input
        return None


def _property(result: Any, kind: str, name: str) -> str | None:
    for prop in result.properties:
        if prop.type == kind and prop.name == name and prop.value:
            return str(prop.value).strip().lower().rstrip(".")
    return None


def _domain_of(value: str | None) -> str | None:
    if not value:
        return None
    return value.rpartition("@")[2].lower().rstrip(".") or None


def read_results(value: str, by: str, from_domain: str, strict: tuple[bool, bool]) -> Relayed:
    """What one trusted ``Authentication-Results`` value says of ``from_domain`` (ASCII):
    DMARC's pass for it, or else an aligned DKIM or SPF pass."""
    header = _parsed(value)
    if header is None:
        return Relayed("none", by, None, f"the results of {by} cannot be read")
    dmarc = None
    for result in header.results:
        method, outcome = str(result.method).lower(), str(result.result).lower()
        if method == "dmarc":
            target = _property(result, "header", "from")
            if target != from_domain:
                continue
            dmarc = outcome
            if outcome == "pass":
                return Relayed("pass", by, "pass", f"{by} recorded dmarc=pass for {from_domain}")
    for result in header.results:
        method, outcome = str(result.method).lower(), str(result.result).lower()
        if outcome != "pass":
            continue
        if method == "dkim":
            domain = _property(result, "header", "d") or _domain_of(
                _property(result, "header", "i")
            )
            if domain and aligned(domain, from_domain, strict=strict[0]):
                return Relayed("pass", by, dmarc, f"{by} recorded dkim=pass for d={domain}")
        if method == "spf":
            domain = _domain_of(_property(result, "smtp", "mailfrom"))
            if domain and aligned(domain, from_domain, strict=strict[1]):
                return Relayed("pass", by, dmarc, f"{by} recorded spf=pass for {domain}")
    return Relayed("fail", by, dmarc, f"{by} recorded no aligned pass for {from_domain}")


def topmost_trusted(
    headers: Sequence[tuple[bytes, bytes]], authserv_ids: Iterable[str]
) -> tuple[str, str] | None:
    """The topmost ``Authentication-Results`` carrying a trusted authserv-id, as (id, value)."""
    trusted = {i.strip().lower() for i in authserv_ids if i.strip()}
    for name, raw_value in headers:
        if name.lower() != b"authentication-results":
            continue
        value = raw_value.decode("utf-8", "replace")
        match = _AUTHSERV_ID.match(value)
        if match and match.group(1).lower() in trusted:
            return match.group(1).lower(), value
    return None


def topmost(headers: Sequence[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    """The topmost ``Authentication-Results`` whatever its authserv-id, as (id, value)."""
    for name, raw_value in headers:
        if name.lower() != b"authentication-results":
            continue
        value = raw_value.decode("utf-8", "replace")
        match = _AUTHSERV_ID.match(value)
        return (match.group(1).lower() if match else ""), value
    return None


def arc_verdict(
    raw: bytes, from_domain: str, sealers: Iterable[str], resolver: Resolver
) -> tuple[Relayed, bool]:
    """What a trusted sealer's ARC chain carries for ``from_domain``; and whether a DNS
    lookup timed out on the way."""
    dkim = _dkim()
    trusted = {s.strip().lower().rstrip(".") for s in sealers if s.strip()}
    lookups = _Lookups(resolver)
    try:
        chain, sets, reason = dkim.ARC(raw, minkey=1024).verify(dnsfunc=lookups)
    except dkim.DKIMException as error:
        return Relayed("fail", None, None, f"the ARC chain cannot be read: {error}"), False
    if chain == dkim.CV_None:
        return Relayed("none", None, None, "no ARC chain"), False
    newest = sets[0] if sets else {}
    sealer = (newest.get("as-domain") or b"").decode("ascii", "replace").lower()
    if chain != dkim.CV_Pass:
        why = " ".join(str(reason).split())[:200]
        return Relayed(
            "fail", sealer or None, None, f"the ARC chain fails: {why}"
        ), lookups.timed_out
    if sealer not in trusted:
        return Relayed(
            "none", sealer, None, f"the ARC chain is sealed by {sealer}, not trusted"
        ), False
    recorded = _INSTANCE.sub("", (newest.get("aar-value") or b"").decode("utf-8", "replace"), 1)
    found = read_results(recorded, sealer, from_domain, (False, False))
    if found.dmarc == "pass":
        return Relayed("pass", sealer, "pass", f"sealer {sealer} recorded dmarc=pass"), False
    return Relayed(
        "fail", sealer, found.dmarc, f"sealer {sealer} recorded no dmarc=pass for {from_domain}"
    ), False
