"""Sender authentication: whether a mail proves it came from its From domain.

``authenticate`` gives one ``Verdict`` per mail, computed once at ingest and stored with
the message. The From domain is proven by a DKIM signature or an SPF pass aligned with it
as DMARC defines alignment, by a trusted relay's ``Authentication-Results``, or by a trusted
ARC sealer. Allow rules (gates, access rules, approvers) admit only an authenticated sender;
deny rules match whatever the From says.

Libraries: dkimpy (DKIM and ARC, the reference implementation used by dkimpy-milter and
GNU Mailman's authheaders), pyspf (SPF, RFC 7208, with its lookup limits),
publicsuffixlist (the Public Suffix List, shipped inside the package, private section
included), authres (RFC 8601 parsing), dnspython (DNS, with a TTL-bounded cache).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from protege.addresses import InvalidAddress, normalize_domain, parse_mailbox, routing_key
from protege.authentication import dmarc as dmarc_
from protege.authentication.relayed import (
    arc_verdict,
    from_trusted_relay,
    networks,
    read_results,
    topmost,
    topmost_trusted,
)
from protege.authentication.resolver import Budget, DnsResolver, Resolver, pinned_records
from protege.authentication.signatures import check_signatures, reader
from protege.authentication.spf_check import check_spf

__all__ = [
    "MODES",
    "DnsResolver",
    "MethodResult",
    "Resolver",
    "Sender",
    "Verdict",
    "authenticate",
    "pinned_records",
    "sender_of",
    "unverified",
]

ENFORCE, REPORT, OFF = "enforce", "report", "off"
MODES = (ENFORCE, REPORT, OFF)
DKIM, SPF, ARC, RELAY, OPERATOR, NONE = "dkim", "spf", "arc", "relay", "operator", "none"
REFUSING_POLICIES = (dmarc_.QUARANTINE, dmarc_.REJECT)


@attrs.frozen
class MethodResult:
    """One method's own result: ``method`` (dkim, spf, arc, relay), ``result`` (pass, fail,
    none, softfail, neutral, temperror, permerror), the ``domain`` it speaks for (a DKIM
    ``d=``, the SPF domain, a sealer, a relay's authserv-id), whether that domain is
    ``aligned`` with the From domain, and why."""

    method: str
    result: str
    domain: str | None
    aligned: bool
    reason: str


@attrs.frozen
class Verdict:
    """Whether a mail proves its sender, and how.

    ``authenticated`` is true when the From domain is proven; ``domain`` is then the From
    header's domain (as written, lowercased), else None. ``method`` says what proved it
    (``dkim``, ``spf``, ``arc``, ``relay``, ``operator`` for a trial an operator started,
    or ``none``). ``dmarc`` is DMARC's result (pass, fail, none, temperror, permerror) and
    ``policy`` the domain's published policy (none, quarantine, reject) if it has one.
    ``results`` holds each method's own result; ``reason`` says it in one line.
    """

    authenticated: bool
    domain: str | None
    method: str
    dmarc: str
    policy: str | None
    results: tuple[MethodResult, ...] = ()
    from_domain: str | None = None
    reason: str = ""
    # The From mailbox the verdict speaks for, as a routing key: the gateway admits on the
    # verdict only when it read the very same sender.
    address: str | None = None

    @property
    def refused_by_policy(self) -> bool:
        """Whether the mail fails DMARC for a domain that asks receivers to refuse or
        quarantine such mail: stored and flagged, but no run may answer it."""
        return self.dmarc == "fail" and self.policy in REFUSING_POLICIES

    @property
    def temporary(self) -> bool:
        """Whether a DNS failure kept the mail from being authenticated."""
        return self.dmarc == "temperror" or (
            not self.authenticated and any(r.result == "temperror" for r in self.results)
        )

    def summary(self) -> str:
        """One line for listings: who was proven and by what, or why nobody was."""
        policy = f", policy {self.policy}" if self.policy else ""
        if self.authenticated:
            head = f"authenticated {self.domain} by {self.method}"
        else:
            head = "not authenticated"
        return f"{head}; dmarc {self.dmarc}{policy}: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        """The verdict as JSON-ready data (stored with the message, printed by ``--json``)."""
        return attrs.asdict(self, recurse=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | None) -> Verdict:
        """A verdict read back from ``as_json``'s form; a missing one is unauthenticated."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, Mapping) or not data:
            return unverified("no sender authentication was recorded for this mail")
        results = tuple(MethodResult(**r) for r in data.get("results") or ())
        fields = {f.name for f in attrs.fields(cls)} - {"results"}
        return cls(**{k: v for k, v in data.items() if k in fields}, results=results)

    @classmethod
    def operator(cls, sender: str, reason: str = "a trial an operator started") -> Verdict:
        """The verdict of a run an operator or the host app started: they are speaking."""
        domain = sender.rpartition("@")[2].lower() if "@" in sender else None
        return cls(True, domain, OPERATOR, "none", None, (), domain, reason, routing_key(sender))


def unverified(reason: str, from_domain: str | None = None, **fields: Any) -> Verdict:
    """A verdict that proves nothing, saying why."""
    base: dict[str, Any] = {"dmarc": "none", "policy": None}
    base.update(fields)
    return Verdict(False, None, NONE, reason=reason, from_domain=from_domain, **base)


def authenticate(
    raw: bytes,
    *,
    client_ip: str | None = None,
    helo: str | None = None,
    mail_from: str | None = None,
    resolver: Resolver | None = None,
    trusted_relays: Iterable[str] = (),
    trusted_authserv_ids: Iterable[str] = (),
    trusted_arc_sealers: Iterable[str] = (),
    provider_authserv_ids: Iterable[str] | None = None,
) -> Verdict:
    """The verdict on ``raw``: whether its From domain is proven, by which method, and
    DMARC's result and policy.

    ``client_ip``, ``helo`` and ``mail_from`` are the SMTP session's (None for a file: then
    no SPF). ``resolver`` answers DNS (``resolver(name, rdtype) -> list[str]``, raising
    ``TimeoutError`` for a temporary failure); None uses the system's DNS. Mail from an
    address in ``trusted_relays`` has its topmost ``Authentication-Results`` carrying one of
    ``trusted_authserv_ids`` read; an ARC chain sealed by one of ``trusted_arc_sealers``
    carries its recorded DMARC pass. Either counts as DMARC's pass. One mail's lookups are
    bounded in number and time (``resolver.MAIL_LOOKUPS``, ``MAIL_SECONDS``): past them,
    the verdict is a temporary error.

    ``provider_authserv_ids`` is for mail read from a mailbox at a provider (IMAP), which
    received it from the sender: no SMTP session of ours to check SPF on, and the
    provider's results are read as a trusted relay's, in place of ``trusted_authserv_ids``:
    the topmost ``Authentication-Results``, only when it carries one of these ids (a header
    lower down, or on top when the provider added none, is the sender's own).
    """
    resolver = Budget(DnsResolver() if resolver is None else resolver)
    relays = networks(trusted_relays)
    try:
        signer = reader(raw)
    except ValueError as error:
        return unverified(str(error))
    found = _sender(signer.headers, raw)
    if isinstance(found, str):
        return unverified(found)
    written, ascii_domain = found.written_domain, found.ascii_domain
    results: list[MethodResult] = []
    record = dmarc_.lookup(ascii_domain, resolver)
    strict = (record.strict_dkim, record.strict_spf)

    for signature in check_signatures(signer, resolver):
        is_aligned = bool(signature.domain) and dmarc_.aligned(
            signature.domain or "", ascii_domain, strict=strict[0]
        )
        label = f"d={signature.domain}" if signature.domain else "unreadable signature"
        results.append(
            MethodResult(
                DKIM, signature.result, signature.domain, is_aligned, f"{label}: {signature.reason}"
            )
        )
    if provider_authserv_ids is not None:
        results.append(
            _provider_result(signer.headers, provider_authserv_ids, ascii_domain, strict)
        )
    elif from_trusted_relay(client_ip, relays):
        results.append(_relay_result(signer.headers, trusted_authserv_ids, ascii_domain, strict))
    else:
        spf = check_spf(client_ip, mail_from, helo, resolver)
        spf_aligned = (
            spf.result == "pass"
            and bool(spf.domain)
            and dmarc_.aligned(spf.domain or "", ascii_domain, strict=strict[1])
        )
        results.append(MethodResult(SPF, spf.result, spf.domain, spf_aligned, spf.reason))
    sealers = tuple(trusted_arc_sealers)
    if sealers:
        relayed, timed_out = arc_verdict(raw, ascii_domain, sealers, resolver)
        result = "temperror" if timed_out and relayed.result != "pass" else relayed.result
        results.append(
            MethodResult(ARC, result, relayed.by, relayed.result == "pass", relayed.reason)
        )
    return attrs.evolve(_verdict(written, record, tuple(results)), address=found.address)


@attrs.frozen
class Sender:
    """The one From mailbox of a mail, as sender authentication reads it: its routing key,
    and its domain as written (lowercased) and in ASCII."""

    address: str
    written_domain: str
    ascii_domain: str


# A CR not followed by LF: RFC 5322 forbids it, and parsers disagree on whether it ends a
# line, which would let one header block read as two different sets of headers.
_BARE_CR = re.compile(rb"\r(?!\n)")
_HEADER_END = re.compile(rb"\r?\n\r?\n")


def sender_of(raw: bytes) -> Sender | None:
    """The one From mailbox of ``raw`` as every check reads it, or None when there is not
    exactly one readable mailbox (or the header block could be read two ways)."""
    try:
        signer = reader(raw)
    except ValueError:
        return None
    found = _sender(signer.headers, raw)
    return None if isinstance(found, str) else found


def _sender(headers: list[tuple[bytes, bytes]], raw: bytes) -> Sender | str:
    """The From mailbox, or why there is none to prove."""
    end = _HEADER_END.search(raw)
    if _BARE_CR.search(raw, 0, end.start() if end else len(raw)):
        return "a bare CR in the header block: it could be read as other headers"
    values = [value for name, value in headers if name.lower() == b"from"]
    if len(values) != 1:
        return f"{len(values)} From headers: no single sender to prove"
    try:
        mailbox = parse_mailbox(values[0].decode("utf-8").strip())
    except (UnicodeDecodeError, InvalidAddress):
        return "the From header is not one readable mailbox"
    written = mailbox.address.rpartition("@")[2].lower().rstrip(".")
    ascii_domain, address = normalize_domain(written), routing_key(mailbox.address)
    if ascii_domain is None or address is None:
        return "the From header is not one readable mailbox"
    return Sender(address, written, ascii_domain)


def _relay_result(
    headers: list[tuple[bytes, bytes]],
    authserv_ids: Iterable[str],
    from_domain: str,
    strict: tuple[bool, bool],
) -> MethodResult:
    found = topmost_trusted(headers, authserv_ids)
    if found is None:
        return MethodResult(RELAY, "none", None, False, "the trusted relay recorded no results")
    by, value = found
    relayed = read_results(value, by, from_domain, strict)
    return MethodResult(RELAY, relayed.result, by, relayed.result == "pass", relayed.reason)


def _provider_result(
    headers: list[tuple[bytes, bytes]],
    authserv_ids: Iterable[str],
    from_domain: str,
    strict: tuple[bool, bool],
) -> MethodResult:
    """What the provider that received the mail recorded: its results are the topmost
    ``Authentication-Results`` and count only if that carries a trusted id. Any header
    below it, or on top when the provider added none, is the sender's own writing."""
    trusted = {i.strip().lower() for i in authserv_ids if i.strip()}
    found = topmost(headers)
    if found is None or not trusted:
        return MethodResult(RELAY, "none", None, False, "the provider recorded no results")
    by, value = found
    if by not in trusted:
        return MethodResult(
            RELAY,
            "none",
            by or None,
            False,
            f"the topmost Authentication-Results is by {by or 'nobody named'}, not a trusted "
            "authserv-id: anything below it is not the provider's",
        )
    relayed = read_results(value, by, from_domain, strict)
    return MethodResult(RELAY, relayed.result, by, relayed.result == "pass", relayed.reason)


_ORDER = (DKIM, SPF, RELAY, ARC)


def _verdict(written: str, record: dmarc_.Record, results: tuple[MethodResult, ...]) -> Verdict:
    proven = [r for r in results if r.result == "pass" and r.aligned]
    proven.sort(key=lambda r: _ORDER.index(r.method))
    if record.status == "temperror":
        return unverified(
            f"DNS failed for now: {record.reason}", written, dmarc="temperror", results=results
        )
    if proven:
        best = proven[0]
        return Verdict(
            True, written, best.method, "pass", record.policy, results, written, best.reason
        )
    if any(r.result == "temperror" for r in results):
        return unverified(
            "a DNS lookup failed for now, so nothing proved the sender",
            written,
            dmarc="temperror",
            policy=record.policy,
            results=results,
        )
    if record.status == "permerror":
        outcome = "permerror"
    elif record.status == "found":
        outcome = "fail"
    else:
        outcome = "none"
    why = "; ".join(f"{r.method} {r.result} ({r.reason})" for r in results) or "no signature"
    return unverified(
        f"nothing aligned with {written} passed: {why}",
        written,
        dmarc=outcome,
        policy=record.policy,
        results=results,
    )
