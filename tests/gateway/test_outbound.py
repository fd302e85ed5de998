"""context.deliver's gateway: From forced, stored in its thread, sent once per tool call."""

import email
from email import policy

import attrs
import pytest
from aiosmtpd.controller import Controller

from protege import blobs
from protege.gateway.outbound import DeliveryRefused, deliver
from protege.gateway.smtp import free_port
from protege.harness.dispatch import current_tool_call
from protege.harness.runner import queue_reply
from protege.mail import record_inbound
from protege.models import Message


class Capture:
    """An SMTP server's handler that keeps what it receives (or refuses it).

    ``refuse`` maps a recipient to the answer its RCPT gets: one text (every time) or a
    list of texts used one per attempt, after which the recipient is accepted.
    """

    def __init__(self, answer="250 OK", refuse=None):
        self.received = []
        self.answer = answer
        self.refuse = dict(refuse or {})
        self.greetings = 0

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        self.greetings += 1
        session.host_name = hostname
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

    def start(answer="250 OK", refuse=None, **options):
        capture = Capture(answer, refuse)
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
    return deliver(agent=agent, run=None, config=config, mail=mail)


def outbox(config):
    return sorted((config.data_dir / "outbox").glob("*.eml"))


def parse(path):
    return email.message_from_bytes(path.read_bytes(), policy=policy.default)


def test_mail_goes_to_the_outbox_from_the_agent(sundae, config):
    outcome = deliver(
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
    outcome = deliver(
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
    sent = parse(outbox(config)[0])
    assert sent["In-Reply-To"] == "<j1@acme.com>"
    assert sent["References"] == "<j1@acme.com>"
    stored = Message.get(Message.message_id == outcome["message_id"])
    assert stored.thread_key == inbound.thread_key


def test_attachments_travel_and_are_linked(sundae, config):
    blob = blobs.store(
        b"a,b\n", filename="r.csv", content_type="text/csv", agent=sundae, data_dir=config.data_dir
    )
    outcome = deliver(
        agent=sundae,
        run=None,
        config=config,
        mail={"to": ["j@acme.com"], "subject": "s", "body": "b"},
        attachments=[blob],
    )
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
        deliver(agent=sundae, run=None, config=config, mail=mail)
    assert Message.select().count() == 0


def test_attachment_limits(sundae, config):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, max_attachment_bytes=3))
    blob = blobs.store(
        b"abcd", filename="x.txt", content_type="text/plain", data_dir=config.data_dir
    )
    with pytest.raises(DeliveryRefused, match=r"x\.txt is 4 bytes; the limit is 3"):
        deliver(
            agent=sundae,
            run=None,
            config=tight,
            mail={"to": ["j@acme.com"], "body": "b"},
            attachments=[blob],
        )


def test_the_same_tool_call_sends_once(sundae, config):
    run = queue_reply(record_inbound(sundae, sender="jane@acme.com", body="?"))
    token = current_tool_call.set("call_1")
    try:
        first = deliver(
            agent=sundae, run=run, config=config, mail={"to": ["jane@acme.com"], "body": "once"}
        )
        again = deliver(
            agent=sundae, run=run, config=config, mail={"to": ["jane@acme.com"], "body": "once"}
        )
    finally:
        current_tool_call.reset(token)
    assert again == {**first, "repeated": True}
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
    outcome = send(
        sundae,
        smtp_config(config, relay, smtp_username="sundae"),
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
