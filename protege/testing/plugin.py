"""The pytest plugin: protege's fixtures, registered through the ``pytest11`` entry point.

The fixtures isolate a test from the host app it runs in: through environment variables that
override ``protege.toml`` (see ``protege.config.Config``), the test gets its own database,
data directory, outbox and model, whatever the app's file names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protege.config import (
    DATA_DIR_VARIABLE,
    DATABASE_URL_VARIABLE,
    MAIL_TRANSPORT_VARIABLE,
    MODEL_API_KEY_ENV_VARIABLE,
    MODEL_BASE_URL_VARIABLE,
    MODEL_VARIABLE,
)
from protege.testing.database import TEST_DATABASE_VARIABLE, TestDatabase, fresh_database
from protege.testing.model import ScriptedModel

SCRIPTED_KEY_VARIABLE = "PROTEGE_SCRIPTED_MODEL_KEY"


@pytest.fixture
def protege_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestDatabase]:
    """A fresh, migrated protege database for this test, bound to protege's records.

    Also gives the test its own data directory (``protege-data`` in its temporary folder)
    and writes its outgoing mail to the outbox there, never through the app's SMTP relay.
    """
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path / "protege-data"))
    monkeypatch.setenv(MAIL_TRANSPORT_VARIABLE, "outbox")
    with fresh_database(tmp_path, os.environ.get(TEST_DATABASE_VARIABLE)) as database:
        monkeypatch.setenv(DATABASE_URL_VARIABLE, database.url)
        yield database


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    """A scripted Chat Completions server on loopback, configured as this test's model
    (in place of any ``[model]`` the app's ``protege.toml`` names, and its API key).

    Queue its answers with ``scripted_model.script(tool_call(...), say(...))``; read what it
    was sent from ``scripted_model.requests``.
    """
    model = ScriptedModel().start()
    monkeypatch.setenv(MODEL_VARIABLE, "scripted")
    monkeypatch.setenv(MODEL_BASE_URL_VARIABLE, model.base_url)
    monkeypatch.setenv(MODEL_API_KEY_ENV_VARIABLE, SCRIPTED_KEY_VARIABLE)
    monkeypatch.setenv(SCRIPTED_KEY_VARIABLE, "scripted-test-key")
    # For code that reads the openai client's own variables (the demo, other clients).
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-test-key")
    yield model
    model.stop()
