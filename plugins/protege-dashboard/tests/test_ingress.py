"""The HTTP ways in for mail: the same ingest as SMTP, the same limits, answers in HTTP."""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import time
from email import policy
from email.message import EmailMessage

import attrs
import pytest
from starlette.testclient import TestClient

from protege import blobs
from protege.gateway.smtp import free_port, start_gateway
from protege.models import Message, Run
from protege_dashboard.app import create_app
from protege_dashboard.settings import DashboardSettings

LIMIT = 8 * 1024
RELAY = ("protege", "relay-secret-1")
POSTMARK = ("postmark", "postmark-secret-1")
SENDGRID = ("sendgrid", "sendgrid-secret-1")
MAILGUN_KEY = "mailgun-key-1"
SECRETS = {
    "PROTEGE_RELAY_PASSWORD": RELAY[1],
    "PROTEGE_POSTMARK_PASSWORD": POSTMARK[1],
    "PROTEGE_SENDGRID_PASSWORD": SENDGRID[1],
    "MAILGUN_SIGNING_KEY": MAILGUN_KEY,
}


def mail(sender="kid@gmail.example", to="sundae@thescoop.example", body="Where is my order?"):
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = "Order SCP-1042"
    message["Message-ID"] = "<order-1@gmail.example>"
    message.set_content(body)
    return message.as_bytes(policy=policy.SMTP)  # CRLF, as it travels


@pytest.fixture
def limited(installation):
    """The installation with a small message limit, so oversized mail is cheap to make."""
    config = installation.config
    small = attrs.evolve(config, mail=attrs.evolve(config.mail, max_message_bytes=LIMIT))
    return attrs.evolve(installation, config=small)


@pytest.fixture
def web(limited, scoop):
    with TestClient(
        create_app(limited, DashboardSettings(), SECRETS), base_url="http://127.0.0.1"
    ) as client:
        yield client


def relay(web, raw, auth=RELAY, content_type="message/rfc822"):
    return web.post(
        "/ingress/relay", content=raw, auth=auth, headers={"Content-Type": content_type}
    )


def postmark(web, payload, auth=POSTMARK, content_type="application/json"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return web.post(
        "/ingress/postmark", content=body, auth=auth, headers={"Content-Type": content_type}
    )


def sendgrid(web, raw, auth=SENDGRID, envelope=None):
    fields = {"email": (None, raw)}
    if envelope is not None:
        fields["envelope"] = (None, json.dumps(envelope))
    return web.post("/ingress/sendgrid", files=fields, auth=auth)


def mailgun_fields(raw, key=MAILGUN_KEY, timestamp=None, token="tok-1", recipient=None):
    timestamp = str(int(time.time())) if timestamp is None else timestamp
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    fields = {"timestamp": timestamp, "token": token, "signature": signature, "body-mime": raw}
    if recipient:
        fields["recipient"] = recipient
    return fields


def mailgun(web, fields):
    return web.post("/ingress/mailgun", files={k: (None, v) for k, v in fields.items()})


def stored():
    return list(Message.select().order_by(Message.id))


# --- the relay ---------------------------------------------------------------------------


def test_relay_stores_the_message_and_queues_its_run(web):
    answer = relay(web, mail())
    assert answer.status_code == 204
    (message,) = stored()
    assert (message.sender, message.subject, message.status) == (
        "kid@gmail.example",
        "Order SCP-1042",
        "accepted",
    )
    assert Run.get(Run.message == message).status == "queued"


@pytest.mark.parametrize("auth", [None, ("protege", "wrong"), ("protege", "")])
def test_relay_refuses_a_wrong_password_and_stores_nothing(web, auth):
    answer = relay(web, mail(), auth=auth)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Basic")
    assert stored() == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/json", ""])
def test_relay_takes_only_rfc822(web, content_type):
    assert relay(web, mail(), content_type=content_type).status_code == 415
    assert stored() == []


def test_relay_refuses_an_oversized_message_as_smtp_says_552(web):
    big = mail(body="x" * (LIMIT + 100))
    answer = relay(web, big)
    assert answer.status_code == 413
    assert stored() == []


def test_relay_refuses_mail_for_no_agent_as_smtp_says_550(web):
    answer = relay(web, mail(to="nobody@thescoop.example"))
    assert answer.status_code == 422
    assert "no agent" in answer.text
    assert stored() == []


def test_relay_refuses_a_sender_the_access_rules_refuse_but_keeps_the_mail(web, scoop):
    scoop.add_access_rule("deny", "*@gmail.example")
    answer = relay(web, mail())
    assert answer.status_code == 422
    assert answer.text == "this address does not accept your message\n"  # no rule revealed
    (message,) = stored()
    assert message.status == "refused"
    assert Run.select().count() == 0


def test_relay_refuses_too_many_header_addresses_as_smtp_says_552(web, limited):
    crowd = ", ".join(f"p{i}@x.example" for i in range(limited.config.mail.max_header_addresses))
    raw = f"Cc: {crowd}\r\n".encode() + mail()
    web.app.state.installation = attrs.evolve(
        limited,
        config=attrs.evolve(
            limited.config,
            mail=attrs.evolve(limited.config.mail, max_message_bytes=len(raw) + 1),
        ),
    )
    answer = relay(web, raw)
    assert answer.status_code == 413
    assert "addresses" in answer.text
    assert stored() == []


def test_an_ingress_without_its_secret_is_closed(limited, scoop):
    app = create_app(limited, DashboardSettings(), {})
    with TestClient(app, base_url="http://127.0.0.1") as web:
        assert relay(web, mail()).status_code == 404
        assert postmark(web, {"RawEmail": mail().decode()}).status_code == 404
        assert mailgun(web, mailgun_fields(mail().decode())).status_code == 404
    assert stored() == []


def send_by_smtp(limited, raw: bytes) -> None:
    """Send ``raw`` to Sundae through the SMTP gateway, as a mail server would."""
    gateway = start_gateway(limited.config, "127.0.0.1", free_port())
    try:
        with smtplib.SMTP(gateway.hostname, gateway.port, timeout=30) as client:
            client.sendmail("kid@gmail.example", ["sundae@thescoop.example"], raw)
    finally:
        gateway.stop()


def test_the_relay_and_smtp_store_the_same_message_alike(web, limited):
    raw = mail(body="Same words, either way in.")
    send_by_smtp(limited, raw)
    fields = ("sender", "subject", "body_text", "status", "to_addresses", "flags", "thread_key")
    (first,) = stored()
    taken = [getattr(first, f) for f in fields]
    # The same mail again is taken once, whichever way it comes: forget the first copy.
    Run.delete().execute()
    Message.delete().execute()
    assert relay(web, raw).status_code == 204
    (by_http,) = stored()
    assert [getattr(by_http, f) for f in fields] == taken


def test_the_same_mail_by_smtp_and_by_the_relay_is_taken_once(web, limited):
    raw = mail(body="Same words, either way in.")
    send_by_smtp(limited, raw)
    assert relay(web, raw).status_code == 204
    assert len(stored()) == 1


# --- Postmark ----------------------------------------------------------------------------


def test_postmark_raw_email_is_ingested(web):
    payload = {"From": "ignored@x.example", "RawEmail": mail().decode(), "TextBody": "ignored"}
    assert postmark(web, payload).status_code == 204
    (message,) = stored()
    assert message.sender == "kid@gmail.example"  # from the raw message, not the JSON


def test_postmark_refuses_a_wrong_password(web):
    assert postmark(web, {"RawEmail": mail().decode()}, auth=("postmark", "no")).status_code == 401
    assert stored() == []


def test_postmark_takes_only_json(web):
    answer = postmark(
        web, json.dumps({"RawEmail": mail().decode()}).encode(), content_type="text/plain"
    )
    assert answer.status_code == 415


def test_postmark_refuses_an_oversized_body_and_an_oversized_message(web):
    huge = {"RawEmail": "x" * (2 * LIMIT + 1024 * 1024 + 10)}
    assert postmark(web, huge).status_code == 413
    big = {"RawEmail": mail(body="y" * (LIMIT + 100)).decode()}
    assert postmark(web, big).status_code == 413
    assert stored() == []


def test_postmark_text_that_is_no_unicode_is_still_taken(web):
    raw = mail(body="caf\u00e9").decode().replace("caf", "\ud800caf")
    assert postmark(web, json.dumps({"RawEmail": raw}).encode()).status_code == 204
    assert len(stored()) == 1


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b'{"RawEmail": 3}', b"{}"])
def test_postmark_without_a_raw_email_is_unprocessable(web, payload):
    assert postmark(web, payload).status_code == 422


# --- SendGrid ----------------------------------------------------------------------------


def test_sendgrid_raw_mime_is_ingested_for_the_envelope_recipients(web):
    raw = mail(to="someone-else@thescoop.example").decode()
    envelope = {"to": ["sundae@thescoop.example"], "from": "kid@gmail.example"}
    assert sendgrid(web, raw, envelope=envelope).status_code == 204
    (message,) = stored()
    assert message.agent.name == "Sundae"


def test_sendgrid_keeps_every_byte_of_an_eight_bit_message(web, limited):
    raw = mail().replace(b"Where is my order?", b"O\xf9 est ma commande ?")  # latin-1
    raw = raw.replace(b'charset="utf-8"', b'charset="iso-8859-1"')
    assert sendgrid(web, raw).status_code == 204
    (message,) = stored()
    assert blobs.read(message.raw_blob, limited.data_dir) == raw
    assert "Où est ma commande ?" in message.body_text


def test_sendgrid_refuses_a_wrong_password(web):
    assert sendgrid(web, mail().decode(), auth=("sendgrid", "no")).status_code == 401
    assert stored() == []


def test_sendgrid_takes_only_multipart_forms(web):
    answer = web.post(
        "/ingress/sendgrid", data={"email": mail().decode()}, auth=SENDGRID
    )  # url-encoded
    assert answer.status_code == 415


def test_sendgrid_refuses_an_oversized_body(web):
    answer = sendgrid(web, "z" * (2 * LIMIT + 1024 * 1024 + 10))
    assert answer.status_code == 413
    assert stored() == []


def test_sendgrid_without_the_email_field_is_unprocessable(web):
    answer = web.post("/ingress/sendgrid", files={"text": (None, "hi")}, auth=SENDGRID)
    assert answer.status_code == 422


def test_sendgrid_refuses_a_file_part(web):
    answer = web.post(
        "/ingress/sendgrid",
        files={"email": (None, mail().decode()), "attachment1": ("a.exe", b"MZ")},
        auth=SENDGRID,
    )
    assert answer.status_code == 422
    assert stored() == []


# --- Mailgun -----------------------------------------------------------------------------


def test_mailgun_signed_body_mime_is_ingested(web):
    answer = mailgun(web, mailgun_fields(mail().decode(), recipient="sundae@thescoop.example"))
    assert answer.status_code == 204
    assert len(stored()) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"signature": "0" * 64},
        {"token": "another"},  # signed for tok-1
        {"timestamp": "1"},
        {"signature": ""},
    ],
)
def test_mailgun_refuses_a_bad_signature(web, change):
    fields = {**mailgun_fields(mail().decode()), **change}
    assert mailgun(web, fields).status_code == 401
    assert stored() == []


def test_mailgun_refuses_a_signature_made_with_another_key(web):
    assert mailgun(web, mailgun_fields(mail().decode(), key="other")).status_code == 401


def test_mailgun_refuses_an_old_signed_request(web):
    old = str(int(time.time()) - 3600)
    assert mailgun(web, mailgun_fields(mail().decode(), timestamp=old)).status_code == 401


def test_mailgun_refuses_a_replayed_request(web):
    fields = mailgun_fields(mail().decode(), token="once")
    assert mailgun(web, fields).status_code == 204
    assert mailgun(web, fields).status_code == 401
    assert len(stored()) == 1


def test_mailgun_takes_only_forms(web):
    answer = web.post(
        "/ingress/mailgun",
        content=json.dumps(mailgun_fields(mail().decode())),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 415


def test_mailgun_refuses_an_oversized_body(web):
    fields = mailgun_fields("w" * (2 * LIMIT + 1024 * 1024 + 10))
    assert mailgun(web, fields).status_code == 413
    assert stored() == []


def test_a_compressed_body_is_refused_not_stored_as_garbage(web):
    import gzip

    answer = web.post(
        "/ingress/relay",
        content=gzip.compress(mail()),
        auth=RELAY,
        headers={"Content-Type": "message/rfc822", "Content-Encoding": "gzip"},
    )
    assert answer.status_code == 415
    assert stored() == []


def test_wrong_ingress_passwords_are_limited_per_address(web):
    for _ in range(5):
        assert relay(web, mail(), auth=("relay", "guess")).status_code == 401
    assert relay(web, mail(), auth=("relay", "guess")).status_code == 429
    assert relay(web, mail()).status_code == 429  # the right one, too late
    assert stored() == []


def test_right_ingress_passwords_are_not_limited(web):
    for number in range(8):
        raw = mail(body=f"Mail {number}.").replace(b"<kid.1@", f"<kid.{number}@".encode())
        assert relay(web, raw).status_code == 204


@pytest.mark.parametrize("timestamp", ["nan", "inf", "-1", " 1700000000", "1.5e9", "1e99"])
def test_a_mailgun_timestamp_that_is_not_whole_seconds_is_refused(web, timestamp):
    # Signed with the right key, as a leaked key or a confused signer would: "nan" never
    # aged, so such a request could be replayed for ever.
    answer = mailgun(web, mailgun_fields(mail().decode(), timestamp=timestamp))
    assert answer.status_code == 401
    assert stored() == []
