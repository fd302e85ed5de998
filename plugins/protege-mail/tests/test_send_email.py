import pytest

from protege.mail import record_inbound
from protege.models import Agent, Responsibility
from protege.testing import make_context, run_tool
from protege_mail.send import reply_subject

AGENT = "sundae@thescoop.example"


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address=AGENT)


def inbound_message(sundae, **fields):
    fields.setdefault("sender", "Jane <jane@acme.com>")
    fields.setdefault("body", "Hello")
    fields.setdefault("subject", "Melted")
    return record_inbound(sundae, **fields)


class Recorder:
    """Stands in for the gateway: records each delivery and says it was sent."""

    def __init__(self):
        self.sent = []

    def __call__(self, mail, attachments=()):
        self.sent.append((mail, list(attachments)))
        return {"status": "sent", "message_id": "<out@thescoop.example>", **mail}


def send(sundae, inbound=None, responsibility=None, **arguments):
    recorder = Recorder()
    context = make_context(sundae, message=inbound, responsibility=responsibility, deliver=recorder)
    result = run_tool("send_email", context=context, **arguments)
    return result, recorder.sent


@pytest.mark.parametrize(
    ("headers", "added", "to", "cc", "bcc"),
    [
        # the sender and the other To recipients go to To; the agent is dropped
        ({"to": [AGENT, "mara@thescoop.com"]}, {}, ["jane@acme.com", "mara@thescoop.com"], [], []),
        # Reply-To replaces the sender
        ({"reply_to": "orders@acme.com"}, {}, ["orders@acme.com"], [], []),
        # the original Cc stays in Cc, the agent dropped from it too
        ({"cc": ["Sam@Example.org", AGENT]}, {}, ["jane@acme.com"], ["Sam@Example.org"], []),
        # an empty Cc
        ({"cc": []}, {}, ["jane@acme.com"], [], []),
        # duplicates by routing key (case, +tags) are kept once, To first
        (
            {"to": [AGENT, "JANE+x@acme.com"], "cc": ["jane@ACME.com", "mara@thescoop.com"]},
            {"cc": ["Mara+billing@thescoop.com"], "bcc": ["jane@acme.com"]},
            ["jane@acme.com"],
            ["mara@thescoop.com"],
            [],
        ),
        # the agent's own address with a tag is still the agent
        ({"to": ["Sundae+orders@TheScoop.example"]}, {}, ["jane@acme.com"], [], []),
        # the agent may add people
        (
            {},
            {"to": ["mara@thescoop.com"], "bcc": ["audit@thescoop.com"]},
            ["jane@acme.com", "mara@thescoop.com"],
            [],
            ["audit@thescoop.com"],
        ),
    ],
)
def test_reply_all(sundae, headers, added, to, cc, bcc):
    inbound = inbound_message(sundae, **headers)
    result, sent = send(sundae, inbound, mode="reply", body="Thanks!", **added)
    assert result.ok, result.reason
    ((mail, _),) = sent
    assert (mail["to"], mail["cc"], mail["bcc"]) == (to, cc, bcc)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("Melted", "Re: Melted"),
        ("Re: Melted", "Re: Melted"),
        ("RE: re: Melted", "Re: Melted"),
        ("Re[2]: Melted", "Re: Melted"),
        ("", "Re: "),
        ("Regarding the order", "Re: Regarding the order"),
    ],
)
def test_reply_subject_has_exactly_one_re(subject, expected):
    assert reply_subject(subject) == expected


def test_reply_threads_under_the_inbound_message(sundae):
    inbound = inbound_message(
        sundae,
        message_id="<m2@acme.com>",
        references=["<m0@x>", "<m1@x>"],
        in_reply_to="<m1@x>",
    )
    _, sent = send(sundae, inbound, mode="reply", body="Hi")
    ((mail, _),) = sent
    assert mail["subject"] == "Re: Melted"
    assert mail["in_reply_to"] == "<m2@acme.com>"
    assert mail["references"] == ["<m0@x>", "<m1@x>", "<m2@acme.com>"]


def test_new_mode_needs_to_and_subject_and_sets_no_threading(sundae):
    result, sent = send(
        sundae,
        inbound_message(sundae),
        mode="new",
        to=["sam@example.org"],
        subject="Stock report",
        body="All good.",
    )
    assert result.ok
    ((mail, _),) = sent
    assert mail == {
        "to": ["sam@example.org"],
        "cc": [],
        "bcc": [],
        "subject": "Stock report",
        "body": "All good.",
        "loop": 0,  # the loop count of the mail the run answers
    }
    for missing in ({"to": ["sam@example.org"]}, {"subject": "Hi"}):
        result, sent = send(sundae, inbound_message(sundae), mode="new", body="x", **missing)
        assert result.reason == 'mode "new" needs to and subject'
        assert sent == []


def test_reply_on_a_scheduled_run_is_a_failure_pointing_to_new(sundae):
    duty = Responsibility(agent=sundae, name="report", prompt="Report.")
    result, sent = send(sundae, responsibility=duty, mode="reply", body="x")
    assert result.reason == (
        'a scheduled run has no message to reply to: use mode "new" with to and subject'
    )
    assert sent == []


def test_from_cannot_be_chosen_by_the_model(sundae):
    result, sent = send(
        sundae, inbound_message(sundae), mode="reply", body="x", **{"from": "ceo@thescoop.example"}
    )
    assert not result.ok
    assert "'from' was unexpected" in result.reason
    assert sent == []


def test_body_is_required(sundae):
    result, _ = send(sundae, inbound_message(sundae), mode="reply")
    assert "'body' is a required property" in result.reason


def test_attachments_must_be_files_the_agent_may_see(sundae, tmp_path):
    from protege import blobs

    own = blobs.store(b"x", filename="mine.txt", agent=sundae, data_dir=tmp_path)
    other = Agent.create(name="Scout", address="scout@thescoop.example")
    theirs = blobs.store(b"y", filename="theirs.txt", agent=other, data_dir=tmp_path)
    result, sent = send(
        sundae, inbound_message(sundae), mode="reply", body="x", attachments=[own.id]
    )
    assert result.ok
    assert [blob.id for blob in sent[0][1]] == [own.id]
    result, sent = send(
        sundae, inbound_message(sundae), mode="reply", body="x", attachments=[theirs.id]
    )
    assert result.reason == f"there is no file {theirs.id} that you may attach"
    assert sent == []


def test_a_gateway_failure_becomes_a_failure(sundae):
    def failing(mail, attachments=()):
        return {"status": "failed", "error": "SMTP 554: rejected"}

    context = make_context(sundae, message=inbound_message(sundae), deliver=failing)
    result = run_tool("send_email", context=context, mode="reply", body="x")
    assert result.reason == "the mail was not sent: SMTP 554: rejected"
