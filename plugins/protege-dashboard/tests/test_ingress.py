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
from protege.models import Agent, Message, MessageAttachment, Run
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


SUNDAE = "sundae@thescoop.example"


def relay(web, raw, auth=RELAY, content_type="message/rfc822", to=SUNDAE):
    headers = {"Content-Type": content_type}
    if to is not None:
        headers["Protege-Envelope-To"] = to
    return web.post("/ingress/relay", content=raw, auth=auth, headers=headers)


def postmark(web, payload, auth=POSTMARK, content_type="application/json"):
    if isinstance(payload, dict):
        payload = {"OriginalRecipient": SUNDAE, **payload}
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return web.post(
        "/ingress/postmark", content=body, auth=auth, headers={"Content-Type": content_type}
    )


def sendgrid(web, raw, auth=SENDGRID, envelope=None):
    envelope = {"to": [SUNDAE], "from": "kid@gmail.example"} if envelope is None else envelope
    fields = {"email": (None, raw), "envelope": (None, json.dumps(envelope))}
    return web.post("/ingress/sendgrid", files=fields, auth=auth)


def mailgun_fields(raw, key=MAILGUN_KEY, timestamp=None, token="tok-1", recipient=SUNDAE):
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
    answer = relay(web, mail(to="nobody@thescoop.example"), to="nobody@thescoop.example")
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
    payload = {"OriginalRecipient": SUNDAE, "RawEmail": raw}
    assert postmark(web, json.dumps(payload).encode()).status_code == 204
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


# --- every content type each provider documents -----------------------------------------


def test_mailgun_url_encoded_body_mime_is_decoded_byte_for_byte(web, limited):
    # Mailgun posts mail without attachments URL-encoded: "+", "&", "=", "%" and UTF-8
    # in the message must come back as they were.
    raw = mail(body="50% off + free cones & more = joy, caf\u00e9")
    answer = web.post("/ingress/mailgun", data=mailgun_fields(raw.decode()))
    assert answer.status_code == 204, answer.text
    (message,) = stored()
    assert blobs.read(message.raw_blob, limited.data_dir) == raw
    assert "50% off + free cones & more = joy, café" in message.body_text


def test_mailgun_multipart_body_mime_with_attachment_parts_is_taken(web, limited):
    # With attachments Mailgun posts multipart/form-data; the attachments are in body-mime.
    raw = mail()
    fields = {k: (None, v) for k, v in mailgun_fields(raw.decode()).items()}
    answer = web.post(
        "/ingress/mailgun", files={**fields, "attachment-1": ("a.txt", b"hello", "text/plain")}
    )
    assert answer.status_code == 204, answer.text
    (message,) = stored()
    assert blobs.read(message.raw_blob, limited.data_dir) == raw


def test_sendgrid_parsed_fields_with_attachments_are_rebuilt_with_them(web, limited):
    fields = {
        "headers": (None, "From: kid@gmail.example\nTo: sundae@thescoop.example\nSubject: Hi\n"),
        "text": (None, "Here is my receipt."),
        "envelope": (None, json.dumps({"to": [SUNDAE], "from": "kid@gmail.example"})),
        "attachments": (None, "1"),
        "attachment1": ("receipt.csv", b"order,total\nSCP-1042,12.50\n", "text/csv"),
    }
    answer = web.post("/ingress/sendgrid", files=fields, auth=SENDGRID)
    assert answer.status_code == 204, answer.text
    (message,) = stored()
    assert message.body_text.strip() == "Here is my receipt."
    (attachment,) = MessageAttachment.select().where(MessageAttachment.message == message)
    assert attachment.blob.filename == "receipt.csv"
    assert blobs.read(attachment.blob, limited.data_dir) == b"order,total\nSCP-1042,12.50\n"


def test_postmark_json_is_its_only_type(web):
    payload = {"OriginalRecipient": SUNDAE, "RawEmail": mail().decode()}
    answer = web.post("/ingress/postmark", data=payload, auth=POSTMARK)  # a form, not JSON
    assert answer.status_code == 415
    assert postmark(web, payload).status_code == 204


@pytest.mark.parametrize(
    "payload",
    [
        {"RawEmail": "x", "OriginalRecipient": 3},
        {"RawEmail": "x", "OriginalRecipient": {"a": [[["deep"]]]}},
        {"RawEmail": "x", "OriginalRecipient": ""},
        {"RawEmail": {"nested": True}, "OriginalRecipient": SUNDAE},
    ],
)
def test_postmark_fields_of_the_wrong_type_are_refused_plainly(web, payload):
    answer = postmark(web, json.dumps(payload).encode())
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("text/plain")
    assert stored() == []


# --- delivered to the envelope, never to headers anyone can write -------------------------


@pytest.fixture
def scout(scoop):
    """A second agent, whom the mail's own headers name but the envelope does not."""
    return Agent.create(name="Scout", address="scout@thescoop.example")


def named_in_headers(to="scout@thescoop.example"):
    """A mail whose Delivered-To and Cc name Scout: anyone can write them."""
    return f"Delivered-To: {to}\r\nCc: {to}\r\n".encode() + mail(to=SUNDAE)


def test_relay_delivers_to_its_envelope_recipient_only(web, scout):
    assert relay(web, named_in_headers()).status_code == 204
    assert [m.agent.name for m in stored()] == ["Sundae"]


def test_relay_without_an_envelope_recipient_is_refused_and_stores_nothing(web, scout):
    answer = relay(web, named_in_headers(), to=None)
    assert answer.status_code == 422
    assert "Protege-Envelope-To" in answer.text
    assert stored() == []


def test_relay_takes_several_envelope_recipients(web, scout):
    answer = relay(web, mail(), to=f"{SUNDAE}, <scout@thescoop.example>")
    assert answer.status_code == 204
    assert sorted(m.agent.name for m in stored()) == ["Scout", "Sundae"]


def test_postmark_delivers_to_the_original_recipient_only(web, scout):
    payload = {"OriginalRecipient": SUNDAE, "RawEmail": named_in_headers().decode()}
    assert postmark(web, payload).status_code == 204
    assert [m.agent.name for m in stored()] == ["Sundae"]


def test_postmark_without_an_original_recipient_is_refused(web, scout):
    body = json.dumps({"RawEmail": named_in_headers().decode()}).encode()
    assert postmark(web, body).status_code == 422
    assert stored() == []


def test_sendgrid_without_an_envelope_is_refused(web, scout):
    fields = {"email": (None, named_in_headers().decode())}
    assert web.post("/ingress/sendgrid", files=fields, auth=SENDGRID).status_code == 422
    assert stored() == []


def test_mailgun_delivers_to_its_recipient_only_and_needs_one(web, scout):
    fields = mailgun_fields(named_in_headers().decode(), recipient=None)
    assert mailgun(web, fields).status_code == 422
    fields = mailgun_fields(named_in_headers().decode(), token="tok-2")
    assert mailgun(web, fields).status_code == 204
    assert [m.agent.name for m in stored()] == ["Sundae"]


# --- Mailgun's tokens, remembered in the database ----------------------------------------


def test_mailgun_refuses_a_replay_after_a_restart_or_by_another_process(limited, scoop):
    fields = mailgun_fields(mail().decode(), token="once-only")
    for number, expected in enumerate((204, 401)):
        # A new app each time: a restarted `protege dashboard`, or a second one beside it.
        app = create_app(limited, DashboardSettings(), SECRETS)
        with TestClient(app, base_url="http://127.0.0.1") as web:
            assert mailgun(web, fields).status_code == expected, number
    assert len(stored()) == 1


def test_a_signed_request_that_was_not_taken_may_come_again(web):
    # Mail for an agent not made yet is refused; Mailgun sends the same signed fields again
    # later, and by then the agent exists: the retry is taken, not refused as a replay.
    fields = mailgun_fields(
        mail(to="scout@thescoop.example").decode(), recipient="scout@thescoop.example"
    )
    assert mailgun(web, fields).status_code == 422
    Agent.create(name="Scout", address="scout@thescoop.example")
    assert mailgun(web, fields).status_code == 204
    assert mailgun(web, fields).status_code == 401  # once taken, a replay is refused
    assert [m.subject for m in stored()] == ["Order SCP-1042"]


# Just past the window in the past (time only takes it further), and a margin past it in
# the future, where the seconds a loaded machine takes to answer bring it nearer.
@pytest.mark.parametrize("offset", [-3600, 3600, -301, 360])
def test_mailgun_refuses_a_timestamp_outside_the_window_either_side(web, offset):
    timestamp = str(int(time.time()) + offset)
    answer = mailgun(web, mailgun_fields(mail().decode(), timestamp=timestamp))
    assert answer.status_code == 401
    assert stored() == []


def test_relay_hands_on_the_envelope_sender_a_bounce_has_none(web):
    answer = web.post(
        "/ingress/relay",
        content=mail(),
        auth=RELAY,
        headers={
            "Content-Type": "message/rfc822",
            "Protege-Envelope-To": SUNDAE,
            "Protege-Envelope-From": "<>",
        },
    )
    assert answer.status_code == 204
    (message,) = stored()
    assert "null return path" in message.flags
    assert Run.select().count() == 0


def test_sendgrid_envelope_nested_too_deeply_is_refused_plainly(web):
    fields = {"email": (None, mail().decode()), "envelope": (None, "[" * 100_000)}
    answer = web.post("/ingress/sendgrid", files=fields, auth=SENDGRID)
    assert answer.status_code == 422
    assert answer.text == "the envelope field is not JSON\n"
    assert stored() == []


def test_too_many_envelope_recipients_are_refused(web):
    crowd = ", ".join(f"p{i}@thescoop.example" for i in range(101))
    assert relay(web, mail(), to=crowd).status_code == 413
    assert mailgun(web, mailgun_fields(mail().decode(), recipient=crowd)).status_code == 413
    assert stored() == []


def test_a_chunked_body_without_a_length_is_cut_at_the_cap(web):
    def pieces():
        for _ in range(LIMIT // 1024 + 2):
            yield b"x" * 1024

    answer = web.post(
        "/ingress/relay",
        content=pieces(),
        auth=RELAY,
        headers={"Content-Type": "message/rfc822", "Protege-Envelope-To": SUNDAE},
    )
    assert answer.status_code == 413
    assert stored() == []
