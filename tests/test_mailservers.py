"""The private Dovecot and Postfix of ``tests.mailservers`` do what the IMAP and submission
tests rely on: TLS with the test CA only, users and their passwords or tokens, mail
appended and read back by UID, IDLE advertised or not, a new UIDVALIDITY, restarts that
keep the mail, and submission that delivers only for those who authenticated."""

from __future__ import annotations

import imaplib
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path

import pytest

from tests.mailservers import AGENT, PERSON, Dovecot, Submission, group_processes


def mail(subject: str, sender: str = PERSON.address, to: str = AGENT.address) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = "Wed, 02 Dec 2026 10:00:00 +0000"
    message["Message-ID"] = f"<{subject.replace(' ', '.')}@example.test>"
    message.set_content(f"About {subject}.\n")
    return message.as_bytes(policy=SMTP)


def trusting(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def capabilities(dovecot: Dovecot) -> set[str]:
    """What the server advertises to a logged-in user."""
    client = dovecot.imap(AGENT.address)
    try:
        status, data = client.capability()
    finally:
        client.logout()
    assert status == "OK", data
    return set(data[0].decode().upper().split())


def test_a_user_logs_in_over_implicit_tls_or_starttls_verifying_the_test_ca(dovecot):
    with imaplib.IMAP4_SSL(
        dovecot.host, dovecot.imaps_port, ssl_context=trusting(dovecot.ca_file)
    ) as client:
        assert client.login(AGENT.address, AGENT.password)[0] == "OK"
    with imaplib.IMAP4(dovecot.host, dovecot.imap_port) as client:
        assert "STARTTLS" in client.capabilities
        client.starttls(trusting(dovecot.ca_file))
        assert client.login(PERSON.address, PERSON.password)[0] == "OK"
    assert (dovecot.agent, dovecot.person) == (AGENT, PERSON)
    newcomer = dovecot.add_user("newcomer@example.test", 'any: "password" at all')
    with imaplib.IMAP4_SSL(
        dovecot.host, dovecot.imaps_port, ssl_context=trusting(dovecot.ca_file)
    ) as client:
        assert client.login(*newcomer)[0] == "OK"  # the running server knows them at once


def test_a_certificate_the_client_does_not_trust_is_refused(dovecot):
    for context in (trusting(dovecot.untrusted_ca_file), ssl.create_default_context()):
        with pytest.raises(ssl.SSLCertVerificationError):
            imaplib.IMAP4_SSL(dovecot.host, dovecot.imaps_port, ssl_context=context)
        client = imaplib.IMAP4(dovecot.host, dovecot.imap_port)
        with pytest.raises(ssl.SSLCertVerificationError):
            client.starttls(context)
        client.sock.close()  # no LOGOUT: the handshake failed with the connection


def test_wrong_passwords_and_tokens_are_refused(dovecot):
    with (
        imaplib.IMAP4_SSL(
            dovecot.host, dovecot.imaps_port, ssl_context=trusting(dovecot.ca_file)
        ) as client,
        pytest.raises(imaplib.IMAP4.error, match="AUTHENTICATIONFAILED"),
    ):
        client.login(AGENT.address, PERSON.password)
    refused = [
        dovecot.oauth_token(AGENT.address, valid=False),
        dovecot.oauth_token(AGENT.address, lifetime=-60),
        dovecot.oauth_token(PERSON.address),  # a token for someone else
    ]
    for token in [dovecot.oauth_token(AGENT.address), *refused]:
        with imaplib.IMAP4_SSL(
            dovecot.host, dovecot.imaps_port, ssl_context=trusting(dovecot.ca_file)
        ) as client:
            assert "AUTH=XOAUTH2" in client.capabilities
            said = f"user={AGENT.address}\x01auth=Bearer {token}\x01\x01".encode()
            if token in refused:
                with pytest.raises(imaplib.IMAP4.error, match="AUTHENTICATIONFAILED"):
                    client.authenticate("XOAUTH2", lambda _, said=said: said)
            else:
                assert client.authenticate("XOAUTH2", lambda _, said=said: said)[0] == "OK"


def test_appended_mail_reads_back_by_uid_with_its_flags(dovecot):
    first = dovecot.append(AGENT.address, mail("Melted"))
    second = dovecot.append(AGENT.address, mail("Refund"), flags=["\\Seen", "$Forwarded"])
    assert second > first
    backlog = dovecot.append_many(AGENT.address, [mail(f"Order {n}") for n in range(600)])
    assert backlog == list(range(second + 1, second + 601))

    held = dovecot.messages(AGENT.address)
    assert [m.uid for m in held] == [first, second, *backlog]
    assert held[0] == (first, frozenset(), mail("Melted"))
    assert held[1].flags == {"\\Seen", "$Forwarded"}
    assert held[-1].raw == mail("Order 599")
    assert dovecot.messages(PERSON.address) == []

    assert {"INBOX", "Sent", "Drafts", "Trash", "Junk"} <= set(dovecot.folders(AGENT.address))
    dovecot.create_folder(AGENT.address, "Done by protege")
    assert "Done by protege" in dovecot.folders(AGENT.address)
    filed = dovecot.append(AGENT.address, mail("Filed"), folder="Done by protege")
    assert dovecot.messages(AGENT.address, "Done by protege") == [
        (filed, frozenset(), mail("Filed"))
    ]


def test_idle_is_advertised_unless_the_server_is_made_without(dovecot, dovecot_no_idle):
    with_idle, without = capabilities(dovecot), capabilities(dovecot_no_idle)
    assert "IDLE" in with_idle
    assert "IDLE" not in without
    assert with_idle - {"IDLE"} == without  # the rest as Dovecot has it: UIDPLUS, MOVE...
    with imaplib.IMAP4_SSL(
        dovecot_no_idle.host, dovecot_no_idle.imaps_port, ssl_context=trusting(dovecot.ca_file)
    ) as client:
        assert "IDLE" not in client.capabilities  # nor before logging in


def test_a_new_uidvalidity_numbers_the_mail_again(dovecot):
    dovecot.create_folder(AGENT.address, "Archive")
    for folder in ("INBOX", "Archive"):
        for n in range(3):
            dovecot.append(AGENT.address, mail(f"{folder} {n}"), folder=folder)
        dovecot.append(AGENT.address, mail(f"{folder} seen"), folder=folder, flags=["\\Seen"])
    before = dovecot.messages(AGENT.address)
    dovecot.append(AGENT.address, mail("Later"))
    assert dovecot.messages(AGENT.address)[-1].uid == 5
    old = dovecot.uidvalidity(AGENT.address)
    archive = dovecot.uidvalidity(AGENT.address, "Archive")

    new = dovecot.change_uidvalidity(AGENT.address)

    assert new != old
    assert dovecot.uidvalidity(AGENT.address) == new
    assert dovecot.uidvalidity(AGENT.address, "Archive") == archive
    after = dovecot.messages(AGENT.address)
    assert sorted(m.raw for m in after) == sorted([*(m.raw for m in before), mail("Later")])
    assert [m.uid for m in after] == [1, 2, 3, 4, 5]
    assert [m.flags for m in after if m.raw == mail("INBOX seen")] == [{"\\Seen"}]
    assert dovecot.change_uidvalidity(AGENT.address, "Archive") != archive


def test_restart_keeps_the_mail_and_the_ports_and_drops_the_connections(dovecot):
    uid = dovecot.append(AGENT.address, mail("Before the restart"), flags=["\\Flagged"])
    validity = dovecot.uidvalidity(AGENT.address)
    ports = (dovecot.imaps_port, dovecot.imap_port, dovecot.lmtp_port, dovecot.auth_port)
    connected = dovecot.imap(AGENT.address)
    connected.select("INBOX")

    dovecot.restart()

    with pytest.raises((imaplib.IMAP4.abort, OSError)):
        connected.noop()
    assert (dovecot.imaps_port, dovecot.imap_port, dovecot.lmtp_port, dovecot.auth_port) == ports
    assert dovecot.messages(AGENT.address) == [
        (uid, frozenset({"\\Flagged"}), mail("Before the restart"))
    ]
    assert dovecot.uidvalidity(AGENT.address) == validity


def test_kick_drops_a_users_connections_and_kill_and_stop_end_every_process(dovecot):
    agent, person = dovecot.imap(AGENT.address), dovecot.imap(PERSON.address)
    agent.select("INBOX")
    dovecot.kick(AGENT.address)
    with pytest.raises((imaplib.IMAP4.abort, OSError)):
        agent.noop()
    assert person.noop()[0] == "OK"

    for end in (dovecot.kill, dovecot.stop):
        group = dovecot.daemon.process.pid
        assert group_processes(group)
        end()
        assert group_processes(group) == []
        with socket.socket() as probe:
            assert probe.connect_ex((dovecot.host, dovecot.imaps_port)) != 0
        dovecot.start()
        assert dovecot.messages(AGENT.address) == []


def test_servers_leave_nothing_behind(mail_certificates):
    with Dovecot(certificates=mail_certificates) as dovecot, Submission(dovecot) as postfix:
        dovecot.imap(AGENT.address)  # left logged in
        with smtplib.SMTP(postfix.host, postfix.starttls_port) as client:
            client.ehlo()
            groups = [dovecot.daemon.process.pid, postfix.daemon.process.pid]
            folders = [dovecot.folder, postfix.folder]
            assert all(group_processes(group) for group in groups)
    assert [group_processes(group) for group in groups] == [[], []]
    assert not any(folder.exists() for folder in folders)


def submit(submission: Submission, raw: bytes, *, to: list[str], implicit_tls=False) -> dict:
    context = trusting(submission.ca_file)
    if implicit_tls:
        client = smtplib.SMTP_SSL(submission.host, submission.tls_port, context=context)
    else:
        client = smtplib.SMTP(submission.host, submission.starttls_port)
        client.starttls(context=context)
    with client:
        client.login(AGENT.address, AGENT.password)
        return client.sendmail(AGENT.address, to, raw)


def test_submission_with_auth_delivers_into_dovecot(submission, dovecot):
    sent = mail("Your refund", sender=AGENT.address, to=PERSON.address)
    assert submit(submission, sent, to=[PERSON.address]) == {}
    assert submit(submission, sent, to=[PERSON.address], implicit_tls=True) == {}
    delivered = dovecot.await_messages(PERSON.address, 2)
    assert all(m.raw.endswith(sent) for m in delivered), submission.logs()
    assert b"with ESMTPSA" in delivered[0].raw  # submitted over TLS, authenticated

    refused = submit(submission, sent, to=[PERSON.address, "jane@acme.example"])
    assert refused == {
        "jane@acme.example": (
            550,
            b"5.7.1 <jane@acme.example>: Recipient address rejected:"
            b" the test server sends no mail out",
        )
    }
    assert len(dovecot.await_messages(PERSON.address, 3)) == 3


def test_submission_with_an_oauth2_token(submission, dovecot):
    context = trusting(submission.ca_file)
    with smtplib.SMTP_SSL(submission.host, submission.tls_port, context=context) as client:
        token = dovecot.oauth_token(AGENT.address)
        said = f"user={AGENT.address}\x01auth=Bearer {token}\x01\x01"
        assert client.auth("XOAUTH2", lambda challenge=None: said)[0] == 235
        client.sendmail(AGENT.address, [PERSON.address], mail("By token", AGENT.address))
    assert dovecot.await_messages(PERSON.address, 1)[0].raw.endswith(
        mail("By token", AGENT.address)
    )


def test_submission_refuses_wrong_passwords_strangers_and_impostors(submission):
    context = trusting(submission.ca_file)
    with smtplib.SMTP(submission.host, submission.starttls_port) as client:
        client.ehlo()
        assert not client.has_extn("auth")  # not before STARTTLS
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:
            client.sendmail(AGENT.address, [PERSON.address], b"Subject: x\r\n\r\nx\r\n")
        assert refused.value.smtp_code == 530  # must issue STARTTLS first
    with smtplib.SMTP(submission.host, submission.starttls_port) as client:
        client.starttls(context=context)
        with pytest.raises(smtplib.SMTPAuthenticationError):
            client.login(AGENT.address, PERSON.password)
    with smtplib.SMTP_SSL(submission.host, submission.tls_port, context=context) as client:
        for to in (PERSON.address, "jane@acme.example"):  # no relay without AUTH
            with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
                client.sendmail(AGENT.address, [to], b"Subject: x\r\n\r\nx\r\n")
            ((code, _),) = refused.value.recipients.values()
            assert code == 554
    with smtplib.SMTP_SSL(submission.host, submission.tls_port, context=context) as client:
        client.login(AGENT.address, AGENT.password)
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:  # not as someone else
            client.sendmail(PERSON.address, [PERSON.address], b"Subject: x\r\n\r\nx\r\n")
        ((code, said),) = refused.value.recipients.values()
        assert code == 553, said
    with pytest.raises(ssl.SSLCertVerificationError):
        smtplib.SMTP_SSL(
            submission.host,
            submission.tls_port,
            context=trusting(submission.dovecot.untrusted_ca_file),
        )
