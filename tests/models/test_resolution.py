"""The database-side gate used by resolution agrees with the reference gate, case by case."""

import pytest

from protege.access import decide
from protege.models import Agent, Toolkit
from protege.models.resolution import resolve

LONG = "l" + "o" * 70 + "ng@thescoop.com"  # too long to expand: takes the narrowing path

RULE_SETS = [
    [],
    [("allow", "*@thescoop.com")],
    [("deny", "*@evil.com")],
    [("allow", "*@thescoop.com"), ("deny", "intern@thescoop.com")],
    [("deny", "*"), ("allow", "mara@thescoop.com")],
    [("allow", "mara@*"), ("allow", "*.com")],
    [("allow", "a_b%c@thescoop.com")],  # LIKE metacharacters are plain characters here
    [("deny", "l*@thescoop.com")],
    [("allow", LONG)],
]
SENDERS = [
    "mara@thescoop.com",
    "Mara+billing@TheScoop.com",
    "intern@thescoop.com",
    "eve@evil.com",
    "jane@acme.org",
    "axb%c@thescoop.com",
    "a_b%c@thescoop.com",
    LONG,
    "not an address",
]


@pytest.mark.parametrize("rules", RULE_SETS)
def test_resolution_decides_like_the_reference_gate(protege_db, scoop_manifest, rules):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    grant = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    for kind, pattern in rules:
        grant.add_rule(kind, pattern)
    for sender in SENDERS:
        expected = decide(grant.rules, sender)
        (got,) = resolve(agent, scoop_manifest, sender=sender).grants
        assert (got.admitted, got.reason) == (expected.admitted, expected.reason), sender
