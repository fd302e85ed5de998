"""Mail that goes out cannot be hijacked: whatever the inbound mail or the model put in a
subject, a name, an address or an id, the headers written parse to exactly what protege
meant, and anything else is refused before a transport sees it."""

import email
from email import policy

import pytest

from protege import blobs
from protege.delivery import send_pending
from protege.gateway.compose import Outgoing, difference, header_text, render
from protege.gateway.outbound import DeliveryRefused, queue_mail
from protege.mail import record_inbound
from protege.models import Agent, Message
from protege.models.messages import SYNTHETIC_ID
from protege.testing import make_context, run_tool

INJECTED = "=?utf-8?q?Hi=0D=0AReply-To:_thief@evil.example=0D=0A=0D=0Abody?="
FLATTENED = "Hi Reply-To: thief@evil.example body"
REPLY_HEADERS = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "In-Reply-To",
    "References",
    "X-Protege-Loop",
    "Content-Type",
    "Content-Transfer-Encoding",
    "MIME-Version",
]


def outbox(config):
    """The mail in the outbox, once the delivery loop has sent what was queued."""
    send_pending(config)
    return sorted((config.data_dir / "outbox").glob("*.eml"))


def sent_mail(config):
    (path,) = outbox(config)
    raw = path.read_bytes()
    return raw, email.message_from_bytes(raw, policy=policy.default)


def text_of(parsed):
    """The body as sent, with the CR LF line ends of the wire read as newlines."""
    return parsed.get_content().replace("\r\n", "\n")


def tool_context(agent, config, message=None, **options):
    """A run context whose queue_mail is the real gateway, writing to ``config``'s outbox."""

    def send(mail, attachments=()):
        return queue_mail(agent=agent, run=None, config=config, mail=mail, attachments=attachments)

    subject = {"message": message} if message is not None else {"sender": "mara@thescoop.com"}
    return make_context(agent, config=config, queue_mail=send, **subject, **options)


def assert_no_injected_header(raw, parsed):
    assert "Reply-To" not in parsed
    assert "Bcc" not in parsed
    header_block = raw.split(b"\r\n\r\n", 1)[0]
    assert not any(line.lower().startswith(b"reply-to") for line in header_block.splitlines())


def test_reply_to_injected_subject_adds_no_header(sundae, config, protege_app):
    inbound = record_inbound(
        sundae,
        sender="Jane <jane@acme.com>",
        subject=INJECTED,
        body="?",
        message_id="<j1@acme.com>",
    )
    result = run_tool(
        "send_email",
        context=tool_context(sundae, config, inbound),
        mode="reply",
        body="Thanks.",
        manifest=protege_app.manifest,
    )
    assert result.ok, result.reason
    raw, sent = sent_mail(config)
    assert_no_injected_header(raw, sent)
    assert list(sent.keys()) == REPLY_HEADERS
    assert sent["Subject"] == f"Re: {FLATTENED}"
    assert [a.addr_spec for a in sent["To"].addresses] == ["jane@acme.com"]
    assert text_of(sent) == "Thanks.\n"
    assert Message.get(Message.message_id == sent["Message-ID"]).subject == f"Re: {FLATTENED}"


def test_new_mail_with_injected_subject_adds_no_header(sundae, config, protege_app):
    result = run_tool(
        "send_email",
        context=tool_context(sundae, config),
        mode="new",
        to=["jane@acme.com"],
        subject=f"Report {INJECTED}\r\nBcc: thief@evil.example",
        body="Numbers.\n",
        manifest=protege_app.manifest,
    )
    assert result.ok, result.reason
    raw, sent = sent_mail(config)
    assert_no_injected_header(raw, sent)
    assert sent["Subject"] == f"Report {FLATTENED} Bcc: thief@evil.example"
    assert text_of(sent) == "Numbers.\n"


@pytest.mark.parametrize(
    "name",
    ["Sundae\r\nBcc: thief@evil.example", "=?utf-8?q?Sundae=0D=0ABcc:_thief@evil.example?="],
)
def test_a_display_name_cannot_add_a_header(protege_db, config, name):
    agent = Agent.create(name=name, address="sundae@thescoop.example")
    queue_mail(agent=agent, run=None, config=config, mail={"to": ["j@acme.com"], "body": "b"})
    raw, sent = sent_mail(config)
    assert_no_injected_header(raw, sent)
    (sender,) = sent["From"].addresses
    assert (sender.display_name, sender.addr_spec) == (
        "Sundae Bcc: thief@evil.example",
        "sundae@thescoop.example",
    )


@pytest.mark.parametrize(
    "address",
    [
        "Jane\r\nBcc: thief@evil.example <jane@acme.com>",
        "jane@acme.com\r\nBcc: thief@evil.example",
        "=?utf-8?q?jane=0D=0ABcc:_thief?=@evil.example",
        "jane@acme.com\x00",
    ],
)
def test_an_address_with_line_breaks_or_encoded_words_is_refused(sundae, config, address):
    with pytest.raises(DeliveryRefused, match="is not an email address"):
        queue_mail(agent=sundae, run=None, config=config, mail={"cc": [address], "body": "b"})
    assert not outbox(config)
    assert Message.select().count() == 0


def test_hostile_carried_over_addresses_and_ids_are_left_out_of_a_reply(
    sundae, config, protege_app
):
    inbound = record_inbound(
        sundae,
        sender="jane@acme.com",
        body="?",
        cc=["=?utf-8?q?x=0D=0ABcc:_thief?=@evil.example", "mara@thescoop.com"],
        message_id="<=?utf-8?q?a=0D=0ABcc:_thief@evil.example?=@evil.example>",
        references=["<root@acme.com>", "<bad\x01@acme.com>"],
    )
    result = run_tool(
        "send_email",
        context=tool_context(sundae, config, inbound),
        mode="reply",
        body="Hi",
        manifest=protege_app.manifest,
    )
    assert result.ok, result.reason
    raw, sent = sent_mail(config)
    assert_no_injected_header(raw, sent)
    assert [a.addr_spec for a in sent["Cc"].addresses] == ["mara@thescoop.com"]
    assert "In-Reply-To" not in sent
    assert sent["References"] == "<root@acme.com>"


def test_an_attachment_name_cannot_add_a_header(sundae, config):
    blob = blobs.store(
        b"x", filename="r.txt", content_type="text/plain", agent=sundae, data_dir=config.data_dir
    )
    # The blob store cleans names itself; the gateway must not rely on it.
    blob.filename = "=?utf-8?q?r.txt=0D=0AX-Evil:_1?="
    blob.save()
    mail = {"to": ["j@acme.com"], "body": "b"}
    queue_mail(agent=sundae, run=None, config=config, mail=mail, attachments=[blob])
    _, sent = sent_mail(config)
    (attached,) = sent.iter_attachments()
    assert "X-Evil" not in attached
    assert attached.get_filename() == "r.txt X-Evil: 1"


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        (INJECTED, FLATTENED),
        ("a\x00b\x1bc\x7fd\x85e\u2028f\u2029g", "a b c d e f g"),
        ("  spaced \t out  ", "spaced out"),
        # encoded twice: decoded once, and what is left can never be decoded again
        ("=?utf-8?q?=3D=3Futf-8=3Fq=3Fx=3D0D=3D0Ay=3F=3D?=", "= ?utf-8?q?x=0D=0Ay?="),
        ("Café crème", "Café crème"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
    ],
)
def test_header_text_is_one_plain_line(text, clean):
    assert header_text(text) == clean


def outgoing(**changes):
    fields = {
        "sender_name": "Sundae",
        "sender": "sundae@thescoop.example",
        "to": ("jane@acme.com",),
        "cc": (),
        "subject": "Hello",
        "date": "Mon, 02 Mar 2026 10:00:00 -0000",
        "message_id": "<m1@thescoop.example>",
        "in_reply_to": None,
        "references": (),
        "loop": 1,
        "body": "Hi.\n",
    }
    return Outgoing(**{**fields, **changes})


def test_rendered_mail_parses_back_to_what_was_meant():
    meant = outgoing(subject="Ünïcode " + "long " * 40, cc=("mara@thescoop.com",))
    assert difference(render(meant), meant) is None


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (
            lambda raw: raw.replace(b"Subject:", b"Reply-To: thief@evil.example\r\nSubject:"),
            "headers",
        ),
        (lambda raw: raw.replace(b"Subject:", b"To: thief@evil.example\r\nSubject:"), "twice"),
        (lambda raw: raw.replace(b"Subject: Hello", b"Subject: Hullo"), "Subject would be"),
        (lambda raw: raw.replace(b"To: jane@acme.com", b"To: thief@evil.example"), "To would be"),
        (lambda raw: raw.replace(b"Hi.", b"Pay me."), "body would be"),
    ],
)
def test_the_check_finds_any_header_or_body_that_is_not_what_was_meant(tamper, problem):
    meant = outgoing()
    found = difference(tamper(render(meant)), meant)
    assert found is not None
    assert problem in found


def test_mail_that_would_not_come_out_as_meant_is_refused():
    # Two ids where one was meant: the header written holds only the first.
    with pytest.raises(DeliveryRefused) as refused:
        render(outgoing(message_id="<a@b> <c@d>"))
    assert str(refused.value) == (
        "the mail would not go out as meant: Message-ID would be '<a@b>', not '<a@b> <c@d>'"
    )


def test_a_synthetic_message_id_is_never_replied_to(sundae, config, protege_app):
    inbound = record_inbound(
        sundae,
        sender="jane@acme.com",
        body="?",
        message_id="<made-up@acme.com>",
        references=["<root@acme.com>"],
        flags=[SYNTHETIC_ID],
    )
    run_tool(
        "send_email",
        context=tool_context(sundae, config, inbound),
        mode="reply",
        body="x",
        manifest=protege_app.manifest,
    )
    raw, sent = sent_mail(config)
    assert b"made-up" not in raw
    assert "In-Reply-To" not in sent
    assert sent["References"] == "<root@acme.com>"


def test_a_new_mail_from_a_reply_run_carries_the_loop_count(sundae, config, protege_app):
    inbound = record_inbound(sundae, sender="bot@other.example", body="?", flags=["loop: 2"])
    result = run_tool(
        "send_email",
        context=tool_context(sundae, config, inbound),
        mode="new",
        to=["bot@other.example"],
        subject="Fresh start",
        body="Hello again.",
        manifest=protege_app.manifest,
    )
    assert result.ok, result.reason
    _, sent = sent_mail(config)
    assert sent["X-Protege-Loop"] == "3"


@pytest.mark.parametrize(
    "subject",
    [
        "utf-8*en?q?Reply-To: t@evil.example=?:=0D=0A\x00;Bcc: x@evil.example",
        "=0D=0A=?utf-8?q?''=?us-ascii?Q?a?=--;>From:,Reply-To: t@evil.example",
        "o-8859-1?q?=?utf-8*en?q?=?utf-8*en?q?)filename*===?=?iso-8859-1?q?",
        "=??b?=0D0A2J" + "x" * 160,
    ],
)
def test_a_subject_the_email_package_would_refold_still_lets_the_reply_go(sundae, config, subject):
    outcome = queue_mail(
        agent=sundae,
        run=None,
        config=config,
        mail={"to": ["j@acme.com"], "subject": subject, "body": "b"},
    )
    assert outcome["status"] == "queued"
    raw, sent = sent_mail(config)
    assert_no_injected_header(raw, sent)
    (stored,) = Message.select()
    assert str(sent["Subject"]) == stored.subject  # what was stored is what went out


def test_an_attachment_name_with_quotes_still_goes_out(sundae, config):
    blob = blobs.store(
        b"x", filename="a", content_type="text/plain", agent=sundae, data_dir=config.data_dir
    )
    blob.filename = '"bc* a "a"'
    blob.save()
    mail = {"to": ["j@acme.com"], "body": "b"}
    assert (
        queue_mail(agent=sundae, run=None, config=config, mail=mail, attachments=[blob])["status"]
        == "queued"
    )
    _, sent = sent_mail(config)
    (attached,) = sent.iter_attachments()
    assert "X-Evil" not in attached


@pytest.mark.parametrize(
    "changes",
    [{}, {"subject": "Ünïcode " + "long " * 40}],
    ids=["plain, written directly", "written by the email package"],
)
def test_protege_s_automatic_mail_says_auto_submitted_and_the_check_sees_it(changes):
    meant = outgoing(auto_submitted="auto-replied", **changes)
    raw = render(meant)
    parsed = email.message_from_bytes(raw, policy=policy.default)
    assert parsed["Auto-Submitted"] == "auto-replied"
    assert difference(raw, meant) is None
    assert "auto-submitted" in difference(raw, outgoing(**changes))  # not meant: refused
    assert "Auto-Submitted" not in email.message_from_bytes(render(outgoing(**changes)))


def test_only_protege_s_own_auto_submitted_values_are_queued(sundae, config):
    with pytest.raises(DeliveryRefused):
        queue_mail(
            agent=sundae,
            run=None,
            config=config,
            mail={"to": ["jane@acme.com"], "subject": "Hi", "body": "Hi."},
            auto_submitted="no\r\nBcc: thief@evil.example",
        )
    assert Message.select().count() == 0
