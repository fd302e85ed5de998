import pytest

from protege.access import (
    InvalidPattern,
    candidate_patterns,
    decide,
    normalize_pattern,
    pattern_matches,
    require_address,
    routing_key,
)


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("mara@thescoop.com", "mara@thescoop.com"),
        ("Mara+billing@TheScoop.com", "mara@thescoop.com"),
        ("Mara <Mara+billing@TheScoop.com>", "mara@thescoop.com"),
        ('"Jane, Acme" <jane@acme.com>', "jane@acme.com"),
        ("<jane@acme.com>", "jane@acme.com"),
        ("jane+a+b@acme.com", "jane@acme.com"),
        ("", None),
        (None, None),
        ("not an address", None),
        ("jane@", None),
        ("@acme.com", None),
        ("+tag@acme.com", None),
        ("a@b@c.com", None),
        ("jane@acme.com, eve@evil.com", None),
        ('"x@evil.com" <>', None),
        ("jane@.acme.com", None),
        ("x" * 700 + "@acme.com", None),
    ],
)
def test_routing_key(address, key):
    assert routing_key(address) == key


@pytest.mark.parametrize(
    ("pattern", "stored"),
    [
        ("mara@thescoop.com", "mara@thescoop.com"),
        ("Mara+billing@TheScoop.com", "mara@thescoop.com"),
        ("*@TheScoop.com", "*@thescoop.com"),
        ("mara@*", "mara@*"),
        ("*", "*"),
        ("*.thescoop.com", "*.thescoop.com"),
        ("  *@thescoop.com ", "*@thescoop.com"),
    ],
)
def test_valid_patterns_are_stored_normalised(pattern, stored):
    assert normalize_pattern(pattern) == stored


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "   ",
        "thescoop.com",
        "*@*.com",
        "**",
        "Mara <mara@thescoop.com>",
        "a b@c.com",
        "a@b@c.com",
        "*@a,b.com",
        "x" * 400 + "*",
    ],
)
def test_invalid_patterns_are_a_clear_error(pattern):
    with pytest.raises(InvalidPattern, match="pattern"):
        normalize_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("*@thescoop.com", "mara@thescoop.com", True),
        ("*@thescoop.com", "mara@sub.thescoop.com", False),
        ("*@thescoop.com", "mara@thescoop.com.evil", False),
        ("*.thescoop.com", "mara@sub.thescoop.com", True),
        ("mara@*", "mara@anywhere.org", True),
        ("mara@*", "amara@anywhere.org", False),
        ("*", "anyone@anywhere.org", True),
        ("mara@thescoop.com", "mara@thescoop.com", True),
        ("mara@thescoop.com", "mara2@thescoop.com", False),
        ("ab*ba", "aba", False),  # prefix and suffix may not overlap
        ("*", None, False),
    ],
)
def test_pattern_matching(pattern, key, matches):
    assert pattern_matches(pattern, key) is matches


class R:
    def __init__(self, kind, pattern):
        self.kind, self.pattern = kind, normalize_pattern(pattern)


@pytest.mark.parametrize(
    ("rules", "sender", "admitted", "reason"),
    [
        ([], "anyone@anywhere.org", True, "no rules: open to every sender"),
        ([], "not an address", True, "no rules: open to every sender"),
        ([R("allow", "*@thescoop.com")], "mara@thescoop.com", True, "allow rule *@thescoop.com"),
        ([R("allow", "*@thescoop.com")], "jane@acme.com", False, "allow-list"),
        ([R("allow", "*@thescoop.com")], "garbage", False, "allow-list"),
        ([R("deny", "*@evil.com")], "jane@acme.com", True, "block-list"),
        ([R("deny", "*@evil.com")], "eve@evil.com", False, "deny rule *@evil.com"),
        ([R("deny", "*@evil.com")], "garbage", False, "does not parse"),
        # deny wins over allow, whatever the order
        (
            [R("allow", "*@thescoop.com"), R("deny", "intern@thescoop.com")],
            "Intern+x@TheScoop.com",
            False,
            "deny rule intern@thescoop.com",
        ),
        (
            [R("deny", "intern@thescoop.com"), R("allow", "*@thescoop.com")],
            "mara@thescoop.com",
            True,
            "allow rule",
        ),
        # any allow rule makes an allow-list, even beside deny rules
        (
            [R("deny", "*@evil.com"), R("allow", "mara@thescoop.com")],
            "jane@acme.com",
            False,
            "allow-list",
        ),
        ([R("allow", "mara@thescoop.com")], "Mara <MARA+billing@thescoop.com>", True, "allow"),
    ],
)
def test_gate_decisions(rules, sender, admitted, reason):
    decision = decide(rules, sender)
    assert decision.admitted is admitted
    assert reason in decision.reason


def test_agent_address_keeps_its_tag_but_drops_display_name_and_case():
    assert require_address("Sundae <Sundae+Support@TheScoop.example>") == (
        "sundae+support@thescoop.example"
    )


@pytest.mark.parametrize("key", ["mara@thescoop.com", "a@b.c", "aa@aa.aa", "x" * 64])
def test_candidate_patterns_are_exactly_the_patterns_that_match(key):
    candidates = set(candidate_patterns(key))
    pool = candidates | {
        "*",
        "*@thescoop.com",
        "*@scoop.com",
        "mara@*",
        "m*m",
        "*.com",
        "*x",
        key + "*",
        "*" + key,
        "other@thescoop.com",
        "*@thescoop.co",
        key[:-1],
    }
    for pattern in pool:
        assert (pattern in candidates) is pattern_matches(pattern, key), pattern


def test_very_long_keys_are_not_expanded():
    assert candidate_patterns("x" * 65 + "@b.c") is None
