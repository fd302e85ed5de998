import logging
import threading

import attrs
import pytest

from protege import RunContext
from protege.context import Call, CallBook, CallOver, running


def make(**overrides):
    values = {
        "agent": "sundae",
        "message": "inbound",
        "mail_queue": lambda mail, attachments=(), *, call: ("queued", mail, attachments, call),
        "config": object(),
        "logger": logging.getLogger("test"),
        "correlation_id": "run-1",
    }
    values.update(overrides)
    return RunContext(**values)


def test_has_the_members_of_the_contract_the_call_the_cancellation_signal_and_the_mail_scope():
    assert [a.name for a in attrs.fields(RunContext)] == [
        "agent",
        "message",
        "responsibility",
        "_mail_queue",
        "config",
        "logger",
        "correlation_id",
        "cancellation",
        "whole_archive",
        "call",
    ]
    public = {name for name in dir(make()) if not name.startswith("_")}
    fields = {a.name for a in attrs.fields(RunContext) if not a.name.startswith("_")}
    assert public == fields | {"cancelled", "mail_scope", "queue_mail", "deliver"}


def test_cancelled_follows_the_runs_cancellation():
    context = make()
    assert context.cancelled is False
    context.cancellation.set()
    assert context.cancelled is True


def test_is_frozen():
    context = make()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        context.agent = "scout"  # type: ignore[misc]


def test_queue_mail_hands_the_mail_on_with_the_call_the_context_belongs_to():
    call = Call(id="call_1", tool="send_email")
    context = attrs.evolve(make(), call=call)
    assert context.queue_mail("mail", attachments=[1]) == ("queued", "mail", [1], call)
    assert make().queue_mail("mail") == ("queued", "mail", (), None)


def test_deliver_is_the_deprecated_name_of_queue_mail():
    with pytest.warns(
        DeprecationWarning, match=r"RunContext.deliver is deprecated: call context\.queue_mail"
    ):
        assert make().deliver("mail", [1]) == ("queued", "mail", [1], None)


def test_a_call_runs_until_it_is_ended():
    call = CallBook().issue("call_1", "send_email")
    assert running(call) is call
    call.end()
    assert not call.running
    with pytest.raises(CallOver) as refused:
        running(call)
    assert str(refused.value) == (
        "mail can be queued only while the tool call that queues it is running; "
        "call call_1 to send_email has ended (it returned, or timed out)"
    )


def test_a_context_of_no_call_cannot_queue_mail():
    with pytest.raises(CallOver, match="this context belongs to no tool call"):
        running(None)


def test_two_calls_with_one_id_are_two_calls():
    book = CallBook()
    first, second = book.issue("call_1", "t"), book.issue("call_1", "t")
    first.end()
    assert first != second
    assert second.running


def test_a_call_made_by_hand_or_in_another_book_cannot_queue_mail():
    book, other = CallBook(), CallBook()
    forged, elsewhere = Call(id="call_1", tool="t"), other.issue("call_1", "t")
    assert forged.running
    assert elsewhere.running
    for call in (forged, elsewhere):
        with pytest.raises(CallOver, match="call call_1 to t is not one protege issued"):
            book.running(call)
    with pytest.raises(CallOver, match="is not one protege issued"):
        running(forged)
    assert running(elsewhere) is elsewhere  # issued, by a book of its own


def test_a_call_ends_only_once_the_mail_being_queued_for_it_is_written():
    book = CallBook()
    call = book.issue("call_1", "t")
    writing, ended = threading.Event(), threading.Event()
    seen = []

    def end():
        writing.wait(30)
        call.end()
        ended.set()

    ender = threading.Thread(target=end)
    ender.start()
    with book.queueing(call) as asking:
        writing.set()
        # end() is under way, and cannot get past the mail being written.
        seen.append((asking.running, ended.is_set()))
    ender.join(30)
    assert seen == [(True, False)]
    assert not call.running
    with pytest.raises(CallOver, match="has ended"), book.queueing(call):
        pass


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
