"""Who sent mail that came in over HTTP: DKIM from the raw message, and a provider's own
SPF/DKIM results only where the operator trusts that ingress's."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from itertools import count

import attrs
import pytest
from starlette.testclient import TestClient

from protege.config import AuthenticationSettings
from protege.models import Message
from protege.testing import DkimKey, with_plugin_settings
from protege_dashboard.app import create_app
from protege_dashboard.settings import DashboardSettings, read_settings

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
FORGED_SENDGRID = {"dkim": "{@thescoop.com : pass}", "SPF": "pass"}
TOKENS = count()
SUNDAE = "sundae@thescoop.example"


@pytest.fixture(scope="module")
def scoop_key() -> DkimKey:
    """thescoop.com's signing key, whose public half the installation pins."""
    return DkimKey.generate("thescoop.com", "sel")


@pytest.fixture(scope="module")
def unpublished_key() -> DkimKey:
    """A key claiming thescoop.com whose public half no DNS answers: protege cannot check
    what it signs, only a provider that says it did."""
    return DkimKey.generate("thescoop.com", "gone")


@pytest.fixture
def pinned(installation, scoop_key):
    """The installation with thescoop.com's key pinned and no other DNS."""
    config = installation.config
    authentication = AuthenticationSettings(offline=True, dns={scoop_key.name: scoop_key.record})
    mail_settings = attrs.evolve(config.mail, authentication=authentication)
    return attrs.evolve(installation, config=attrs.evolve(config, mail=mail_settings))


@pytest.fixture
def serve(pinned, scoop):
    """``serve(*trusted)``: a client of the dashboard trusting the provider verdicts of the
    ingresses named."""
    clients = []

    def start(*trusted: str) -> TestClient:
        settings = DashboardSettings(trust_provider_verdicts=trusted)
        client = TestClient(create_app(pinned, settings, SECRETS), base_url="http://127.0.0.1")
        clients.append(client.__enter__())
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def mail(sender: str = "Mara <mara@thescoop.com>", extra: str = "") -> bytes:
    return (
        f"From: {sender}\r\nTo: sundae@thescoop.example\r\nSubject: Refund SCP-1042\r\n"
        f"Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMessage-ID: <r1@thescoop.com>\r\n{extra}"
        "\r\nPlease refund order SCP-1042.\r\n"
    ).encode()


def relay(web: TestClient, raw: bytes):
    return web.post(
        "/ingress/relay",
        content=raw,
        auth=RELAY,
        headers={"Content-Type": "message/rfc822", "Protege-Envelope-To": SUNDAE},
    )


def sendgrid(web: TestClient, fields: dict, auth=SENDGRID):
    envelope = json.dumps({"to": [SUNDAE], "from": "mara@thescoop.com"})
    fields = {"envelope": envelope, **fields}
    return web.post("/ingress/sendgrid", files={k: (None, v) for k, v in fields.items()}, auth=auth)


PARSED_HEADERS = (
    "From: Mara <mara@thescoop.com>\n"
    "To: sundae@thescoop.example\n"
    "Subject: Refund SCP-1042\n"
    "Message-ID: <p1@thescoop.com>\n"
    "Content-Type: multipart/alternative;\n boundary=xyz\n"
)


def parsed_fields(**more: str) -> dict:
    """SendGrid's parsed mode: the header block and the text, no raw message."""
    return {
        "headers": PARSED_HEADERS,
        "text": "Please refund order SCP-1042.",
        "envelope": json.dumps({"to": ["sundae@thescoop.example"], "from": "mara@thescoop.com"}),
        **more,
    }


def mailgun(web: TestClient, raw: bytes, key: str = MAILGUN_KEY, **more: str):
    timestamp, token = str(int(time.time())), f"tok-{next(TOKENS)}"
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    fields = {
        "timestamp": timestamp,
        "token": token,
        "signature": signature,
        "body-mime": raw,
        "recipient": "sundae@thescoop.example",
        "sender": "mara@thescoop.com",
        **more,
    }
    return web.post("/ingress/mailgun", files={k: (None, v) for k, v in fields.items()})


def postmark(web: TestClient, payload: dict):
    return web.post(
        "/ingress/postmark",
        content=json.dumps({"OriginalRecipient": SUNDAE, **payload}).encode(),
        auth=POSTMARK,
        headers={"Content-Type": "application/json"},
    )


def the_message() -> Message:
    (message,) = Message.select()
    return message


# --- the relay: DKIM from the raw message ------------------------------------------------


def test_a_signed_message_through_the_relay_is_authenticated_by_dkim(serve, scoop_key):
    assert relay(serve(), scoop_key.sign(mail())).status_code == 204
    message = the_message()
    assert message.sender_authenticated
    assert (message.verdict.method, message.verdict.domain) == ("dkim", "thescoop.com")


def test_the_same_message_unsigned_is_not_authenticated(serve):
    assert relay(serve(), mail()).status_code == 204
    message = the_message()
    assert not message.sender_authenticated
    assert message.verdict.method == "none"
    assert message.verdict.from_domain == "thescoop.com"


def test_a_signature_broken_on_the_way_proves_nothing(serve, scoop_key):
    tampered = scoop_key.sign(mail()).replace(b"SCP-1042.", b"SCP-9999.")
    assert relay(serve(), tampered).status_code == 204
    assert not the_message().sender_authenticated


def test_the_relay_keeps_one_resolver_for_the_app(serve, scoop_key):
    web = serve()
    relay(web, scoop_key.sign(mail()))
    first = web.app.state.ingress_resolver[1]
    relay(web, scoop_key.sign(mail().replace(b"<r1@", b"<r2@")))
    assert web.app.state.ingress_resolver[1] is first
    assert [m.sender_authenticated for m in Message.select()] == [True, True]


# --- SendGrid ----------------------------------------------------------------------------


def test_sendgrid_raw_mode_signed_is_authenticated_by_dkim(serve, scoop_key):
    assert sendgrid(serve(), {"email": scoop_key.sign(mail())}).status_code == 204
    message = the_message()
    assert message.sender_authenticated
    assert message.verdict.method == "dkim"


def test_sendgrid_forged_verdicts_are_ignored_when_not_trusted(serve):
    web = serve()  # trusts no provider
    assert sendgrid(web, parsed_fields(**FORGED_SENDGRID)).status_code == 204
    assert sendgrid(web, {"email": mail(), **FORGED_SENDGRID}).status_code == 204
    parsed, raw = Message.select().order_by(Message.id)
    assert parsed.sender == raw.sender == "Mara <mara@thescoop.com>"
    assert not parsed.sender_authenticated
    assert "rebuilt" in parsed.verdict.reason
    assert not raw.sender_authenticated
    assert raw.verdict.method == "none"


def test_sendgrid_parsed_mode_with_trusted_verdicts_is_authenticated_by_relay(serve):
    web = serve("sendgrid")
    assert sendgrid(web, parsed_fields(dkim="{@thescoop.com : pass}")).status_code == 204
    message = the_message()
    assert message.sender_authenticated
    assert (message.verdict.method, message.verdict.domain) == ("relay", "thescoop.com")
    assert message.verdict.dmarc == "pass"
    assert "SendGrid" in message.verdict.reason
    assert message.body_text.strip() == "Please refund order SCP-1042."


def test_sendgrid_trusted_spf_pass_for_the_envelope_domain_authenticates(serve):
    assert sendgrid(serve("sendgrid"), parsed_fields(SPF="pass")).status_code == 204
    verdict = the_message().verdict
    assert (verdict.authenticated, verdict.method) == (True, "relay")
    assert "spf" in verdict.reason


def test_sendgrid_trusted_verdicts_still_need_the_password(serve):
    answer = sendgrid(serve("sendgrid"), parsed_fields(**FORGED_SENDGRID), auth=("x", "no"))
    assert answer.status_code == 401
    assert Message.select().count() == 0


def test_sendgrid_trusted_pass_for_another_domain_is_not_aligned(serve):
    web = serve("sendgrid")
    fields = parsed_fields(dkim="{@evil.example : pass, @thescoop.com : fail}", SPF="fail")
    assert sendgrid(web, fields).status_code == 204
    verdict = the_message().verdict
    assert not verdict.authenticated
    assert verdict.dmarc == "none"
    assert {(r.domain, r.result, r.aligned) for r in verdict.results} >= {
        ("evil.example", "pass", False),
        ("thescoop.com", "fail", False),
    }


def test_trusted_verdicts_that_prove_nothing_fall_back_to_dkim(serve, scoop_key):
    fields = {"email": scoop_key.sign(mail()), "SPF": "softfail", "dkim": "none"}
    assert sendgrid(serve("sendgrid"), fields).status_code == 204
    message = the_message()
    assert message.sender_authenticated
    assert message.verdict.method == "dkim"


# --- Mailgun -----------------------------------------------------------------------------


def test_mailgun_dkim_pass_is_ignored_when_not_trusted(serve, unpublished_key):
    raw = unpublished_key.sign(mail())
    answer = mailgun(serve(), raw, **{"X-Mailgun-Dkim-Check-Result": "Pass"})
    assert answer.status_code == 204
    message = the_message()
    assert not message.sender_authenticated
    assert message.verdict.method == "none"


def test_mailgun_dkim_pass_counts_when_trusted(serve, unpublished_key):
    raw = unpublished_key.sign(mail())
    answer = mailgun(serve("mailgun"), raw, **{"X-Mailgun-Dkim-Check-Result": "Pass"})
    assert answer.status_code == 204
    message = the_message()
    assert message.sender_authenticated
    assert (message.verdict.method, message.verdict.domain) == ("relay", "thescoop.com")
    assert "Mailgun" in message.verdict.reason


def test_mailgun_dkim_pass_read_from_its_message_headers_when_trusted(serve, unpublished_key):
    headers = json.dumps([["X-Mailgun-Dkim-Check-Result", "Pass"], ["Subject", "x"]])
    answer = mailgun(serve("mailgun"), unpublished_key.sign(mail()), **{"message-headers": headers})
    assert answer.status_code == 204
    assert the_message().verdict.method == "relay"


def test_mailgun_pass_for_an_unsigned_message_names_no_domain(serve):
    answer = mailgun(serve("mailgun"), mail(), **{"X-Mailgun-Dkim-Check-Result": "Pass"})
    assert answer.status_code == 204
    assert not the_message().sender_authenticated


def test_mailgun_pass_with_a_bad_request_signature_stores_nothing(serve, unpublished_key):
    raw = unpublished_key.sign(mail())
    answer = mailgun(
        serve("mailgun"), raw, key="not-the-key", **{"X-Mailgun-Dkim-Check-Result": "Pass"}
    )
    assert answer.status_code == 401
    assert Message.select().count() == 0


# --- Postmark ----------------------------------------------------------------------------

POSTMARK_HEADERS = [
    {
        "Name": "Received-SPF",
        "Value": "Pass (sender SPF authorized) identity=mailfrom; client-ip=192.0.2.7; "
        "helo=mx.thescoop.com; envelope-from=mara@thescoop.com; receiver=postmark",
    },
    {"Name": "X-Spam-Status", "Value": "No"},
]


@pytest.mark.parametrize(("trusted", "proven"), [((), False), (("postmark",), True)])
def test_postmark_spf_pass_counts_only_when_trusted(serve, trusted, proven):
    payload = {"RawEmail": mail().decode(), "Headers": POSTMARK_HEADERS}
    assert postmark(serve(*trusted), payload).status_code == 204
    message = the_message()
    assert message.sender_authenticated is proven
    assert message.verdict.method == ("relay" if proven else "none")


def test_postmark_trusted_dkim_result_names_its_domain(serve):
    results = "mx.postmarkapp.com; dkim=pass header.d=evil.example; spf=none"
    headers = [{"Name": "Authentication-Results", "Value": results}]
    assert (
        postmark(serve("postmark"), {"RawEmail": mail().decode(), "Headers": headers}).status_code
        == 204
    )
    assert not the_message().sender_authenticated


# --- the setting -------------------------------------------------------------------------


def test_trust_provider_verdicts_is_read_from_protege_toml(installation):
    configured = with_plugin_settings(
        installation, "protege-dashboard", {"trust_provider_verdicts": ["mailgun"]}
    )
    assert read_settings(configured).trust_provider_verdicts == ("mailgun",)
    assert DashboardSettings().trust_provider_verdicts == ()


@pytest.mark.parametrize("ingress", ["relay", "smtp"])
def test_only_provider_ingresses_can_be_trusted(ingress):
    with pytest.raises(ValueError, match="trust_provider_verdicts"):
        DashboardSettings(trust_provider_verdicts=(ingress,))


def test_mailgun_headers_nested_too_deeply_prove_nothing_and_break_nothing(serve, scoop_key):
    web = serve("mailgun")
    answer = mailgun(web, mail(), **{"message-headers": "[" * 100_000})
    assert answer.status_code == 204
    assert the_message().sender_authenticated is False
