"""A hostile body never holds the dashboard up: checked before it is read, capped as it
arrives, every field counted, parsed off the event loop; a real server on loopback."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import attrs
import httpx
import pytest
import uvicorn

from protege.models import Message
from protege_dashboard.app import create_app
from protege_dashboard.ingress_requests import MAX_FIELDS
from protege_dashboard.settings import DashboardSettings

LIMIT = 8 * 1024
CAP = 2 * LIMIT + 1024 * 1024  # what a provider's form or JSON may take around the message
SECRETS = {
    "PROTEGE_RELAY_PASSWORD": "relay-secret-1",
    "PROTEGE_POSTMARK_PASSWORD": "postmark-secret-1",
    "PROTEGE_SENDGRID_PASSWORD": "sendgrid-secret-1",
    "MAILGUN_SIGNING_KEY": "mailgun-key-1",
}
RELAY_AUTH = "Basic cHJvdGVnZTpyZWxheS1zZWNyZXQtMQ=="  # protege:relay-secret-1
POSTMARK_AUTH = "Basic eDpwb3N0bWFyay1zZWNyZXQtMQ=="  # x:postmark-secret-1
WAIT = 60  # seconds a socket waits before the test fails as hung (never a measure)


@pytest.fixture
def limited(installation):
    """The installation with a small message limit, so oversized mail is cheap to make."""
    config = installation.config
    small = attrs.evolve(config, mail=attrs.evolve(config.mail, max_message_bytes=LIMIT))
    return attrs.evolve(installation, config=small)


@pytest.fixture
def served(limited, scoop) -> Iterator[int]:
    """The dashboard served by uvicorn on a loopback port of its own (the port)."""
    app = create_app(limited, DashboardSettings(), SECRETS)
    listening = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]})
    thread.start()
    try:
        yield listening.getsockname()[1]
    finally:
        server.should_exit = server.force_exit = True
        thread.join()
        listening.close()


@pytest.fixture
def connections() -> Iterator[list[socket.socket]]:
    """Sockets a test opened, closed after it whatever happened."""
    opened: list[socket.socket] = []
    yield opened
    for connection in opened:
        connection.close()


def begin_post(
    port: int,
    opened: list[socket.socket],
    path: str,
    content_type: str,
    length: int,
    first: bytes,
    headers: str = "",
) -> socket.socket:
    """A POST whose head says ``length`` bytes follow, of which only ``first`` is sent."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    opened.append(connection)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n{headers}\r\n"
    )
    connection.sendall(head.encode() + first)
    return connection


def answer_of(connection: socket.socket) -> tuple[int, str]:
    """The status and body of the answer the server sends on ``connection``."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, f"the server closed the connection without answering: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, "the server closed the connection mid-answer"
        body += chunk
    return int(head.split()[1]), body.decode()


def test_a_form_of_one_field_name_repeated_is_refused_before_its_body_ends_and_pages_answer(
    served, connections
):
    # A slow honest-looking post holds a connection mid-body...
    stalled = begin_post(
        served,
        connections,
        "/ingress/mailgun",
        "application/x-www-form-urlencoded",
        CAP - 10,
        b"body-mime=" + b"x" * 100_000,
    )
    # ... while a hostile one sends the same name over and over, well under the byte cap.
    hostile = begin_post(
        served,
        connections,
        "/ingress/mailgun",
        "application/x-www-form-urlencoded",
        CAP - 10,
        b"a&" * 150_000,
    )
    # Both bodies are unfinished: another page answers meanwhile...
    page = httpx.get(f"http://127.0.0.1:{served}/login", timeout=WAIT)
    assert page.status_code == 200
    # ... and the hostile post is refused for its fields without the rest of its body.
    status, said = answer_of(hostile)
    assert (status, said) == (413, f"the form has more than {MAX_FIELDS} fields\n")
    # The slow post was waited for all along, and is answered once it ends.
    stalled.sendall(b"x" * (CAP - 10 - 100_010))
    assert answer_of(stalled)[0] == 401  # a form, read whole, but not signed
    assert Message.select().count() == 0


def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_sent(served, connections):
    for path, content_type, headers in (
        ("/ingress/mailgun", "multipart/form-data; boundary=x", ""),
        ("/ingress/postmark", "application/json", f"Authorization: {POSTMARK_AUTH}\r\n"),
        (
            "/ingress/relay",
            "message/rfc822",
            f"Authorization: {RELAY_AUTH}\r\nProtege-Envelope-To: sundae@thescoop.example\r\n",
        ),
    ):
        hostile = begin_post(
            served, connections, path, content_type, 50 * 1024 * 1024, b"", headers
        )
        status, said = answer_of(hostile)
        assert status == 413, (path, said)
        assert "over the limit" in said


def test_an_unchecked_request_is_refused_before_its_body_is_read(served, connections):
    # Without the password, a wrong type, no envelope: refused from the head alone.
    cases = (
        ("/ingress/relay", "message/rfc822", "", 401),
        (
            "/ingress/postmark",
            "text/plain",
            f"Authorization: {POSTMARK_AUTH}\r\n",
            415,
        ),
        ("/ingress/relay", "message/rfc822", f"Authorization: {RELAY_AUTH}\r\n", 422),
        ("/ingress/mailgun", "application/json", "", 415),
    )
    for path, content_type, headers, expected in cases:
        hostile = begin_post(served, connections, path, content_type, CAP - 10, b"x", headers)
        assert answer_of(hostile)[0] == expected, path


@pytest.mark.parametrize("content_type", ["multipart/form-data", "urlencoded"])
def test_every_field_counts_even_under_one_name(client, content_type):
    body = {"timestamp": "1", "token": "t", "signature": "s", "body-mime": "x"}
    if content_type == "urlencoded":
        answer = client.post(
            "/ingress/mailgun",
            content=b"a=1&" * MAX_FIELDS + json.dumps(body).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    else:
        answer = client.post(
            "/ingress/mailgun",
            files=[("a", (None, "1"))] * MAX_FIELDS + [(k, (None, v)) for k, v in body.items()],
        )
    assert answer.status_code == 413
    assert answer.text == f"the form has more than {MAX_FIELDS} fields\n"


def test_postmark_json_nested_too_deep_is_refused_plainly(client):
    depth = 100_000
    answer = client.post(
        "/ingress/postmark",
        content=b"[" * depth + b"]" * depth,
        auth=("postmark", "postmark-secret-1"),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("text/plain")
    assert answer.text == "the body is JSON nested too deeply\n"


@pytest.mark.parametrize("name", ["timestamp", "token", "signature"])
def test_a_mailgun_signature_field_too_long_is_refused_before_it_is_decoded(client, name):
    fields = {"timestamp": "1", "token": "t", "signature": "s", "body-mime": "x"}
    fields[name] = "%41" * 100_000
    body = "&".join(f"{k}={v}" for k, v in fields.items()).encode()
    answer = client.post(
        "/ingress/mailgun",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (answer.status_code, answer.text) == (401, f"the {name} is not one Mailgun makes\n")
