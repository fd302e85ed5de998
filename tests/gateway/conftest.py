from email.message import EmailMessage

import pytest

from protege.config import load_config
from protege.models import Agent, Toolkit

from .hostile import AGENT, OPERATOR


@pytest.fixture
def config(tmp_path, protege_db):
    return load_config(tmp_path)


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


def make_mail(
    sender="Jane <jane@acme.com>",
    to="sundae@thescoop.example",
    subject="Melted",
    body="SCP-1042 arrived melted.",
    headers=None,
    attachments=(),
) -> bytes:
    """An email as bytes, as a mail client would send it."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = "<Jane.1@Acme.COM>"
    for name, value in (headers or {}).items():
        del message[name]
        if value is not None:
            message[name] = value
    message.set_content(body)
    for filename, content_type, data in attachments:
        maintype, subtype = content_type.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return message.as_bytes()


@pytest.fixture
def mail():
    return make_mail


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """The data directory commands run in this test use (blobs, outbox)."""
    folder = tmp_path / "data"
    monkeypatch.setenv("PROTEGE_DATA_DIR", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.fixture
def gated_sundae(protege_db, data_dir):
    """Sundae, open to everyone, with a Finance toolkit only the operator unlocks."""
    agent = Agent.create(name="Sundae", address=AGENT)
    agent.grant(Toolkit.create(name="Finance", member_tool_ids=["process_refund"])).add_rule(
        "allow", OPERATOR
    )
    return agent
