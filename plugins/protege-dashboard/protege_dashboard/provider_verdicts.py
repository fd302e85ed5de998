"""What a mail provider says it verified of a mail it hands over: SPF and DKIM results from
SendGrid, Mailgun and Postmark, read into a sender verdict (used only for ingresses an
operator trusts, after the request's own signature or password was checked)."""

from __future__ import annotations

import email.parser
import email.policy
import email.utils
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from protege.admin import (
    DnsLookup,
    MethodResult,
    Verdict,
    dmarc_aligned,
    dmarc_lookup,
    sender_of,
    unverified,
)


def form_text(form: Mapping[str, bytes], name: str) -> str | None:
    """A form field's text (UTF-8, undecodable bytes replaced), or None when empty."""
    value = form.get(name)
    return value.decode("utf-8", "replace") if value else None


@attrs.frozen
class ProviderReport:
    """What a mail provider says it checked: SPF's ``spf`` result for ``spf_domain`` (the
    envelope sender's domain), and each DKIM result as ``(domain, result)``."""

    provider: str
    spf: str | None = None
    spf_domain: str | None = None
    dkim: tuple[tuple[str | None, str], ...] = ()


def provider_verdict(raw: bytes, report: ProviderReport, resolver: DnsLookup) -> Verdict:
    """The sender verdict ``report`` gives ``raw``: authenticated (method ``relay``) when
    the provider reports a DKIM pass for a domain aligned with the From domain, or an SPF
    pass for an envelope domain aligned with it, as that domain's DMARC record asks;
    otherwise unverified, with the provider's results kept."""
    provider = report.provider
    sender = sender_of(raw)
    if sender is None:
        return unverified(f"{provider}: the From header is not one readable mailbox")
    written, ascii_domain = sender.written_domain, sender.ascii_domain
    record = dmarc_lookup(ascii_domain, resolver)
    # A record DNS could not fetch may ask for strict alignment: assume it does.
    unsure = record.status == "temperror"
    strict_dkim, strict_spf = record.strict_dkim or unsure, record.strict_spf or unsure
    results = [
        _reported(provider, "dkim", result, domain, ascii_domain, strict_dkim)
        for domain, result in report.dkim
    ]
    if report.spf is not None:
        results.append(
            _reported(provider, "spf", report.spf, report.spf_domain, ascii_domain, strict_spf)
        )
    proven = next((r for r in results if r.result == "pass" and r.aligned), None)
    policy = record.policy if record.status == "found" else None
    if proven is not None:
        return Verdict(
            True,
            written,
            "relay",
            "pass",
            policy,
            tuple(results),
            written,
            proven.reason,
            sender.address,
        )
    why = "; ".join(r.reason for r in results) or f"{provider} reported no results"
    return unverified(
        f"nothing {provider} reported is aligned with {written} and passed: {why}",
        written,
        policy=policy,
        results=tuple(results),
    )


def _reported(
    provider: str, check: str, result: str, domain: str | None, from_domain: str, strict: bool
) -> MethodResult:
    """One result a provider reported, and whether it passed for a domain aligned with the
    From domain (``from_domain``, in ASCII)."""
    is_aligned = False
    if result == "pass" and domain:
        try:
            ascii_domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            ascii_domain = ""
        is_aligned = bool(ascii_domain) and dmarc_aligned(ascii_domain, from_domain, strict=strict)
    said = f"for {domain}" if domain else "naming no domain"
    reason = f"{provider} reported {check} {result} {said}"
    return MethodResult("relay", result, domain, is_aligned, reason)


def _headers(raw: bytes) -> Any:
    return email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)


def from_domain(raw: bytes) -> str | None:
    """The domain of the single mailbox in ``raw``'s single From header, lowercased, read
    as sender authentication reads it (None when there is no such mailbox)."""
    sender = sender_of(raw)
    return None if sender is None else sender.written_domain


def _domain_of(address: str | None) -> str | None:
    if not address or "@" not in address:
        return None
    return address.strip().strip("<>").rpartition("@")[2].lower().rstrip(".") or None


def _result(text: str | None) -> str | None:
    """A provider's result word, lowercased (``Pass`` → ``pass``); None when it says none."""
    words = (text or "").split()
    return words[0].lower().strip("();,") if words else None


def _signing_domains(raw: bytes) -> set[str]:
    """The ``d=`` domains of the DKIM signatures ``raw`` carries."""
    domains = set()
    for value in _headers(raw).get_all("DKIM-Signature") or []:
        found = re.search(r"(?:^|;)\s*d\s*=\s*([^;\s]+)", str(value))
        if found:
            domains.add(found.group(1).lower().rstrip("."))
    return domains


_SENDGRID_DKIM = re.compile(r"@?([^\s{},:@]+)\s*:\s*([A-Za-z]+)")


def sendgrid_report(form: Mapping[str, bytes], envelope_sender: str | None) -> ProviderReport:
    """What SendGrid's Inbound Parse says it checked: ``SPF`` (for the envelope sender) and
    ``dkim`` (``{@thescoop.com : pass, @other.example : fail}``)."""
    dkim = tuple(
        (domain.lower().rstrip("."), result.lower())
        for domain, result in _SENDGRID_DKIM.findall(form_text(form, "dkim") or "")
    )
    spf = _result(form_text(form, "SPF"))
    return ProviderReport("SendGrid", spf, _domain_of(envelope_sender), dkim)


def mailgun_report(
    form: Mapping[str, bytes], raw: bytes, envelope_sender: str | None
) -> ProviderReport:
    """What Mailgun says it checked: ``X-Mailgun-Spf`` (for the envelope sender) and
    ``X-Mailgun-Dkim-Check-Result``, from the form or from its ``message-headers``. Mailgun
    names no domain for its DKIM pass: it is taken for the signing domain only when every
    signature in the message names the same one."""
    listed: list[tuple[str, str]] = []
    try:
        pairs = json.loads(form_text(form, "message-headers") or "[]")
    except (ValueError, RecursionError):
        pairs = []
    if isinstance(pairs, list):
        listed = [
            (p[0].lower(), p[1])
            for p in pairs
            if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
        ]

    def said(name: str) -> str | None:
        value = form_text(form, name)
        if value is not None:
            return value
        # Only Mailgun's own line counts: a mail carrying one more of its own proves nothing.
        values = [v for n, v in listed if n == name.lower()]
        return values[0] if len(values) == 1 else None

    dkim: tuple[tuple[str | None, str], ...] = ()
    dkim_result = _result(said("X-Mailgun-Dkim-Check-Result"))
    if dkim_result is not None:
        domains = _signing_domains(raw)
        dkim = ((domains.pop() if len(domains) == 1 else None, dkim_result),)
    return ProviderReport(
        "Mailgun", _result(said("X-Mailgun-Spf")), _domain_of(envelope_sender), dkim
    )


_AR_DKIM = re.compile(r"^\s*dkim\s*=\s*([A-Za-z]+)", re.IGNORECASE)
_AR_SIGNER = re.compile(r"header\.(?:d\s*=\s*|i\s*=\s*[^@\s;]*@)([^\s;]+)", re.IGNORECASE)
_ENVELOPE_FROM = re.compile(r"envelope-from\s*=\s*\"?<?([^\s;\">]+)", re.IGNORECASE)


def postmark_report(payload: dict[str, Any]) -> ProviderReport:
    """What Postmark says it checked, from the topmost ``Received-SPF`` and
    ``Authentication-Results`` in the webhook's ``Headers`` (Postmark puts its own above
    the sender's)."""
    headers = payload.get("Headers")
    pairs = [
        (str(h["Name"]).lower(), str(h["Value"]))
        for h in (headers if isinstance(headers, list) else [])
        if isinstance(h, dict) and "Name" in h and isinstance(h.get("Value"), str)
    ]
    spf, spf_domain = None, None
    received = next((v for n, v in pairs if n == "received-spf"), None)
    if received is not None:
        spf = _result(received)
        envelope = _ENVELOPE_FROM.search(received)
        spf_domain = _domain_of(envelope.group(1)) if envelope else None
    dkim: list[tuple[str | None, str]] = []
    results = next((v for n, v in pairs if n == "authentication-results"), None)
    for clause in (results or "").split(";")[1:]:
        result = _AR_DKIM.match(clause)
        if result:
            signer = _AR_SIGNER.search(clause)
            domain = signer.group(1).lower().rstrip(".") if signer else None
            dkim.append((domain, result.group(1).lower()))
    return ProviderReport("Postmark", spf, spf_domain, tuple(dkim))
