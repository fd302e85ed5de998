import logging

import pytest

from protege.errors import ProtegeError
from protege.models import Agent, Toolkit
from protege.toolkits import sync


def test_new_agent_is_granted_default_tools_with_an_open_gate(protege_db, scoop_manifest):
    sync(scoop_manifest)
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    (grant,) = sundae.grants
    assert grant.toolkit == Toolkit.default_tools()
    assert grant.rules.count() == 0
    assert not grant.allow_proactive
    assert grant.permits("anyone@anywhere.org")


def test_agent_created_before_sync_has_no_toolkits_and_a_warning(protege_db, caplog):
    with caplog.at_level(logging.WARNING, logger="protege.models"):
        early = Agent.create(name="Early", address="early@thescoop.example")
    assert early.grants.count() == 0
    assert "run `protege sync`" in caplog.text


def test_saving_an_existing_agent_grants_nothing_more(protege_db, scoop_manifest):
    sync(scoop_manifest)
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    sundae.instructions = "Be kind."
    sundae.save()
    assert sundae.grants.count() == 1


def test_address_is_stored_bare_and_lowercased(protege_db):
    agent = Agent.create(name="Sundae", address="Sundae <Sundae@TheScoop.example>")
    assert agent.address == "sundae@thescoop.example"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "", "address": "a@b.example"}, "needs a name"),
        ({"name": "X", "address": "not-an-address"}, "is not an email address"),
        ({"name": "Sundae", "address": "other@b.example"}, "name 'Sundae' already exists"),
        ({"name": "Other", "address": "SUNDAE@thescoop.example"}, "address"),
    ],
)
def test_invalid_or_duplicate_agents_are_clear_errors(protege_db, fields, message):
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    with pytest.raises(ProtegeError, match=message):
        Agent.create(**fields)
    assert Agent.select().count() == 1


def test_access_rules_decide_who_may_reach_the_agent(protege_db):
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    assert scout.admits("jane@acme.com").admitted  # no rules: anyone
    scout.add_access_rule("allow", "*@thescoop.com")
    assert scout.admits("Mara+ops@TheScoop.com").admitted
    refused = scout.admits("jane@acme.com")
    assert not refused.admitted
    assert refused.reason == "no allow rule matches (allow-list)"


def test_unknown_agent_is_a_clear_error(protege_db):
    with pytest.raises(ProtegeError, match="no agent named 'Nobody'"):
        Agent.named("Nobody")


def test_deleting_an_agent_removes_its_grants_and_rules(protege_db, scoop_manifest):
    sync(scoop_manifest)
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    finance = Toolkit.create(name="Finance", member_tool_ids=["process_refund"])
    sundae.grant(finance).add_rule("allow", "*@thescoop.com")
    sundae.add_access_rule("deny", "*@evil.com")
    sundae.delete_instance(recursive=True)
    assert finance.grants.count() == 0
    assert Toolkit.named("Finance") == finance


def test_a_failed_edit_leaves_the_agent_as_it_was(protege_db):
    Agent.create(name="Scout", address="scout@thescoop.example")
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example", instructions="Hi.")
    with pytest.raises(ProtegeError, match=r"an agent with address 'scout@thescoop\.example'"):
        sundae.edit(name="Sundae Bot", address="Scout@TheScoop.example", instructions="New.")
    assert (sundae.name, sundae.address, sundae.instructions) == (
        "Sundae",
        "sundae@thescoop.example",
        "Hi.",
    )
    assert sundae.edit(name="Sundae", instructions="New.") == ["instructions"]
    assert Agent.get_by_id(sundae.id).instructions == "New."


def test_an_archived_agents_address_is_still_taken_and_said_so(protege_db):
    Agent.create(name="Scout", address="scout@thescoop.example").archive()
    with pytest.raises(ProtegeError, match=r"already exists \(archived\)"):
        Agent.create(name="Scout 2", address="scout@thescoop.example")


def test_an_address_reaching_another_agents_mailbox_is_refused(protege_db):
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    scout = Agent.create(name="Scout", address="scout@thescoop.example")
    with pytest.raises(ProtegeError, match="is the same mailbox as Sundae's address"):
        scout.edit(address="Sundae+Orders@TheScoop.example")
    with pytest.raises(ProtegeError, match="is the same mailbox as Sundae's address"):
        Agent.create(name="Orders", address="sundae+orders@thescoop.example")
    assert Agent.get_by_id(scout.id).address == "scout@thescoop.example"
    assert scout.edit(address="scout+desk@thescoop.example") == ["address"]  # its own, tagged
