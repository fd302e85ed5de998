"""protege-staging in real runs: a scripted model, the real delivery loop, the real hooks."""

import json
import mailbox
from email import message_from_bytes, policy

import attrs
import pytest

from protege import ProtegeError
from protege.admin import open_installation
from protege.models import Agent, Message, Toolkit
from protege.testing import run_reply, say, tool_call, with_plugin_settings
from protege_staging import NOTICE, staging_folder

CUSTOMER = "sam@example.org"


def with_transport(app, name):
    config = app.config
    return open_installation(
        attrs.evolve(config, mail=attrs.evolve(config.mail, transport=name)), connect=False
    )


@pytest.fixture
def staging_app(protege_app):
    return with_transport(protege_app, "staging")


@pytest.fixture
def agent(protege_db):
    agent = Agent.create(name="Scoop", address="scoop@example.test")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


def answer_by_mail(scripted_model):
    scripted_model.script(
        tool_call("send_email", mode="reply", body="Your order ships on Monday."),
        say("Answered."),
    )


def test_mail_the_agent_sends_is_kept_in_the_maildir_and_reaches_nobody(
    staging_app, agent, scripted_model
):
    answer_by_mail(scripted_model)
    run = run_reply(agent, sender=CUSTOMER, body="Where is my order?", installation=staging_app)
    assert run.status == "done"
    (kept,) = mailbox.Maildir(staging_folder(staging_app.config) / "mail", create=False)
    mail = message_from_bytes(kept.as_bytes(), policy=policy.default)
    assert mail["To"] == CUSTOMER
    assert "ships on Monday" in mail.get_body().get_content()
    sent = Message.get(Message.direction == "outbound")
    assert sent.status == "sent"  # delivered, as far as protege knows: to the Maildir
    outbox = staging_app.config.data_dir / "outbox"
    assert not outbox.exists() or not any(outbox.iterdir())


def test_the_agent_is_told_in_its_prompt_that_its_mail_is_staged(
    staging_app, agent, scripted_model
):
    answer_by_mail(scripted_model)
    run_reply(agent, sender=CUSTOMER, body="Where is my order?", installation=staging_app)
    system = scripted_model.requests[0]["messages"][0]["content"]
    assert NOTICE in system


def test_each_run_that_ends_adds_one_line_to_the_journal(staging_app, agent, scripted_model):
    answer_by_mail(scripted_model)
    first = run_reply(agent, sender=CUSTOMER, body="Where is my order?", installation=staging_app)
    scripted_model.script(say("Nothing to send."))
    second = run_reply(agent, sender=CUSTOMER, body="Thanks!", installation=staging_app)
    journal = staging_folder(staging_app.config) / "runs.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert lines == [
        {"agent": "Scoop", "run": first.id, "status": "done", "tool_calls": 1},
        {"agent": "Scoop", "run": second.id, "status": "done", "tool_calls": 0},
    ]


def test_with_another_transport_the_plugin_stays_out_of_the_way(protege_app, agent, scripted_model):
    assert protege_app.config.mail.transport != "staging"
    answer_by_mail(scripted_model)
    run_reply(agent, sender=CUSTOMER, body="Where is my order?", installation=protege_app)
    assert NOTICE not in scripted_model.requests[0]["messages"][0]["content"]
    assert not staging_folder(protege_app.config).exists()


def test_the_folder_setting_moves_mail_and_journal(protege_app, agent, scripted_model, tmp_path):
    app = with_transport(
        with_plugin_settings(protege_app, "protege-staging", {"folder": str(tmp_path / "review")}),
        "staging",
    )
    answer_by_mail(scripted_model)
    run_reply(agent, sender=CUSTOMER, body="Where is my order?", installation=app)
    assert len(mailbox.Maildir(tmp_path / "review" / "mail", create=False)) == 1
    assert (tmp_path / "review" / "runs.jsonl").is_file()


def test_a_wrong_setting_is_refused_naming_the_key(protege_app):
    with pytest.raises(ProtegeError, match=r"unknown key fodler .* @ plugins\.protege-staging"):
        with_plugin_settings(protege_app, "protege-staging", {"fodler": "x"})
