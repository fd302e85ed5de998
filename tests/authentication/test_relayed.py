"""Verdicts others recorded: a trusted relay's Authentication-Results and a trusted ARC sealer.
Each forged shape of them is refused."""

from __future__ import annotations

import dkim
import pytest

from protege.authentication import authenticate
from protege.testing import DkimKey

from .conftest import mail

RELAY = "192.0.2.7"
TRUSTED = {
    "trusted_relays": ("192.0.2.7", "198.51.100.16/28"),
    "trusted_authserv_ids": ("mx.thescoop.com",),
}


def relayed(dns, results: list[str], ip: str = RELAY, sender: str = "mara@thescoop.com"):
    headers = "".join(f"Authentication-Results: {r}\r\n" for r in results).encode()
    return authenticate(headers + mail(sender), client_ip=ip, resolver=dns, **TRUSTED)


def test_trusted_relay_dmarc_pass_authenticates(dns):
    verdict = relayed(dns, ["mx.thescoop.com; dmarc=pass (p=reject) header.from=thescoop.com"])
    assert verdict.authenticated
    assert verdict.method == "relay"
    assert verdict.dmarc == "pass"


def test_relay_networks_are_matched_by_range(dns):
    verdict = relayed(
        dns, ["mx.thescoop.com; dmarc=pass header.from=thescoop.com"], ip="198.51.100.20"
    )
    assert verdict.authenticated


def test_relay_dkim_pass_aligned_with_the_from_domain_authenticates(dns):
    verdict = relayed(dns, ["mx.thescoop.com; dkim=pass header.d=thescoop.com header.s=s1"])
    assert verdict.authenticated
    assert verdict.method == "relay"


def test_results_from_an_untrusted_address_are_ignored(dns):
    verdict = relayed(
        dns, ["mx.thescoop.com; dmarc=pass header.from=thescoop.com"], ip="203.0.113.66"
    )
    assert not verdict.authenticated
    assert all(r.method != "relay" for r in verdict.results)


def test_results_with_another_authserv_id_are_ignored(dns):
    verdict = relayed(dns, ["mx.attacker.example; dmarc=pass header.from=thescoop.com"])
    assert not verdict.authenticated


def test_a_forged_pass_below_the_trusted_results_is_ignored(dns):
    verdict = relayed(
        dns,
        [
            "mx.thescoop.com; dmarc=fail (p=reject) header.from=thescoop.com",
            "mx.thescoop.com; dmarc=pass header.from=thescoop.com",
        ],
    )
    assert not verdict.authenticated


def test_a_pass_for_another_domain_does_not_count(dns):
    verdict = relayed(dns, ["mx.thescoop.com; dmarc=pass header.from=evil.example"])
    assert not verdict.authenticated


def test_relay_verdict_counts_as_dmarc_pass_for_the_policy(dns):
    dns.add("_dmarc.thescoop.com", "TXT", "v=DMARC1; p=reject")
    verdict = relayed(dns, ["mx.thescoop.com; dmarc=pass header.from=thescoop.com"])
    assert verdict.dmarc == "pass"
    assert not verdict.refused_by_policy


@pytest.fixture(scope="module")
def list_key() -> DkimKey:
    return DkimKey.generate("lists.example", "arc")


def through_a_list(dns, scoop_key, list_key, sealer_key=None):
    """Mara's signed mail, as a mailing list passes it on: subject tagged, footer appended
    (which breaks her signature), her DMARC pass recorded and sealed with ARC."""
    sealer_key = sealer_key or list_key
    dns.publish(scoop_key)
    dns.publish(sealer_key)
    original = scoop_key.sign(mail())
    received = (
        f"Authentication-Results: {sealer_key.domain}; dkim=pass header.d=thescoop.com; "
        "dmarc=pass header.from=thescoop.com\r\n"
    ).encode() + original
    changed = (
        received.replace(b"Subject: Refund", b"Subject: [staff] Refund") + b"--\r\nstaff list\r\n"
    )
    arc = dkim.arc_sign(
        changed,
        sealer_key.selector.encode(),
        sealer_key.domain.encode(),
        sealer_key.private_key,
        sealer_key.domain.encode(),
    )
    return b"".join(arc) + changed


def test_trusted_sealer_carries_dmarc_pass_through_a_list(dns, scoop_key, list_key):
    raw = through_a_list(dns, scoop_key, list_key)
    assert not authenticate(raw, resolver=dns).authenticated  # the list broke the signature
    verdict = authenticate(raw, resolver=dns, trusted_arc_sealers=("lists.example",))
    assert verdict.authenticated
    assert verdict.method == "arc"


def test_untrusted_sealer_carries_nothing(dns, scoop_key):
    other = DkimKey.generate("relay.attacker.example", "arc")
    raw = through_a_list(dns, scoop_key, other)
    verdict = authenticate(raw, resolver=dns, trusted_arc_sealers=("lists.example",))
    assert not verdict.authenticated
    (arc,) = [r for r in verdict.results if r.method == "arc"]
    assert "not trusted" in arc.reason


def test_a_chain_claiming_a_trusted_sealer_without_its_key_fails(dns, scoop_key, list_key):
    impostor = DkimKey.generate("lists.example", "arc")  # same name, not the published key
    raw = through_a_list(dns, scoop_key, list_key, impostor)
    dns.records[(list_key.name, "TXT")] = [list_key.record]
    verdict = authenticate(raw, resolver=dns, trusted_arc_sealers=("lists.example",))
    assert not verdict.authenticated
