"""The pytest plugin: protege's fixtures, registered through the ``pytest11`` entry point."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protege.config import DATABASE_URL_VARIABLE
from protege.testing.database import TEST_DATABASE_VARIABLE, TestDatabase, fresh_database


@pytest.fixture
def protege_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestDatabase]:
    """A fresh, migrated protege database for this test, bound to protege's records."""
    with fresh_database(tmp_path, os.environ.get(TEST_DATABASE_VARIABLE)) as database:
        monkeypatch.setenv(DATABASE_URL_VARIABLE, database.url)
        yield database
