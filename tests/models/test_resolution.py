"""The database-side gate used by resolution agrees with the reference gate, case by case."""

import pytest

from protege.access import decide
from protege.models import Agent, Toolkit
from protege.models.resolution import explain, resolve
from tests.conftest import sql_run

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


@pytest.mark.parametrize("authenticated", [True, False])
@pytest.mark.parametrize("rules", RULE_SETS)
def test_resolution_decides_like_the_reference_gate(
    protege_db, scoop_manifest, rules, authenticated
):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    grant = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    for kind, pattern in rules:
        grant.add_rule(kind, pattern)
    for sender in SENDERS:
        expected = decide(grant.rules, sender, authenticated=authenticated)
        (got,) = resolve(agent, scoop_manifest, sender=sender, authenticated=authenticated).grants
        assert (got.admitted, got.reason) == (expected.admitted, expected.reason), sender


@pytest.mark.parametrize("authenticated", [True, False])
@pytest.mark.parametrize("rules", RULE_SETS)
def test_a_runs_tools_follow_the_same_decisions_as_the_explanation(
    protege_db, scoop_manifest, rules, authenticated
):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    grant = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    open_kit = Toolkit.create(name="Support", member_tool_ids=["lookup_order"])
    agent.grant(open_kit)
    for kind, pattern in rules:
        grant.add_rule(kind, pattern)
    for sender in SENDERS:
        admitted = decide(grant.rules, sender, authenticated=authenticated).admitted
        expected = ["lookup_order", *(["process_refund"] if admitted else [])]
        how = {"sender": sender, "authenticated": authenticated}
        assert resolve(agent, scoop_manifest, **how).tool_ids == expected, sender
        assert explain(agent, scoop_manifest, **how).tool_ids == expected, sender


def test_scheduled_runs_get_only_proactive_grants(protege_db, scoop_manifest):
    agent = Agent.create(name="Scout", address="scout@thescoop.example")
    agent.grant(
        Toolkit.create(name="Operations", member_tool_ids=["check_flavor_stock"]),
        allow_proactive=True,
    )
    agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    resolution = resolve(agent, scoop_manifest, scheduled=True)
    assert resolution.tool_ids == ["check_flavor_stock"]
    assert [(g.toolkit, g.admitted) for g in resolution.grants] == [
        ("Finance", False),
        ("Operations", True),
    ]


def test_a_run_reads_no_decisions_until_asked(protege_db, scoop_manifest):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Support", member_tool_ids=["lookup_order"]))
    with sql_run() as queries:
        resolution = resolve(agent, scoop_manifest, sender="jane@acme.com")
        assert resolution.tool_ids == ["lookup_order"]
        for_the_run = len(queries)
        (support,) = resolution.grants
        (again,) = resolution.grants
    assert for_the_run == 1  # the grants and required approvals; no gate has rules
    assert len(queries) == 3  # the explanation (grants, requirements), read once when asked
    assert (support.toolkit, support.admitted, support.reason) == (
        "Support",
        True,
        "no rules: open to every sender",
    )
    assert again is support


@pytest.mark.parametrize("explained", [False, True])
def test_an_approval_is_not_undone_by_another_grant_of_the_same_tool(
    protege_db, scoop_manifest, explained
):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    finance = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    finance.require_approval(["*@thescoop.com"], ["mara@thescoop.com"])
    # All Tools, or any toolkit that also holds the tool, gives it without asking.
    agent.grant(Toolkit.create(name="Everything", member_tool_ids=["process_refund"]))
    how = resolve if not explained else explain
    found = how(agent, scoop_manifest, sender="jane@acme.com", authenticated=True)
    assert found.tool_ids == ["process_refund"]
    assert list(found.approvals) == ["process_refund"]
    assert found.approvals["process_refund"].approvers == ("*@thescoop.com",)


def _manifest_with_a_tool_that_requires_approval(scoop_manifest):
    from protege.registry import Manifest, Origin, ToolEntry
    from protege.tool import Tool

    class WireTransferTool(Tool):
        description = "Sends money."
        requires_approval = True

        def use(self, context):
            return self.success()

    wire = ToolEntry(WireTransferTool, Origin.HOST, "scoop")
    return Manifest(tools=tuple(sorted((*scoop_manifest.tools, wire), key=lambda e: e.id)))


@pytest.mark.parametrize("explained", [False, True])
def test_a_tool_that_requires_approval_is_withheld_when_nobody_may_approve_it(
    protege_db, scoop_manifest, explained
):
    from protege.models.resolution import unapprovable

    manifest = _manifest_with_a_tool_that_requires_approval(scoop_manifest)
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Payments", member_tool_ids=["wire_transfer", "lookup_order"]))
    how = resolve if not explained else explain
    found = how(agent, manifest, sender="jane@acme.com", authenticated=True)
    assert found.tool_ids == ["lookup_order"]
    assert "nobody approves it on Sundae" in found.withheld["wire_transfer"]
    assert unapprovable(agent, manifest) == [f"Sundae: {found.withheld['wire_transfer']}"]
    # Once the operator names approvers for it on Sundae, it is offered, and waits.
    agent.require_approval("wire_transfer", ["*@thescoop.com"], ["mara@thescoop.com"])
    found = how(agent, manifest, sender="jane@acme.com", authenticated=True)
    assert found.tool_ids == ["lookup_order", "wire_transfer"]
    assert found.approvals["wire_transfer"].approvers == ("*@thescoop.com",)
    assert unapprovable(agent, manifest) == []


def test_scheduled_runs_wait_for_a_required_approval_too(protege_db, scoop_manifest):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(
        Toolkit.create(name="All", member_tool_ids=["process_refund"]), allow_proactive=True
    )
    agent.require_approval("process_refund", ["mara@thescoop.com"])
    found = resolve(agent, scoop_manifest, scheduled=True)
    assert found.tool_ids == ["process_refund"]
    assert found.approvals["process_refund"].notify == ("mara@thescoop.com",)


def test_a_required_approval_holds_for_a_sender_too_long_for_the_index(protege_db, scoop_manifest):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="All", member_tool_ids=["process_refund"]))
    agent.require_approval("process_refund", ["mara@thescoop.com"])
    sender = "j" * 60 + "@" + "a" * 60 + ".example.com"
    found = resolve(agent, scoop_manifest, sender=sender, authenticated=True)
    assert list(found.approvals) == ["process_refund"]


def test_a_required_approval_is_not_listed_as_skippable(protege_db, scoop_manifest):
    from protege.models.resolution import ApprovalBypass, bypassed_approvals

    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    finance = agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"]))
    finance.require_approval(["*@thescoop.com"], ["mara@thescoop.com"])
    agent.grant(Toolkit.create(name="Everything", member_tool_ids=["process_refund"]))
    assert bypassed_approvals(agent, scoop_manifest) == [
        ApprovalBypass("process_refund", "Finance", "Everything")
    ]
    agent.require_approval("process_refund", ["*@thescoop.com"], ["mara@thescoop.com"])
    assert bypassed_approvals(agent, scoop_manifest) == []


@pytest.mark.parametrize("explained", [False, True])
@pytest.mark.parametrize("sender", ["mara@thescoop.com", LONG, "jane@acme.org", "not an address"])
def test_only_an_admitting_grant_opens_the_whole_archive_to_its_tools(
    protege_db, scoop_manifest, explained, sender
):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Support", member_tool_ids=["lookup_order"]))
    staff = agent.grant(Toolkit.create(name="Staff", member_tool_ids=["check_flavor_stock"]))
    staff.add_rule("allow", "*@thescoop.com")
    staff.add_rule("allow", LONG)
    staff.whole_archive = True
    staff.save()
    how = resolve if not explained else explain
    found = how(agent, scoop_manifest, sender=sender, authenticated=True)
    admitted = sender in ("mara@thescoop.com", LONG)
    assert found.whole_archive == (frozenset({"check_flavor_stock"}) if admitted else frozenset())
    assert how(agent, scoop_manifest, scheduled=True).whole_archive == frozenset()
