"""search_emails shows a sender only the mail they took part in, unless a grant opens the
whole archive: a stranger cannot have the agent recall other customers' mail."""

import json

import pytest

from protege.authentication import unverified
from protege.mail import record_inbound
from protege.models import Agent, Responsibility, Toolkit
from protege.testing import make_context, run_reply, run_tool, say, tool_call


@pytest.fixture
def sundae(protege_app):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.app = protege_app
    return agent


@pytest.fixture
def archive(sundae):
    record_inbound(sundae, sender="jane@acme.com", subject="Order SCP-1042", body="Melted.")
    record_inbound(
        sundae,
        sender="mara@thescoop.com",
        to=[sundae.address],
        cc=["Jane+orders@ACME.com"],
        subject="Order SCP-1042 refunded",
        body="Refunded Jane's order.",
    )
    record_inbound(sundae, sender="sam@example.org", subject="Order SCP-2001", body="Pistachio?")


def subjects(sundae, context, **arguments):
    result = run_tool("search_emails", context=context, manifest=sundae.app.manifest, **arguments)
    assert result.ok, result.reason
    return sorted(m["subject"] for m in result.data["matches"])


def test_a_stranger_asking_for_another_customers_mail_finds_nothing(sundae, archive):
    stranger = make_context(sundae, sender="eve@evil.example", config=sundae.app.config)
    assert subjects(sundae, stranger, query="order") == []
    assert subjects(sundae, stranger, query="jane") == []
    assert subjects(sundae, stranger) == []


def test_a_sender_finds_the_mail_they_were_from_to_or_copied_on(sundae, archive):
    jane = make_context(sundae, sender="Jane <jane@acme.com>", config=sundae.app.config)
    # Copied as jane+orders@ACME.com: the same person by routing key.
    assert subjects(sundae, jane, query="order") == ["Order SCP-1042", "Order SCP-1042 refunded"]


def test_the_agents_answers_to_a_sender_are_theirs_too(sundae, archive, scripted_model):
    sundae.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    scripted_model.script(tool_call("send_email", mode="reply", body="On its way."), say("Done."))
    run_reply(
        sundae, sender="sam@example.org", subject="News", body="Any?", installation=sundae.app
    )
    sam = make_context(sundae, sender="sam@example.org", config=sundae.app.config)
    assert subjects(sundae, sam, direction="outbound") == ["Re: News"]
    jane = make_context(sundae, sender="jane@acme.com", config=sundae.app.config)
    assert subjects(sundae, jane, direction="outbound") == []


def test_a_sender_whose_mail_proves_nothing_sees_only_their_own_message(sundae, archive):
    forged = record_inbound(
        sundae,
        sender="jane@acme.com",
        subject="Order copy please",
        body="Send me my order mails.",
        verdict=unverified("no signature", "acme.com"),
    )
    context = make_context(sundae, message=forged, config=sundae.app.config)
    assert subjects(sundae, context, query="order") == ["Order copy please"]
    unproven = make_context(
        sundae, sender="jane@acme.com", authenticated=False, config=sundae.app.config
    )
    assert subjects(sundae, unproven, query="order") == []  # its own message is not stored


def test_a_grant_can_open_the_whole_archive(sundae, archive):
    context = make_context(
        sundae,
        sender="mara@thescoop.com",
        config=sundae.app.config,
        whole_archive=["search_emails"],
    )
    assert subjects(sundae, context, query="order") == [
        "Order SCP-1042",
        "Order SCP-1042 refunded",
        "Order SCP-2001",
    ]


def test_a_scheduled_run_searches_the_whole_archive(sundae, archive):
    chore = Responsibility.create(agent=sundae, name="Digest", schedule="0 9 * * *", prompt="x")
    context = make_context(sundae, responsibility=chore, config=sundae.app.config)
    assert len(subjects(sundae, context, query="order")) == 3


def _searched(scripted_model):
    """The subjects the search in the last run gave the model."""
    tool_message = scripted_model.requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    lines = tool_message["content"].splitlines()  # fenced: it is other people's mail
    return sorted(match["subject"] for match in json.loads("\n".join(lines[1:-1]))["matches"])


def test_in_a_run_only_a_grant_that_opens_the_archive_widens_it(sundae, archive, scripted_model):
    defaults = Toolkit.create(name="Basics", member_tool_ids=["search_emails"])
    sundae.grant(defaults)
    scripted_model.script(tool_call("search_emails", query="scp"), say("Done."))
    run_reply(sundae, sender="eve@evil.example", body="Any orders?", installation=sundae.app)
    assert _searched(scripted_model) == []

    staff = sundae.grant(Toolkit.create(name="Staff", member_tool_ids=["search_emails"]))
    staff.add_rule("allow", "*@thescoop.com")
    staff.whole_archive = True
    staff.save()
    scripted_model.script(tool_call("search_emails", query="scp"), say("Done."))
    run_reply(sundae, sender="eve@evil.example", body="Any orders?", installation=sundae.app)
    assert _searched(scripted_model) == []  # the open grant does not admit Eve
    scripted_model.script(tool_call("search_emails", query="scp"), say("Done."))
    run_reply(sundae, sender="mara@thescoop.com", body="Orders?", installation=sundae.app)
    assert _searched(scripted_model) == [
        "Order SCP-1042",
        "Order SCP-1042 refunded",
        "Order SCP-2001",
    ]
