"""The ``submission`` transport against a real Postfix that takes submission only over TLS
and with AUTH, checked by a real Dovecot (tests/mailservers.py), delivering into it."""

from __future__ import annotations

import datetime
import shlex
import sys
from email import policy
from email.message import EmailMessage

import attrs
import pytest

from protege.config import load_config
from protege.delivery.submission import SubmissionTransport
from protege.delivery.transports import Envelope, MailRefused, OutcomeStatus
from protege.errors import ConfigError
from protege.gateway.probe import probe_submission
from protege.mailbox_settings import MailboxSettings, SubmissionSettings
from tests.mailservers import AGENT, PERSON


def outgoing(number: int = 1, to: str = PERSON.address) -> tuple[bytes, Envelope]:
    message = EmailMessage()
    message["From"] = f"Support <{AGENT.address}>"
    message["To"] = to
    message["Subject"] = f"Your order {number}"
    message["Message-ID"] = f"<reply-{number}@example.test>"
    message.set_content(f"Order {number} left today.")
    envelope = Envelope(
        sender=AGENT.address,
        recipients=(to,),
        smtputf8=False,
        message_id=f"<reply-{number}@example.test>",
        queued_at=datetime.datetime(2026, 12, 2, 12, 0),
    )
    return message.as_bytes(policy=policy.SMTP), envelope


def config_for(tmp_path, submission, *, sent_folder: str | None = "Sent", **changes):
    server = submission.dovecot
    values = {
        "host": submission.host,
        "port": submission.starttls_port,
        "security": "starttls",
        "ca_file": str(submission.ca_file),
        "username": AGENT.address,
        "password": AGENT.password,
    }
    values.update(changes)
    mailbox = MailboxSettings(
        agent=AGENT.address,
        host=server.host,
        port=server.imaps_port,
        ca_file=str(server.ca_file),
        username=AGENT.address,
        password_env="AGENT_IMAP_PASSWORD",
        password=AGENT.password,
        sent_folder=sent_folder,
    )
    config = load_config(tmp_path, environ={})
    return attrs.evolve(
        config,
        mail=attrs.evolve(
            config.mail,
            transport="submission",
            submission=SubmissionSettings(**values),
            imap={"support": mailbox},
        ),
    )


def test_mail_is_submitted_over_starttls_with_auth_and_a_copy_is_put_in_sent(tmp_path, submission):
    transport = SubmissionTransport(config_for(tmp_path, submission))
    raw, envelope = outgoing(1)

    outcomes = list(transport.send(raw, envelope))
    transport.close()  # the Sent copy is made apart from the hand-off

    assert [(o.address, o.status) for o in outcomes] == [(PERSON.address, OutcomeStatus.DELIVERED)]
    (arrived,) = submission.dovecot.await_messages(PERSON.address, 1)
    assert b"Subject: Your order 1" in arrived.raw
    (copy,) = submission.dovecot.messages(AGENT.address, "Sent")
    assert copy.raw == raw
    assert "\\Seen" in copy.flags


def test_sending_again_makes_no_second_sent_copy(tmp_path, submission):
    transport = SubmissionTransport(config_for(tmp_path, submission))
    raw, envelope = outgoing(2)
    list(transport.send(raw, envelope))
    list(transport.send(raw, attrs.evolve(envelope, attempt=2)))
    transport.close()
    assert len(submission.dovecot.messages(AGENT.address, "Sent")) == 1


def test_implicit_tls_on_the_465_style_port(tmp_path, submission):
    config = config_for(tmp_path, submission, port=submission.tls_port, security="tls")
    raw, envelope = outgoing(3)
    outcomes = list(SubmissionTransport(config).send(raw, envelope))
    assert outcomes[0].status is OutcomeStatus.DELIVERED
    submission.dovecot.await_messages(PERSON.address, 1)


def test_each_recipient_gets_the_servers_own_answer(tmp_path, submission):
    transport = SubmissionTransport(config_for(tmp_path, submission, sent_folder=None))
    raw, envelope = outgoing(4)
    refused = "nobody@elsewhere.test"  # the server refuses every other domain at RCPT
    envelope = attrs.evolve(envelope, recipients=(PERSON.address, refused))

    outcomes = {o.address: o for o in transport.send(raw, envelope)}
    transport.close()

    assert outcomes[PERSON.address].status is OutcomeStatus.DELIVERED
    assert outcomes[refused].status is OutcomeStatus.REFUSED
    assert outcomes[refused].code >= 500
    assert submission.dovecot.messages(AGENT.address, "Sent") == []  # none was asked for


def test_a_wrong_password_refuses_the_mail_with_a_clear_reason(tmp_path, submission):
    transport = SubmissionTransport(config_for(tmp_path, submission, password="not it"))
    raw, envelope = outgoing(5)
    with pytest.raises(MailRefused, match=f"refused the login of {AGENT.address}") as raised:
        list(transport.send(raw, envelope))
    assert "not it" not in str(raised.value)


def test_an_untrusted_certificate_refuses_the_mail_on_either_port(tmp_path, submission):
    untrusted = str(submission.dovecot.untrusted_ca_file)
    raw, envelope = outgoing(6)
    for port, security in ((submission.starttls_port, "starttls"), (submission.tls_port, "tls")):
        config = config_for(tmp_path, submission, port=port, security=security, ca_file=untrusted)
        with pytest.raises(MailRefused, match="did not verify"):
            list(SubmissionTransport(config).send(raw, envelope))


def test_xoauth2_with_the_token_the_command_prints(tmp_path, submission):
    token = submission.dovecot.oauth_token(AGENT.address)
    printer = shlex.join([sys.executable, "-c", f"print({token!r})"])
    config = config_for(tmp_path, submission, password=None, oauth2_command=printer)
    raw, envelope = outgoing(7)
    outcomes = list(SubmissionTransport(config).send(raw, envelope))
    assert outcomes[0].status is OutcomeStatus.DELIVERED


def test_a_missing_password_stops_the_installation_from_opening(tmp_path, submission):
    with pytest.raises(ConfigError, match="PROTEGE_SUBMISSION_PASSWORD"):
        SubmissionTransport(config_for(tmp_path, submission, password=None))


def test_the_probe_logs_in_and_leaves_without_a_mail(tmp_path, submission):
    found = probe_submission(SubmissionTransport(config_for(tmp_path, submission)))
    assert found["problems"] == []
    assert "PLAIN" in found["auth"]
    assert submission.dovecot.messages(PERSON.address) == []
    wrong = probe_submission(
        SubmissionTransport(config_for(tmp_path, submission, password="not it"))
    )
    assert "refused the login" in wrong["problems"][0]


def test_a_token_refused_as_run_out_is_asked_for_afresh_once(tmp_path, submission):
    server = submission.dovecot
    expired = server.oauth_token(AGENT.address, lifetime=-60)
    valid = server.oauth_token(AGENT.address)
    counter = tmp_path / "asked"
    printer = shlex.join(
        [
            sys.executable,
            "-c",
            f"import pathlib; p = pathlib.Path({str(counter)!r}); "
            "n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n)); "
            f"print({expired!r} if n == 1 else {valid!r})",
        ]
    )
    config = config_for(tmp_path, submission, password=None, oauth2_command=printer)
    raw, envelope = outgoing(8)
    outcomes = list(SubmissionTransport(config).send(raw, envelope))
    assert outcomes[0].status is OutcomeStatus.DELIVERED
    assert counter.read_text() == "2"


def test_a_token_command_that_fails_fails_only_this_attempt(tmp_path, submission):
    failing = shlex.join([sys.executable, "-c", "import sys; sys.exit(1)"])
    config = config_for(tmp_path, submission, password=None, oauth2_command=failing)
    raw, envelope = outgoing(9)
    outcomes = list(SubmissionTransport(config).send(raw, envelope))
    assert outcomes[0].status is OutcomeStatus.DEFERRED  # tried again later, not refused
    assert "oauth2_command" in outcomes[0].reason
