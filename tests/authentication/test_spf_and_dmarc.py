"""SPF (with the SMTP session's address, MAIL FROM and HELO) and DMARC's alignment and policy."""

from __future__ import annotations

import pytest

from protege.authentication import authenticate
from protege.authentication.dmarc import organizational_domain

from .conftest import mail

SCOOP_SPF = "v=spf1 ip4:203.0.113.0/24 -all"


def spf_verdict(
    dns,
    *,
    ip="203.0.113.5",
    mail_from="bounce@thescoop.com",
    helo="mx.thescoop.com",
    sender="mara@thescoop.com",
):
    return authenticate(mail(sender), client_ip=ip, helo=helo, mail_from=mail_from, resolver=dns)


def spf_result(verdict):
    (spf,) = [r for r in verdict.results if r.method == "spf"]
    return spf


def test_aligned_spf_pass_authenticates(dns):
    dns.add("thescoop.com", "TXT", SCOOP_SPF)
    verdict = spf_verdict(dns)
    assert verdict.authenticated
    assert verdict.method == "spf"
    assert spf_result(verdict).domain == "thescoop.com"


def test_spf_pass_for_another_domain_is_not_aligned(dns):
    dns.add("bulkmailer.example", "TXT", "v=spf1 ip4:203.0.113.0/24 -all")
    verdict = spf_verdict(dns, mail_from="bounce@bulkmailer.example")
    assert spf_result(verdict).result == "pass"
    assert not spf_result(verdict).aligned
    assert not verdict.authenticated


def test_client_outside_the_record_fails(dns):
    dns.add("thescoop.com", "TXT", SCOOP_SPF)
    verdict = spf_verdict(dns, ip="198.51.100.9")
    assert spf_result(verdict).result == "fail"
    assert not verdict.authenticated


def test_include_chains_are_followed(dns):
    dns.add("thescoop.com", "TXT", "v=spf1 include:_spf.provider.example -all")
    dns.add("_spf.provider.example", "TXT", "v=spf1 include:_net.provider.example -all")
    dns.add("_net.provider.example", "TXT", SCOOP_SPF)
    assert spf_verdict(dns).authenticated


def test_more_than_ten_lookups_is_a_permanent_error(dns):
    dns.add("thescoop.com", "TXT", "v=spf1 include:l0.example -all")
    for level in range(12):
        dns.add(f"l{level}.example", "TXT", f"v=spf1 include:l{level + 1}.example -all")
    dns.add("l12.example", "TXT", SCOOP_SPF)
    verdict = spf_verdict(dns)
    assert spf_result(verdict).result == "permerror"
    assert not verdict.authenticated


def test_an_spf_lookup_that_times_out_is_a_temporary_error(dns):
    dns.failing.add("thescoop.com")
    verdict = spf_verdict(dns)
    assert spf_result(verdict).result == "temperror"
    assert not verdict.authenticated
    assert verdict.dmarc == "temperror"


def test_empty_envelope_sender_checks_the_helo_name(dns):
    dns.add("mx.thescoop.com", "TXT", SCOOP_SPF)
    verdict = spf_verdict(dns, mail_from="")
    assert spf_result(verdict).domain == "mx.thescoop.com"
    assert verdict.authenticated  # relaxed: mx.thescoop.com belongs to thescoop.com


def test_strict_spf_alignment_wants_the_same_domain(dns):
    dns.add("mail.thescoop.com", "TXT", SCOOP_SPF)
    dns.add("_dmarc.thescoop.com", "TXT", "v=DMARC1; p=quarantine; aspf=s")
    verdict = spf_verdict(dns, mail_from="bounce@mail.thescoop.com")
    assert not verdict.authenticated
    assert (verdict.dmarc, verdict.policy, verdict.refused_by_policy) == (
        "fail",
        "quarantine",
        True,
    )


def test_no_smtp_session_means_no_spf(dns):
    dns.add("thescoop.com", "TXT", "v=spf1 +all")
    verdict = authenticate(mail(), resolver=dns)
    assert spf_result(verdict).result == "none"
    assert not verdict.authenticated


def test_aligned_pass_authenticates_without_a_dmarc_record(dns):
    dns.add("thescoop.com", "TXT", SCOOP_SPF)
    verdict = spf_verdict(dns)
    assert verdict.authenticated
    assert (verdict.dmarc, verdict.policy) == ("pass", None)


def test_policy_of_the_domain_and_of_its_subdomains(dns):
    dns.add("_dmarc.thescoop.com", "TXT", "v=DMARC1; p=reject; sp=none")
    assert spf_verdict(dns).policy == "reject"
    sub = spf_verdict(dns, sender="mara@eu.thescoop.com")
    assert sub.policy == "none"
    assert not sub.refused_by_policy
    dns.add("_dmarc.eu.thescoop.com", "TXT", "v=DMARC1; p=quarantine")
    assert spf_verdict(dns, sender="mara@eu.thescoop.com").policy == "quarantine"


def test_unreadable_dmarc_record_is_a_permanent_error(dns):
    dns.add("_dmarc.thescoop.com", "TXT", "v=DMARC1; p=maybe")
    verdict = spf_verdict(dns)
    assert verdict.dmarc == "permerror"
    assert verdict.policy is None
    assert not verdict.refused_by_policy


def test_organizational_domains_follow_the_public_suffix_list():
    assert organizational_domain("a.b.mail.thescoop.com") == "thescoop.com"
    assert organizational_domain("shop.example.co.uk") == "example.co.uk"
    assert organizational_domain("mara.github.io") == "mara.github.io"
    assert organizational_domain("com") == "com"


def test_pinned_records_may_be_one_string_or_several():
    from protege.authentication import DnsResolver

    resolver = DnsResolver(
        {"_dmarc.thescoop.com": "v=DMARC1; p=reject", "x.": ["a", "b"]}, offline=True
    )
    assert resolver("_DMARC.thescoop.com.", "TXT") == ["v=DMARC1; p=reject"]
    assert resolver("x", "TXT") == ["a", "b"]
    assert resolver("thescoop.com", "TXT") == []  # offline: nothing else is looked up


def test_one_mail_asks_a_bounded_number_of_lookups(dns):
    from protege.authentication.resolver import MAIL_LOOKUPS

    # Within SPF's own limits (9 mechanisms, 10 MX hosts each) a record may still ask for
    # about a hundred lookups; a mail gets MAIL_LOOKUPS, then a temporary error.
    dns.add("thescoop.com", "TXT", "v=spf1 " + " ".join(f"mx:m{n}.example" for n in range(9)))
    for n in range(9):
        for host in range(10):
            dns.add(f"m{n}.example", "MX", f"10 h{host}.m{n}.example")
            dns.add(f"h{host}.m{n}.example", "A", "192.0.2.1")
    verdict = spf_verdict(dns)
    assert spf_result(verdict).result == "temperror"
    assert len(dns.asked) == MAIL_LOOKUPS
    assert not verdict.authenticated


def test_a_mail_whose_lookups_run_out_of_time_proves_nothing(scoop_key):
    from protege.authentication.resolver import Budget

    now = [0.0]

    def slow(name, rdtype):
        now[0] += 4.0  # each answer takes 4 s
        return [scoop_key.record] if name == scoop_key.name else []

    budget = Budget(slow, seconds=10, clock=lambda: now[0])
    for _ in range(3):
        budget("x.example", "TXT")
    with pytest.raises(TimeoutError, match="ran out"):
        budget("x.example", "TXT")
