"""context.queue_mail's gateway: From forced, stored in its thread, queued once per tool call."""

import datetime
import email
import email.parser
import ssl
from email import policy
from pathlib import Path

import attrs
import pytest
from aiosmtpd.controller import Controller

from protege import blobs
from protege.config import load_config
from protege.delivery import send_pending
from protege.gateway.outbound import DeliveryRefused, describe, queue_mail
from protege.gateway.smtp import free_port
from protege.mail import record_inbound
from protege.models import Message
from protege.models.base import utcnow
from protege.queue import queue_reply
from protege.testing import make_context, run_tool


class Capture:
    """An SMTP server's handler that keeps what it receives (or refuses it).

    ``refuse`` maps a recipient to the answer its RCPT gets: one text (every time) or a
    list of texts used one per attempt, after which the recipient is accepted.
    """

    def __init__(self, answer="250 OK", refuse=None, eight_bit=True):
        self.received = []
        self.answer = answer
        self.refuse = dict(refuse or {})
        self.greetings = 0
        self.names = []  # what each EHLO said the client is
        self.eight_bit = eight_bit  # whether EHLO offers 8BITMIME

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        self.greetings += 1
        self.names.append(hostname)
        session.host_name = hostname
        if not self.eight_bit:
            return [line for line in responses if line != "250-8BITMIME"]
        return responses

    async def handle_RCPT(self, server, session, envelope, address, options):
        answer = self.refuse.get(address)
        if isinstance(answer, list):
            answer = answer.pop(0) if answer else None
        if answer:
            return answer
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.received.append(envelope)
        return self.answer


@pytest.fixture
def smtp_server():
    servers = []

    def start(answer="250 OK", refuse=None, eight_bit=True, **options):
        capture = Capture(answer, refuse, eight_bit)
        controller = Controller(capture, hostname="127.0.0.1", port=free_port(), **options)
        controller.start()
        servers.append(controller)
        return capture, controller

    yield start
    for controller in servers:
        controller.stop()


def smtp_config(config, relay, **changes):
    """``config`` sending by SMTP to ``relay`` (no STARTTLS unless asked, no waiting
    between attempts)."""
    mail = {
        "transport": "smtp",
        "smtp_port": relay.port,
        "smtp_starttls": False,
        "smtp_backoff_seconds": 0,
        **changes,
    }
    return attrs.evolve(config, mail=attrs.evolve(config.mail, **mail))


def send(agent, config, mail):
    """Queue ``mail`` and deliver it to the end; what became of it."""
    queued = queue_mail(agent=agent, run=None, config=config, mail=mail)
    assert queued["status"] == "queued"
    return settle(config, queued)


def settle(config, queued):
    """Run the delivery loop's passes until the mail is sent or failed, the clock jumping
    past each backoff; the mail's outcome then."""
    moments = iter(utcnow() + datetime.timedelta(hours=hour) for hour in range(100))
    while Message.get(Message.message_id == queued["message_id"]).status == "pending":
        send_pending(config, clock=lambda: next(moments))
    return describe(Message.get(Message.message_id == queued["message_id"]))


def outbox(config):
    return sorted((config.data_dir / "outbox").glob("*.eml"))


def parse(path):
    return email.message_from_bytes(path.read_bytes(), policy=policy.default)


def test_mail_goes_to_the_outbox_from_the_agent(sundae, config):
    outcome = queue_mail(
        agent=sundae,
        run=None,
        config=config,
        mail={
            "to": ["Jane <jane@acme.com>"],
            "subject": "Hello",
            "body": "Hi Jane.",
            "from": "ceo@thescoop.example",
        },
    )
    assert outcome["status"] == "queued"
    assert not outbox(config)  # the delivery loop sends it, not the tool call
    outcome = settle(config, outcome)
    assert outcome["status"] == "sent"
    (path,) = outbox(config)
    sent = parse(path)
    assert sent["From"] == "Sundae <sundae@thescoop.example>"  # forced, whatever was asked
    assert sent["To"] == "jane@acme.com"
    assert sent["Message-ID"] == outcome["message_id"]
    assert sent["Date"]
    assert sent["X-Protege-Loop"] == "1"
    assert sent.get_content().strip() == "Hi Jane."
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert (stored.direction, stored.status, stored.thread_key) == (
        "outbound",
        "sent",
        outcome["message_id"],
    )


def test_a_reply_is_threaded(sundae, config):
    inbound = record_inbound(sundae, sender="jane@acme.com", body="?", message_id="<j1@acme.com>")
    outcome = queue_mail(
        agent=sundae,
        run=None,
        config=config,
        mail={
            "to": ["jane@acme.com"],
            "subject": "Re: x",
            "body": "!",
            "in_reply_to": "<j1@acme.com>",
            "references": ["<j1@acme.com>"],
        },
    )
    settle(config, outcome)
    sent = parse(outbox(config)[0])
    assert sent["In-Reply-To"] == "<j1@acme.com>"
    assert sent["References"] == "<j1@acme.com>"
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert stored.thread_key == inbound.thread_key


@pytest.mark.usefixtures("blob_store")  # from each blob store
def test_attachments_travel_and_are_linked(sundae, config):
    blob = blobs.store(
        b"a,b\n", filename="r.csv", content_type="text/csv", agent=sundae, config=config
    )
    outcome = queue_mail(
        agent=sundae,
        run=None,
        config=config,
        mail={"to": ["j@acme.com"], "subject": "s", "body": "b"},
        attachments=[blob],
    )
    settle(config, outcome)
    (attached,) = parse(outbox(config)[0]).iter_attachments()
    assert (attached.get_filename(), attached.get_content()) == ("r.csv", "a,b\n")
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert [b.id for b in stored.attachments] == [blob.id]


@pytest.mark.parametrize(
    ("mail", "message"),
    [
        ({"subject": "s", "body": "b"}, "no recipient"),
        ({"to": ["not an address"], "body": "b"}, "is not an email address"),
    ],
)
def test_undeliverable_mail_is_refused_before_anything_is_stored(sundae, config, mail, message):
    with pytest.raises(DeliveryRefused, match=message):
        queue_mail(agent=sundae, run=None, config=config, mail=mail)
    assert Message.select().count() == 0


@pytest.mark.usefixtures("blob_store")
def test_attachment_limits(sundae, config):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, max_attachment_bytes=3))
    blob = blobs.store(b"abcd", filename="x.txt", content_type="text/plain", config=config)
    with pytest.raises(DeliveryRefused, match=r"x\.txt is 4 bytes; the limit is 3"):
        queue_mail(
            agent=sundae,
            run=None,
            config=tight,
            mail={"to": ["j@acme.com"], "body": "b"},
            attachments=[blob],
        )


def test_the_same_tool_call_queues_once(sundae, config):
    run = queue_reply(record_inbound(sundae, sender="jane@acme.com", body="?"))
    mail = {"to": ["jane@acme.com"], "body": "once"}
    first = queue_mail(agent=sundae, run=run, config=config, mail=mail, tool_call_id="call_1")
    again = queue_mail(agent=sundae, run=run, config=config, mail=mail, tool_call_id="call_1")
    assert again == {**first, "repeated": True}
    settle(config, first)
    assert len(outbox(config)) == 1
    assert Message.select().where(Message.direction == "outbound").count() == 1


def test_smtp_transport_sends_to_the_relay(sundae, config, smtp_server):
    capture, relay = smtp_server()
    outcome = send(
        sundae,
        smtp_config(config, relay),
        {
            "to": ["jane@acme.com"],
            "cc": ["mara@thescoop.com"],
            "bcc": ["audit@thescoop.com"],
            "subject": "s",
            "body": "b",
        },
    )
    assert outcome["status"] == "sent"
    (envelope,) = capture.received
    assert envelope.rcpt_tos == ["jane@acme.com", "mara@thescoop.com", "audit@thescoop.com"]
    assert b"audit@thescoop.com" not in envelope.content  # Bcc stays out of the headers
    assert not outbox(config)


def test_a_permanent_smtp_refusal_marks_the_message_failed(sundae, config, smtp_server):
    capture, relay = smtp_server("554 5.7.1 rejected by policy")
    outcome = send(
        sundae, smtp_config(config, relay, smtp_retries=3), {"to": ["jane@acme.com"], "body": "b"}
    )
    assert outcome["status"] == "failed"
    assert outcome["error"] == "SMTP 554: 5.7.1 rejected by policy"
    assert len(capture.received) == 1  # permanent: not retried


def test_a_temporary_smtp_failure_is_retried(sundae, config, smtp_server):
    capture, relay = smtp_server("451 4.3.0 try later")
    outcome = send(
        sundae, smtp_config(config, relay, smtp_retries=1), {"to": ["jane@acme.com"], "body": "b"}
    )
    assert len(capture.received) == 2
    assert outcome["status"] == "failed"
    assert outcome["error"] == "gave up after 2 attempts: SMTP 451: 4.3.0 try later"


@pytest.fixture
def authenticating_relay():
    from aiosmtpd.smtp import AuthResult

    def check(server, session, envelope, mechanism, auth_data):
        ok = (auth_data.login, auth_data.password) == (b"sundae", b"s3cret")
        return AuthResult(success=ok, handled=False)

    capture = Capture()
    controller = Controller(
        capture, hostname="127.0.0.1", port=free_port(), authenticator=check, auth_require_tls=False
    )
    controller.start()
    yield capture, controller
    controller.stop()


@pytest.mark.parametrize(("password", "sent"), [("s3cret", True), ("wrong", False)])
def test_smtp_login(sundae, config, authenticating_relay, monkeypatch, password, sent):
    capture, relay = authenticating_relay
    monkeypatch.setenv("PROTEGE_SMTP_PASSWORD", password)
    loaded = load_config(config.root)  # the password is read when the configuration is
    outcome = send(
        sundae,
        smtp_config(loaded, relay, smtp_username="sundae"),
        {"to": ["jane@acme.com"], "body": "b"},
    )
    assert (outcome["status"] == "sent") is sent
    assert len(capture.received) == (1 if sent else 0)
    if not sent:
        assert outcome["error"].startswith("SMTP refused the login of sundae")


def test_starttls_is_required_when_configured(sundae, config, smtp_server):
    capture, relay = smtp_server()  # offers no STARTTLS
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_starttls=True, smtp_retries=0),
        {"to": ["jane@acme.com"], "body": "b"},
    )
    assert outcome["status"] == "failed"
    assert "STARTTLS extension not supported" in outcome["error"]
    assert capture.received == []  # never in clear text


def test_recipients_refused_for_good_are_reported_and_the_rest_get_it(sundae, config, smtp_server):
    capture, relay = smtp_server(refuse={"bob@acme.com": "550 5.1.1 no such user"})
    outcome = send(
        sundae,
        smtp_config(config, relay),
        {"to": ["jane@acme.com"], "cc": ["bob@acme.com"], "subject": "s", "body": "b"},
    )
    assert outcome["status"] == "sent"
    refused = [{"address": "bob@acme.com", "code": 550, "reason": "5.1.1 no such user"}]
    assert outcome["refused"] == refused
    (envelope,) = capture.received
    assert envelope.rcpt_tos == ["jane@acme.com"]
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert (stored.status, stored.refused_recipients) == ("sent", refused)


def test_temporarily_refused_recipients_are_retried_alone(sundae, config, smtp_server):
    capture, relay = smtp_server(
        refuse={"bob@acme.com": ["450 4.2.0 mailbox busy"], "sam@acme.com": "550 5.1.1 gone"}
    )
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_retries=2),
        {"to": ["jane@acme.com", "bob@acme.com", "sam@acme.com"], "body": "b"},
    )
    assert [envelope.rcpt_tos for envelope in capture.received] == [
        ["jane@acme.com"],
        ["bob@acme.com"],  # the second attempt goes to the one who was busy, only
    ]
    assert outcome["status"] == "sent"
    assert outcome["refused"] == [{"address": "sam@acme.com", "code": 550, "reason": "5.1.1 gone"}]
    assert "error" not in outcome


def test_a_recipient_still_busy_after_every_attempt_is_reported(sundae, config, smtp_server):
    capture, relay = smtp_server(refuse={"bob@acme.com": "450 4.2.0 mailbox busy"})
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_retries=1),
        {"to": ["jane@acme.com", "bob@acme.com"], "body": "b"},
    )
    assert [envelope.rcpt_tos for envelope in capture.received] == [["jane@acme.com"]]
    assert capture.greetings == 2  # one more attempt for bob, refused again
    assert outcome["status"] == "sent"
    assert outcome["refused"] == [
        {"address": "bob@acme.com", "code": 450, "reason": "4.2.0 mailbox busy"}
    ]
    assert outcome["error"] == "gave up after 2 attempts: SMTP 450: 4.2.0 mailbox busy"


def test_when_every_recipient_is_refused_the_mail_failed(sundae, config, smtp_server):
    capture, relay = smtp_server(
        refuse={"jane@acme.com": "550 5.1.1 no such user", "bob@acme.com": "553 5.7.1 denied"}
    )
    outcome = send(
        sundae, smtp_config(config, relay), {"to": ["jane@acme.com", "bob@acme.com"], "body": "b"}
    )
    assert capture.received == []
    assert outcome["status"] == "failed"
    assert [r["address"] for r in outcome["refused"]] == ["jane@acme.com", "bob@acme.com"]
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert stored.status == "failed"
    assert len(stored.refused_recipients) == 2


TLS = Path(__file__).parent / "tls"


@pytest.fixture
def tls_relay(smtp_server):
    """A relay offering STARTTLS with a certificate from the test authority in ``tls/``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS / "server.pem", TLS / "server.key")
    return smtp_server(tls_context=context, require_starttls=True)


def test_a_certificate_that_does_not_verify_is_not_retried(sundae, config, tls_relay):
    capture, relay = tls_relay
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_starttls=True, smtp_retries=3),
        {"to": ["jane@acme.com"], "body": "b"},
    )
    assert outcome["status"] == "failed"
    assert outcome["error"].startswith("the certificate of 127.0.0.1 did not verify")
    assert "smtp_ca_file" in outcome["error"]
    assert capture.greetings == 1  # permanent: one attempt
    assert capture.received == []


def test_smtp_ca_file_lets_starttls_verify_a_private_authority(sundae, config, tls_relay):
    capture, relay = tls_relay
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_starttls=True, smtp_ca_file=str(TLS / "ca.pem")),
        {"to": ["jane@acme.com"], "body": "b"},
    )
    assert outcome["status"] == "sent"
    (envelope,) = capture.received
    assert envelope.rcpt_tos == ["jane@acme.com"]


def test_an_injected_subject_reaches_the_relay_as_one_plain_header(sundae, config, smtp_server):
    capture, relay = smtp_server()
    injected = "=?utf-8?q?Hi=0D=0AReply-To:_thief@evil.example=0D=0A=0D=0Abody?="
    send(
        sundae,
        smtp_config(config, relay),
        {"to": ["jane@acme.com"], "subject": injected, "body": "b"},
    )
    (envelope,) = capture.received
    received = email.message_from_bytes(envelope.content, policy=policy.default)
    assert "Reply-To" not in received
    assert received["Subject"] == "Hi Reply-To: thief@evil.example body"
    assert received.get_content().replace("\r\n", "\n") == "b\n"
    assert envelope.rcpt_tos == ["jane@acme.com"]


def test_one_mail_goes_to_at_most_max_recipients(sundae, config):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, max_recipients=2))
    mail = {"to": ["a@acme.com", "b@acme.com"], "cc": ["c@acme.com"], "body": "b"}
    with pytest.raises(DeliveryRefused, match="the mail has 3 recipients; at most 2 may receive"):
        send(sundae, tight, mail)
    assert Message.select().count() == 0
    assert not outbox(config)


def real_delivery_context(agent, config, inbound):
    """A tool's run context whose queue_mail is the gateway itself."""

    def queue_for_real(mail, attachments=()):
        return queue_mail(agent=agent, run=None, config=config, mail=mail, attachments=attachments)

    return make_context(agent, message=inbound, config=config, queue_mail=queue_for_real)


def test_send_email_reports_the_mail_queued_and_refusals_land_on_the_message(
    sundae, config, smtp_server, protege_app
):
    capture, relay = smtp_server(refuse={"bob@acme.com": "550 5.1.1 no such user"})
    inbound = record_inbound(sundae, sender="jane@acme.com", cc=["bob@acme.com"], body="?")
    context = real_delivery_context(sundae, smtp_config(config, relay), inbound)
    result = run_tool(
        "send_email", context=context, mode="reply", body="Noted.", manifest=protege_app.manifest
    )
    assert result.ok
    assert result.data["status"] == "queued"
    assert not capture.received  # the tool call only queued it
    outcome = settle(smtp_config(config, relay), result.data)
    assert outcome["refused"] == [
        {"address": "bob@acme.com", "code": 550, "reason": "5.1.1 no such user"}
    ]
    (envelope,) = capture.received
    assert envelope.rcpt_tos == ["jane@acme.com"]


def test_mail_nobody_got_is_failed_with_the_reason(sundae, config, smtp_server, protege_app):
    _, relay = smtp_server(refuse={"jane@acme.com": "550 5.1.1 no such user"})
    inbound = record_inbound(sundae, sender="jane@acme.com", body="?")
    context = real_delivery_context(sundae, smtp_config(config, relay), inbound)
    result = run_tool(
        "send_email", context=context, mode="reply", body="Noted.", manifest=protege_app.manifest
    )
    outcome = settle(smtp_config(config, relay), result.data)
    assert outcome["status"] == "failed"
    assert outcome["error"] == (
        "the relay refused every recipient: jane@acme.com (550 5.1.1 no such user)"
    )
    assert outcome["refused"][0]["address"] == "jane@acme.com"


def test_an_internationalised_address_goes_out_with_smtputf8(sundae, config, smtp_server):
    capture, relay = smtp_server(enable_SMTPUTF8=True, decode_data=False)
    outcome = send(
        sundae,
        smtp_config(config, relay),
        {"to": ["Zoë <zoë@café.example>"], "subject": "Grüße", "body": "b"},
    )
    assert outcome["status"] == "sent"
    (envelope,) = capture.received
    assert envelope.rcpt_tos == ["zoë@café.example"]
    assert "SMTPUTF8" in envelope.mail_options
    received = email.parser.Parser(policy=policy.default).parsestr(
        envelope.original_content.decode("utf-8")
    )
    assert [a.addr_spec for a in received["To"].addresses] == ["zoë@café.example"]
    assert received["Subject"] == "Grüße"


def test_an_internationalised_address_goes_to_the_outbox_as_utf8(sundae, config):
    send(sundae, config, {"to": ["zoë@café.example"], "subject": "s", "body": "b"})
    (path,) = outbox(config)
    assert "To: zoë@café.example" in path.read_bytes().decode("utf-8")


def test_tagged_and_cased_variants_of_one_address_each_count_as_a_recipient(sundae, config):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, max_recipients=2))
    mail = {"to": ["v+1@acme.com", "V+2@acme.com"], "bcc": ["v+3@acme.com"], "body": "b"}
    with pytest.raises(DeliveryRefused, match="the mail has 3 recipients"):
        send(sundae, tight, mail)
    assert not outbox(config)


def test_an_8bit_body_goes_out_with_body_8bitmime_to_a_relay_that_offers_it(
    sundae, config, smtp_server
):
    capture, relay = smtp_server()
    outcome = send(sundae, smtp_config(config, relay), {"to": ["jane@acme.com"], "body": "Grüße"})
    assert outcome["status"] == "sent"
    (envelope,) = capture.received
    assert "BODY=8BITMIME" in envelope.mail_options
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert envelope.original_content == blobs.read(stored.raw_blob, config)  # as stored
    assert b"Content-Transfer-Encoding: 8bit" in envelope.original_content


def test_an_8bit_body_is_sent_in_7_bits_to_a_relay_without_8bitmime(sundae, config, smtp_server):
    capture, relay = smtp_server(eight_bit=False)
    outcome = send(
        sundae,
        smtp_config(config, relay),
        {"to": ["jane@acme.com"], "subject": "Grüße", "body": "Grüße aus Köln\nBis bald"},
    )
    assert outcome["status"] == "sent"
    (envelope,) = capture.received
    assert not any(option.startswith("BODY=") for option in envelope.mail_options)
    assert envelope.original_content.isascii()
    received = email.message_from_bytes(envelope.original_content, policy=policy.default)
    assert received["Content-Transfer-Encoding"] in ("base64", "quoted-printable")
    assert received.get_content().splitlines() == ["Grüße aus Köln", "Bis bald"]
    assert received["Subject"] == "Grüße"
    assert received["Message-ID"] == outcome["message_id"]


def test_a_plain_ascii_mail_goes_out_as_it_is_stored(sundae, config, smtp_server):
    capture, relay = smtp_server(eight_bit=False)
    outcome = send(sundae, smtp_config(config, relay), {"to": ["jane@acme.com"], "body": "Hi"})
    (envelope,) = capture.received
    assert not any(option.startswith("BODY=") for option in envelope.mail_options)
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert envelope.original_content == blobs.read(stored.raw_blob, config)


def test_protege_greets_the_relay_with_the_configured_ehlo_name(sundae, config, smtp_server):
    capture, relay = smtp_server()
    named = smtp_config(config, relay, ehlo_name="mail.thescoop.example")
    send(sundae, named, {"to": ["jane@acme.com"], "body": "Hi"})
    assert capture.names == ["mail.thescoop.example"]


def test_by_default_protege_greets_with_a_real_name_or_the_connections_address(
    sundae, config, smtp_server
):
    from protege.config import is_host_name

    capture, relay = smtp_server()
    send(sundae, smtp_config(config, relay), {"to": ["jane@acme.com"], "body": "Hi"})
    (name,) = capture.names
    assert name == "[127.0.0.1]" or (is_host_name(name) and not name.startswith("localhost"))
