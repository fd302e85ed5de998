"""A real smtplib client against the gateway on loopback."""

import errno
import smtplib
import socket

import attrs
import pytest

from protege.gateway.smtp import free_port, start_gateway
from protege.models import Message, Run


@pytest.fixture
def gateway(config):
    tight = attrs.evolve(config, mail=attrs.evolve(config.mail, max_message_bytes=200_000))
    controller = start_gateway(tight, "127.0.0.1", free_port())
    yield controller
    controller.stop()


def test_a_port_in_use_is_refused_with_the_systems_error(config):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError, match="in use") as raised:
            start_gateway(config, "127.0.0.1", busy.getsockname()[1])
    assert raised.value.errno == errno.EADDRINUSE


def send(gateway, raw, to=("sundae@thescoop.example",), sender="jane@acme.com"):
    with smtplib.SMTP(gateway.hostname, gateway.port, timeout=10) as client:
        return client.sendmail(sender, list(to), raw)


def test_accepted_mail_is_stored_and_its_run_queued_before_250(sundae, gateway, mail):
    assert send(gateway, mail()) == {}
    (message,) = Message.select()
    assert message.subject == "Melted"
    (run,) = Run.select()
    assert (run.status, run.message_id) == ("queued", message.id)


def test_unknown_recipient_is_550(sundae, gateway, mail):
    with pytest.raises(smtplib.SMTPRecipientsRefused) as raised:
        send(gateway, mail(), to=["nobody@thescoop.example"])
    code, text = raised.value.recipients["nobody@thescoop.example"]
    assert code == 550
    assert b"no agent has this address" in text
    assert Message.select().count() == 0


def test_one_unknown_recipient_does_not_stop_the_others(sundae, gateway, mail):
    refused = send(gateway, mail(), to=["nobody@thescoop.example", "sundae@thescoop.example"])
    assert list(refused) == ["nobody@thescoop.example"]
    assert Message.select().count() == 1


def test_refused_sender_is_550_and_stored_as_refused(sundae, gateway, mail):
    sundae.add_access_rule("allow", "*@thescoop.com")
    with pytest.raises(smtplib.SMTPDataError) as raised:
        send(gateway, mail())
    assert raised.value.smtp_code == 550
    # The outsider learns nothing about the rules; the record keeps the reason.
    assert raised.value.smtp_error == b"5.7.1 this address does not accept your message"
    assert b"allow" not in raised.value.smtp_error
    (message,) = Message.select()
    assert message.status == "refused"
    assert "refused by access rules: no allow rule matches (allow-list)" in message.flags
    assert Run.select().count() == 0


def test_mail_over_the_size_limit_is_refused(sundae, gateway, mail):
    big = mail(attachments=[("big.bin", "application/octet-stream", b"x" * 300_000)])
    with pytest.raises((smtplib.SMTPDataError, smtplib.SMTPSenderRefused)) as raised:
        send(gateway, big)
    assert raised.value.smtp_code == 552
    assert Message.select().count() == 0


def test_malformed_mail_is_accepted_stored_and_flagged(sundae, gateway):
    raw = b"From: jane@acme.com\r\nSubject: =?bogus?=\r\nContent-Type: multipart/mixed\r\n\r\nx\r\n"
    assert send(gateway, raw) == {}
    (message,) = Message.select()
    assert any(flag.startswith("malformed") for flag in message.flags)


def test_loop_mail_is_accepted_but_starts_no_run(sundae, gateway, mail):
    assert send(gateway, mail(headers={"X-Protege-Loop": "7"})) == {}
    (message,) = Message.select()
    assert message.status == "ignored"
    assert Run.select().count() == 0


def test_a_database_failure_at_rcpt_time_is_a_temporary_451(sundae, gateway, mail):
    from protege.db import database

    # The agents' table gone for a moment, as a database restart or failover looks to a query.
    database.execute_sql("ALTER TABLE agent RENAME TO agent_away")
    try:
        with pytest.raises(smtplib.SMTPRecipientsRefused) as raised:
            send(gateway, mail())
    finally:
        database.execute_sql("ALTER TABLE agent_away RENAME TO agent")
    code, text = raised.value.recipients["sundae@thescoop.example"]
    assert code == 451  # the sending server tries again later; a 5xx would bounce the mail
    assert b"Error" not in text  # plain words, no exception's name
    assert send(gateway, mail()) == {}  # and it works again once the database does
