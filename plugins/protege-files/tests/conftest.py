"""Shared fixtures for the file tools: an agent, its mail with attachments, model settings."""

from pathlib import Path

import attrs
import pytest

from protege.mail import record_inbound
from protege.models import Agent
from protege.testing import attach_files, make_context, with_plugin_settings

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_file():
    """The bytes of one fixture file, by name."""
    return lambda name: (FIXTURES / name).read_bytes()


@pytest.fixture
def configured(protege_app):
    """The test's configuration with the model reading ``inputs`` besides text, and
    ``files`` as the ``[plugins.protege-files]`` table (checked as protege checks the file)."""

    def change(*inputs, **files):
        app = with_plugin_settings(protege_app, "protege-files", files) if files else protege_app
        config = app.config
        return attrs.evolve(config, model=attrs.evolve(config.model, input=("text", *inputs)))

    return change


@pytest.fixture
def sundae(protege_app):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


@pytest.fixture
def mail_with(protege_app):
    """Store an email from Jane to ``agent`` carrying ``files``; returns (message, blobs)."""

    def deliver(agent, *files, status="accepted"):
        message = record_inbound(agent, sender="jane@acme.com", subject="Files", body="Here.")
        if status != "accepted":
            message.status = status
            message.save()
        return message, attach_files(message, files, protege_app.config)

    return deliver


@pytest.fixture
def context_for(protege_app):
    """A run context for ``agent`` answering ``message`` (by default a mail of Jane's, who
    sent the files ``mail_with`` stores) with ``config``."""

    def build(agent, message=None, config=None):
        config = config or protege_app.config
        return make_context(agent, sender="jane@acme.com", message=message, config=config)

    return build
