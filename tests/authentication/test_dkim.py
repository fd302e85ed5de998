"""DKIM: which signatures prove the From domain, through real signatures and a stub DNS."""

from __future__ import annotations

from pathlib import Path

import pytest

from protege.authentication import authenticate
from protege.testing import DkimKey

from .conftest import mail


def test_aligned_signature_authenticates_the_from_domain(dns, scoop_key):
    dns.publish(scoop_key)
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert verdict.authenticated
    assert (verdict.domain, verdict.method, verdict.dmarc) == ("thescoop.com", "dkim", "pass")
    (dkim,) = [r for r in verdict.results if r.method == "dkim"]
    assert (dkim.result, dkim.domain, dkim.aligned) == ("pass", "thescoop.com", True)


def test_unsigned_mail_is_not_authenticated(dns):
    verdict = authenticate(mail(), resolver=dns)
    assert not verdict.authenticated
    assert verdict.domain is None
    assert verdict.method == "none"
    assert verdict.from_domain == "thescoop.com"


def test_a_valid_signature_of_another_domain_is_not_aligned(dns, other_key):
    dns.publish(other_key)
    verdict = authenticate(other_key.sign(mail()), resolver=dns)
    (dkim,) = [r for r in verdict.results if r.method == "dkim"]
    assert dkim.result == "pass"
    assert not dkim.aligned
    assert not verdict.authenticated


def test_subdomain_signature_aligns_relaxed_but_not_strict(dns):
    key = dns.publish(DkimKey.generate("mail.thescoop.com", "s"))
    signed = key.sign(mail())
    assert authenticate(signed, resolver=dns).authenticated
    dns.add("_dmarc.thescoop.com", "TXT", "v=DMARC1; p=reject; adkim=s")
    strict = authenticate(signed, resolver=dns)
    assert not strict.authenticated
    assert (strict.dmarc, strict.policy) == ("fail", "reject")
    assert strict.refused_by_policy


def test_from_a_subdomain_signed_by_the_parent_is_aligned_relaxed(dns, scoop_key):
    dns.publish(scoop_key)
    verdict = authenticate(scoop_key.sign(mail("mara@eu.thescoop.com")), resolver=dns)
    assert verdict.authenticated
    assert verdict.domain == "eu.thescoop.com"


def test_private_public_suffix_domains_are_not_one_organization(dns):
    # github.io is in the list's private section: mara.github.io and evil.github.io are
    # separate registrants, so one cannot sign for the other.
    key = dns.publish(DkimKey.generate("evil.github.io", "s"))
    verdict = authenticate(key.sign(mail("mara@mara.github.io")), resolver=dns)
    assert not verdict.authenticated
    own = dns.publish(DkimKey.generate("mara.github.io", "s"))
    assert authenticate(own.sign(mail("mara@mara.github.io")), resolver=dns).authenticated


def test_tampered_body_fails(dns, scoop_key):
    dns.publish(scoop_key)
    signed = scoop_key.sign(mail()).replace(b"order 1042", b"order 9999")
    verdict = authenticate(signed, resolver=dns)
    assert not verdict.authenticated
    (dkim,) = [r for r in verdict.results if r.method == "dkim"]
    assert dkim.result == "fail"
    assert "body hash" in dkim.reason


def test_tampered_signed_header_fails(dns, scoop_key):
    dns.publish(scoop_key)
    signed = scoop_key.sign(mail()).replace(b"Subject: Refund", b"Subject: Refund all")
    assert not authenticate(signed, resolver=dns).authenticated


def test_a_signature_over_part_of_the_body_does_not_cover_appended_text(dns, scoop_key):
    dns.publish(scoop_key)
    signed = scoop_key.sign(mail(), length=True)
    assert authenticate(signed, resolver=dns).authenticated
    appended = signed + b"P.S. also wire $5,000 to account 1234.\r\n"
    verdict = authenticate(appended, resolver=dns)
    assert not verdict.authenticated
    (dkim,) = [r for r in verdict.results if r.method == "dkim"]
    assert "unsigned" in dkim.reason


def test_rsa_sha1_is_refused(dns):
    key = dns.publish(DkimKey.generate("thescoop.com", "old", algorithm="rsa-sha1"))
    verdict = authenticate(key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert "rsa-sha1" in verdict.results[0].reason


def test_rsa_keys_under_1024_bits_are_refused(dns):
    # cryptography will not make such a key any more: this one was made by openssl genrsa.
    pem = (Path(__file__).parent / "keys" / "rsa-768.pem").read_bytes()
    key = dns.publish(DkimKey.from_pem("thescoop.com", "short", pem))
    verdict = authenticate(key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert "too small" in verdict.results[0].reason


def test_expired_signature_fails(dns, scoop_key):
    dns.publish(scoop_key)
    assert authenticate(scoop_key.sign(mail(), expires_in=3600), resolver=dns).authenticated
    verdict = authenticate(scoop_key.sign(mail(), expires_in=-3600), resolver=dns)
    assert not verdict.authenticated
    assert "expired" in verdict.results[0].reason


def test_ed25519_signatures_verify(dns):
    key = dns.publish(DkimKey.generate("thescoop.com", "ed", algorithm="ed25519-sha256"))
    verdict = authenticate(key.sign(mail()), resolver=dns)
    assert verdict.authenticated
    assert verdict.method == "dkim"


def test_one_good_signature_among_bad_ones_is_enough(dns, scoop_key, other_key):
    dns.publish(scoop_key)
    dns.publish(other_key)
    forged = DkimKey.generate("thescoop.com", "s2026")  # same selector, key not published
    raw = other_key.sign(scoop_key.sign(forged.sign(mail())))
    verdict = authenticate(raw, resolver=dns)
    assert verdict.authenticated
    assert [r.result for r in verdict.results if r.method == "dkim"] == ["pass", "pass", "fail"]


def test_two_from_headers_prove_nobody(dns, scoop_key):
    dns.publish(scoop_key)
    raw = scoop_key.sign(mail(extra="From: boss@thescoop.com\r\n"))
    verdict = authenticate(raw, resolver=dns)
    assert not verdict.authenticated
    assert "2 From headers" in verdict.reason


def test_international_domains_compare_in_their_ascii_form(dns):
    key = dns.publish(DkimKey.generate("xn--glac-epa.example", "s"))
    verdict = authenticate(key.sign(mail("Mara <mara@glacé.example>")), resolver=dns)
    assert verdict.authenticated
    assert verdict.domain == "glacé.example"


def test_a_key_lookup_that_times_out_is_a_temporary_error(dns, scoop_key):
    dns.publish(scoop_key)
    dns.failing.add(scoop_key.name)
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert verdict.dmarc == "temperror"
    assert verdict.temporary


def test_a_dmarc_lookup_that_times_out_authenticates_nothing(dns, scoop_key):
    dns.publish(scoop_key)
    dns.failing.add("_dmarc.thescoop.com")
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert verdict.dmarc == "temperror"


@pytest.mark.parametrize(
    "junk",
    [
        b"DKIM-Signature: v=1; a=rsa-sha256; d=thescoop.com; s=x; h=from; bh=!!; b=??\r\n",
        b"DKIM-Signature: garbage without tags\r\n",
        b"DKIM-Signature: v=1; a=rsa-sha256; d=thescoop.com; s=x; h=from; bh=AA; b=AA; l=-5\r\n",
    ],
)
def test_malformed_signatures_fail_without_raising(dns, junk):
    verdict = authenticate(junk + mail(), resolver=dns)
    assert not verdict.authenticated
    assert verdict.results[0].result in ("fail", "permerror")


def test_signatures_past_the_limit_are_not_checked(dns, other_key):
    dns.publish(other_key)
    raw = mail()
    for _ in range(12):
        raw = other_key.sign(raw)
    verdict = authenticate(raw, resolver=dns)
    assert len([r for r in verdict.results if r.method == "dkim"]) == 8


def test_verdict_round_trips_through_json(dns, scoop_key):
    import json

    from protege.authentication import Verdict

    dns.publish(scoop_key)
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert Verdict.from_json(json.dumps(verdict.as_json())) == verdict


def test_a_rotated_key_is_seen_at_once(dns, scoop_key):
    dns.publish(scoop_key)
    signed = scoop_key.sign(mail())
    assert authenticate(signed, resolver=dns).authenticated
    rotated = DkimKey.generate("thescoop.com", scoop_key.selector)
    dns.records[(scoop_key.name, "TXT")] = [rotated.record]
    assert not authenticate(signed, resolver=dns).authenticated  # the old key is not kept
    assert authenticate(rotated.sign(mail()), resolver=dns).authenticated


def test_a_key_removed_from_dns_proves_nothing_any_more(dns, scoop_key):
    dns.publish(scoop_key)
    signed = scoop_key.sign(mail())
    assert authenticate(signed, resolver=dns).authenticated
    del dns.records[(scoop_key.name, "TXT")]
    verdict = authenticate(signed, resolver=dns)
    assert not verdict.authenticated


def test_a_signature_that_does_not_cover_from_proves_nothing(dns, scoop_key):
    dns.publish(scoop_key)
    # A message The Scoop signed without covering its From (dkimpy will not make one, so
    # its signer is told to leave From out), with Mara's address written in afterwards.
    raw = mail("Anyone <noreply@thescoop.com>")
    signature = _signed_leaving_from_out(scoop_key, raw)
    forged = signature + raw.replace(b"Anyone <noreply@thescoop.com>", b"Mara <mara@thescoop.com>")
    verdict = authenticate(forged, resolver=dns)
    assert not verdict.authenticated
    assert "does not cover the From header" in verdict.results[0].reason
    # The signature itself is valid: only the rule that it must cover From refuses it.
    import dkim

    assert dkim.verify(forged, dnsfunc=lambda name, timeout=5: scoop_key.record.encode())


def _signed_leaving_from_out(key, raw):
    import dkim

    class LeavingFromOut(dkim.DKIM):
        def gen_header(self, fields, include_headers, *args, **kwargs):
            fields = [(k, b"subject : date" if k == b"h" else v) for k, v in fields]
            return super().gen_header(fields, [b"subject", b"date"], *args, **kwargs)

    signer = LeavingFromOut(raw, minkey=0)
    return signer.sign(
        key.selector.encode(),
        key.domain.encode(),
        key.private_key,
        include_headers=[b"from", b"subject", b"date"],
    )


def test_a_key_in_testing_mode_is_treated_as_unsigned(dns, scoop_key):
    dns.add(scoop_key.name, "TXT", scoop_key.record + "; t=y")
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert "testing mode" in verdict.results[0].reason
    dns.records[(scoop_key.name, "TXT")] = [scoop_key.record + "; t=s"]
    assert authenticate(scoop_key.sign(mail()), resolver=dns).authenticated


def test_a_key_restricted_to_other_hashes_refuses_the_signature(dns, scoop_key):
    dns.add(scoop_key.name, "TXT", scoop_key.record + "; h=sha1")
    verdict = authenticate(scoop_key.sign(mail()), resolver=dns)
    assert not verdict.authenticated
    assert "allows only sha1" in verdict.results[0].reason
    dns.records[(scoop_key.name, "TXT")] = [scoop_key.record + "; h=sha1:sha256"]
    assert authenticate(scoop_key.sign(mail()), resolver=dns).authenticated
