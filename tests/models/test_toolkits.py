"""Toolkits, grants and per-run resolution: the toolkits seed's scenario, through the records."""

import pytest

from protege.errors import ProtegeError
from protege.models import Agent, AgentToolkit, Toolkit
from tests.conftest import sql_run


@pytest.fixture
def sundae(protege_db):
    """Sundae from the seed: Support (no rules) and Finance (allow *@thescoop.com)."""
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    support = Toolkit.create(name="Support", member_tool_ids=["lookup_order", "check_flavor_stock"])
    finance = Toolkit.create(name="Finance", member_tool_ids=["process_refund"])
    agent.grant(support)
    agent.grant(finance).add_rule("allow", "*@thescoop.com")
    return agent


def ids_for(agent, context, manifest):
    return [entry.id for entry in agent.available_tools_for(context, manifest)]


def test_seed_scenario_gate_follows_whoever_is_talking(sundae, scoop_manifest, context_for):
    jane = context_for(sundae, sender="jane@acme.com")
    assert ids_for(sundae, jane, scoop_manifest) == ["check_flavor_stock", "lookup_order"]

    for mara in ("mara@thescoop.com", "Mara+billing@TheScoop.com"):
        assert ids_for(sundae, context_for(sundae, sender=mara), scoop_manifest) == [
            "check_flavor_stock",
            "lookup_order",
            "process_refund",
        ]

    jane_again = context_for(sundae, sender="Jane <jane@acme.com>")
    assert "process_refund" not in ids_for(sundae, jane_again, scoop_manifest)


def test_a_forged_mara_gets_only_what_the_open_gates_give(sundae, scoop_manifest, context_for):
    forged = context_for(sundae, sender="mara@thescoop.com", authenticated=False)
    assert ids_for(sundae, forged, scoop_manifest) == ["check_flavor_stock", "lookup_order"]
    grant = sundae.grant_of(Toolkit.named("Finance"))
    assert not grant.permits(sender="mara@thescoop.com", authenticated=False)


def test_report_mode_takes_the_sender_at_its_word(sundae, scoop_manifest, context_for):
    unproven = context_for(sundae, sender="mara@thescoop.com", authenticated=False, mode="report")
    assert "process_refund" in ids_for(sundae, unproven, scoop_manifest)


def test_a_deny_rule_matches_an_unauthenticated_sender(sundae, scoop_manifest, context_for):
    sundae.grant_of(Toolkit.named("Support")).add_rule("deny", "*@spam.example")
    forged = context_for(sundae, sender="bot@spam.example", authenticated=False)
    assert ids_for(sundae, forged, scoop_manifest) == []


def test_same_toolkit_on_other_terms_for_another_agent(sundae, scoop_manifest, context_for):
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    scout.grant(Toolkit.named("Finance"))
    jane = context_for(scout, sender="jane@acme.com")
    assert ids_for(scout, jane, scoop_manifest) == ["process_refund"]
    assert not AgentToolkit.get(agent=sundae, toolkit=Toolkit.named("Finance")).permits(
        "jane@acme.com"
    )


def test_grant_permits_as_in_the_seed(sundae):
    grant = sundae.grant_of(Toolkit.named("Finance"))
    assert grant.permits(sender="mara@thescoop.com")
    assert not grant.permits(sender="jane@acme.com")


def test_gates_only_add_a_deny_elsewhere_takes_nothing_away(sundae, scoop_manifest, context_for):
    refunds_too = Toolkit.create(name="Ops", member_tool_ids=["process_refund", "lookup_order"])
    sundae.grant(refunds_too).add_rule("deny", "*@thescoop.com")
    mara = context_for(sundae, sender="mara@thescoop.com")
    assert "process_refund" in ids_for(sundae, mara, scoop_manifest)  # Finance admits her
    assert "lookup_order" in ids_for(sundae, mara, scoop_manifest)  # so does Support


def test_no_toolkit_no_tool(protege_db, scoop_manifest, context_for):
    loner = Agent.create(name="Loner", address="loner@thescoop.example")
    assert loner.grants.count() == 0
    assert ids_for(loner, context_for(loner, sender="mara@thescoop.com"), scoop_manifest) == []


def test_scheduled_runs_get_only_proactive_toolkits(sundae, scoop_manifest, context_for):
    morning = context_for(sundae, responsibility="morning stock report")
    assert ids_for(sundae, morning, scoop_manifest) == []

    support = sundae.grant_of(Toolkit.named("Support"))
    support.allow_proactive = True
    support.save()
    ops = Toolkit.create(name="Operations", member_tool_ids=["send_email"])
    sundae.grant(ops, allow_proactive=True)
    assert ids_for(sundae, morning, scoop_manifest) == [
        "check_flavor_stock",
        "lookup_order",
        "send_email",
    ]


def test_scheduled_runs_ignore_sender_gates(sundae, scoop_manifest, context_for):
    finance = sundae.grant_of(Toolkit.named("Finance"))
    finance.allow_proactive = True
    finance.save()  # its allow-list has no sender to check on a scheduled run
    morning = context_for(sundae, responsibility="nightly refunds")
    assert ids_for(sundae, morning, scoop_manifest) == ["process_refund"]


def test_stale_member_ids_are_skipped(sundae, scoop_manifest, context_for):
    Toolkit.named("Support").add_tools(["deleted_tool", "shadowed_or_disabled"])
    jane = context_for(sundae, sender="jane@acme.com")
    assert ids_for(sundae, jane, scoop_manifest) == ["check_flavor_stock", "lookup_order"]
    resolution = sundae.resolve_for(jane, scoop_manifest)
    support = next(g for g in resolution.grants if g.toolkit == "Support")
    assert support.missing_ids == ("deleted_tool", "shadowed_or_disabled")


def test_catalogue_is_the_union_of_all_grants_ignoring_gates(sundae, scoop_manifest):
    assert [e.id for e in sundae.available_tools(scoop_manifest)] == [
        "check_flavor_stock",
        "lookup_order",
        "process_refund",
    ]


@pytest.mark.parametrize("scheduled", [False, True])
def test_resolution_costs_the_same_queries_however_many_toolkits(
    protege_db, scoop_manifest, context_for, scheduled
):
    counts = []
    for toolkits in (1, 10, 40):
        agent = Agent.create(name=f"Agent{toolkits}", address=f"a{toolkits}@thescoop.example")
        for n in range(toolkits):
            toolkit = Toolkit.create(name=f"T{toolkits}-{n}", member_tool_ids=["lookup_order"])
            grant = agent.grant(toolkit, allow_proactive=n % 2 == 0)
            for r in range(5):
                grant.add_rule("allow" if r else "deny", f"user{r}@thescoop.com")
        context = (
            context_for(agent, responsibility="report")
            if scheduled
            else context_for(agent, sender="user3@thescoop.com")
        )
        with sql_run() as queries:
            assert ids_for(agent, context, scoop_manifest) == ["lookup_order"]
        counts.append(len(queries))
    assert counts[0] == counts[1] == counts[2]
    assert counts[0] <= 2


def test_toolkit_names_are_unique_and_required(protege_db):
    Toolkit.create(name="Support")
    with pytest.raises(ProtegeError, match="already exists"):
        Toolkit.create(name="Support")
    with pytest.raises(ProtegeError, match="needs a name"):
        Toolkit.create(name="  ")


def test_members_must_be_tool_ids(protege_db):
    with pytest.raises(ProtegeError, match="not tool ids: 'Lookup Order'"):
        Toolkit.create(name="Bad", member_tool_ids=["lookup_order", "Lookup Order"])


def test_members_are_kept_sorted_and_unique(protege_db):
    toolkit = Toolkit.create(name="Support", member_tool_ids=["b_tool", "a_tool", "b_tool"])
    assert Toolkit.get_by_id(toolkit.id).member_tool_ids == ["a_tool", "b_tool"]
    assert toolkit.add_tools(["c_tool", "a_tool"]) == ["c_tool"]
    assert toolkit.remove_tools(["a_tool", "zzz"]) == ["a_tool"]
    assert Toolkit.get_by_id(toolkit.id).member_tool_ids == ["b_tool", "c_tool"]


def test_attaching_twice_is_a_clear_error(sundae):
    with pytest.raises(ProtegeError, match="already attached to Sundae"):
        sundae.grant(Toolkit.named("Finance"))


def test_rule_patterns_and_kinds_are_checked_on_save(sundae):
    grant = sundae.grant_of(Toolkit.named("Support"))
    with pytest.raises(ProtegeError, match="not a rule pattern"):
        grant.add_rule("allow", "*@*.com")
    with pytest.raises(ProtegeError, match="allow or deny"):
        grant.add_rule("maybe", "*@thescoop.com")
    assert grant.rules.count() == 0


def test_deleting_a_toolkit_detaches_it(sundae):
    Toolkit.named("Finance").delete_instance(recursive=True)
    assert [g.toolkit.name for g in sundae.grants] == ["Support"]
