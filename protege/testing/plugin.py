"""The pytest plugin: protege's fixtures, registered through the ``pytest11`` entry point."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protege.config import DATABASE_URL_VARIABLE, MODEL_VARIABLE
from protege.testing.database import TEST_DATABASE_VARIABLE, TestDatabase, fresh_database
from protege.testing.model import ScriptedModel


@pytest.fixture
def protege_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestDatabase]:
    """A fresh, migrated protege database for this test, bound to protege's records."""
    with fresh_database(tmp_path, os.environ.get(TEST_DATABASE_VARIABLE)) as database:
        monkeypatch.setenv(DATABASE_URL_VARIABLE, database.url)
        yield database


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    """A scripted Chat Completions server on loopback, configured as this test's model.

    Queue its answers with ``scripted_model.script(tool_call(...), say(...))``; read what it
    was sent from ``scripted_model.requests``.
    """
    model = ScriptedModel().start()
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-test-key")
    monkeypatch.setenv(MODEL_VARIABLE, "scripted")
    yield model
    model.stop()
