"""DMARC (RFC 7489): organizational domains, identifier alignment, and the domain's record."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from protege.authentication.resolver import Resolver

NONE, QUARANTINE, REJECT = "none", "quarantine", "reject"
POLICIES = (NONE, QUARANTINE, REJECT)


@functools.cache
def _suffixes() -> Any:
    # The list ships inside the package (ICANN and private sections): no download at run time.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


@functools.lru_cache(maxsize=4096)  # pure, and asked for the same domains mail after mail
def organizational_domain(domain: str) -> str:
    """The registrable domain ``domain`` belongs to (``mail.thescoop.com`` → ``thescoop.com``,
    ``mara.github.io`` → ``mara.github.io``), by the Public Suffix List with its private
    section; a public suffix itself stands for itself."""
    domain = domain.lower().rstrip(".")
    return _suffixes().privatesuffix(domain) or domain


def aligned(identifier: str, from_domain: str, *, strict: bool) -> bool:
    """Whether an authenticated domain (a DKIM ``d=``, the SPF domain) is aligned with the
    From domain: the same domain (strict), or the same organizational domain (relaxed)."""
    identifier, from_domain = identifier.lower().rstrip("."), from_domain.lower().rstrip(".")
    if strict:
        return identifier == from_domain
    return organizational_domain(identifier) == organizational_domain(from_domain)


@attrs.frozen
class Record:
    """A domain's DMARC record as it applies to one From domain, or why there is none.

    ``status`` is ``found``, ``none`` (no record), ``temperror`` (DNS failed for now) or
    ``permerror`` (a record that cannot be read). ``policy`` is ``p=``, or ``sp=`` when the
    record was found at the organizational domain of a subdomain.
    """

    status: str
    policy: str | None = None
    strict_dkim: bool = False
    strict_spf: bool = False
    at: str | None = None
    reason: str = ""


def lookup(from_domain: str, resolver: Resolver) -> Record:
    """The DMARC record governing ``from_domain`` (an ASCII domain): its own, else its
    organizational domain's (RFC 7489 §6.6.3)."""
    organizational = organizational_domain(from_domain)
    for name in dict.fromkeys((from_domain, organizational)):
        try:
            texts = resolver(f"_dmarc.{name}", "TXT")
        except TimeoutError as error:
            return Record("temperror", at=name, reason=str(error))
        records = [t for t in texts if t.strip()[:8].lower() == "v=dmarc1"]
        if len(records) > 1:
            return Record("none", at=name, reason=f"_dmarc.{name} has several DMARC records")
        if records:
            return _read(records[0], name, subdomain=name != from_domain)
    return Record("none", reason=f"no DMARC record for {from_domain}")


def _read(text: str, name: str, *, subdomain: bool) -> Record:
    tags: dict[str, str] = {}
    for part in text.split(";"):
        key, equals, value = part.partition("=")
        if equals:
            tags.setdefault(key.strip().lower(), value.strip())
    if tags.get("v") != "DMARC1":
        return Record("permerror", at=name, reason=f"_dmarc.{name}: v= is not DMARC1")
    policy = tags.get("p", "").lower()
    if subdomain and tags.get("sp", "").lower() in POLICIES:
        policy = tags["sp"].lower()
    if policy not in POLICIES:
        return Record("permerror", at=name, reason=f"_dmarc.{name}: no valid p= policy")
    return Record(
        "found",
        policy=policy,
        strict_dkim=tags.get("adkim", "r").lower() == "s",
        strict_spf=tags.get("aspf", "r").lower() == "s",
        at=name,
        reason=f"_dmarc.{name}: p={policy}",
    )
