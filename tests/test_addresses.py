"""One mailbox or none, and the routing keys gates compare."""

import pytest

from protege.access import decide, normalize_pattern
from protege.addresses import InvalidAddress, parse_mailbox, routing_key

from .gateway.hostile import ATTACKER, OPERATOR, SPOOFED_FROM


@pytest.mark.parametrize("shape", SPOOFED_FROM)
def test_a_header_hiding_a_second_mailbox_names_nobody(shape):
    with pytest.raises(InvalidAddress):
        parse_mailbox(shape)
    assert routing_key(shape) is None


def test_an_address_in_a_display_name_is_only_a_name():
    mailbox = parse_mailbox(f"=?utf-8?q?{OPERATOR}?= <{ATTACKER}>")
    assert mailbox.address == ATTACKER
    assert routing_key(str(mailbox)) == ATTACKER


def test_display_names_are_decoded():
    mailbox = parse_mailbox("=?utf-8?q?J=C3=BCrgen_Gro=C3=9F?= <j@acme.com>")
    assert mailbox.name == "Jürgen Groß"
    assert str(mailbox) == "Jürgen Groß <j@acme.com>"


@pytest.mark.parametrize(
    "written",
    [
        "zoë@café.example",
        "Zoë@CAFÉ.example",
        "zoë@xn--caf-dma.example",
        "ZOË@XN--CAF-DMA.EXAMPLE.",
        "Zoë <zoë+news@café.example>",
        "=?utf-8?q?Zo=C3=AB?= <zoe\u0308@café.example>",  # decomposed ë
    ],
)
def test_internationalised_addresses_have_one_key(written):
    assert routing_key(written) == "zoë@xn--caf-dma.example"


def test_idna_2008_keeps_eszett_apart_from_ss():
    assert routing_key("a@straße.de") != routing_key("a@strasse.de")


@pytest.mark.parametrize("kind", ["allow", "deny"])
@pytest.mark.parametrize(
    ("pattern", "sender"),
    [
        ("*@café.example", "x@xn--caf-dma.example"),
        ("*@xn--caf-dma.example", "x@café.example"),
        ("josé@thescoop.com", "José <JOSÉ@thescoop.com.>"),
    ],
)
def test_rules_match_a_domain_in_either_form(kind, pattern, sender):
    class Rule:
        def __init__(self) -> None:
            self.kind, self.pattern = kind, normalize_pattern(pattern)

    decision = decide([Rule()], sender)
    assert decision.admitted is (kind == "allow")
    assert "rule" in decision.reason


def test_control_characters_anywhere_name_nobody():
    for text in ["Mara\x00 <m@x.com>", "m@x.com\u2028", "=?utf-8?q?M=0A?= <m@x.com>"]:
        assert routing_key(text) is None


@pytest.mark.parametrize("stop", ["\u3002", "\uff0e", "\uff61", "."])
def test_a_final_full_stop_of_any_script_names_the_same_domain(stop):
    assert routing_key(f"spammer@evil.com{stop}") == "spammer@evil.com"
    assert routing_key(f"spammer@evil{stop}com") == "spammer@evil.com"


def test_a_deny_rule_holds_against_a_final_unicode_full_stop():
    class Deny:
        kind, pattern = "deny", normalize_pattern("*@evil.com")

    assert not decide([Deny()], "spammer@evil.com\u3002").admitted


def test_a_quoted_local_part_holding_an_at_sign_names_nobody():
    assert routing_key('"mara@thescoop.com"@evil.example') is None


def test_a_mailbox_read_once_is_not_parsed_again_and_a_refusal_is_never_kept():
    text = "Jane Doe <jane.doe+orders@acme.example>"
    assert parse_mailbox(text) is parse_mailbox(text)
    for _ in range(2):
        with pytest.raises(InvalidAddress, match="2 mailboxes"):
            parse_mailbox("a@acme.example, b@acme.example")
    with pytest.raises(InvalidAddress, match="no address"):
        parse_mailbox(["not", "text"])  # type: ignore[arg-type]
