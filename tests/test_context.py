import logging

import attrs
import pytest

from protege import RunContext


def make(**overrides):
    values = {
        "agent": "sundae",
        "message": "inbound",
        "deliver": lambda mail, attachments=(): ("sent", mail, attachments),
        "config": object(),
        "logger": logging.getLogger("test"),
        "correlation_id": "run-1",
    }
    values.update(overrides)
    return RunContext(**values)


def test_has_the_seven_members_of_the_contract_the_cancellation_signal_and_the_mail_scope():
    assert [a.name for a in attrs.fields(RunContext)] == [
        "agent",
        "message",
        "responsibility",
        "deliver",
        "config",
        "logger",
        "correlation_id",
        "cancellation",
        "whole_archive",
    ]
    public = {name for name in dir(make()) if not name.startswith("_")}
    assert public == {a.name for a in attrs.fields(RunContext)} | {"cancelled", "mail_scope"}


def test_cancelled_follows_the_runs_cancellation():
    context = make()
    assert context.cancelled is False
    context.cancellation.set()
    assert context.cancelled is True


def test_is_frozen():
    context = make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        context.agent = "scout"  # type: ignore[misc]


def test_deliver_is_called_like_a_method():
    assert make().deliver("mail", attachments=[1]) == ("sent", "mail", [1])


@pytest.mark.parametrize(
    ("message", "responsibility"), [(None, None), ("inbound", "morning report")]
)
def test_needs_exactly_one_of_message_and_responsibility(message, responsibility):
    with pytest.raises(ValueError, match="exactly one of message"):
        make(message=message, responsibility=responsibility)


def test_a_scheduled_run_has_a_responsibility_and_no_message():
    context = make(message=None, responsibility="morning report")
    assert context.message is None
    assert context.responsibility == "morning report"
