"""The pytest plugin: protege's fixtures, registered through the ``pytest11`` entry point.

The fixtures isolate a test from the host app it runs in: through environment variables that
override ``protege.toml`` (see ``protege.config.Config``), the test gets its own database,
data directory, outbox and model, whatever the app's file names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytest loads this module into every session wherever protege is installed, most of which
# never ask for a fixture of ours: it imports only what registering the fixtures, markers
# and hooks needs, and each fixture imports what it uses when first requested
# (tests/testing/test_plugin_imports.py holds it to that).
if TYPE_CHECKING:
    from protege.installation import Installation
    from protege.testing.database import SessionDatabase, TestDatabase
    from protege.testing.model import ScriptedModel

SCRIPTED_KEY_VARIABLE = "PROTEGE_SCRIPTED_MODEL_KEY"
DATABASE_MARKER = "protege_db"
FRESH_DATABASE_MARKER = "protege_fresh_db"


def pytest_configure(config: pytest.Config) -> None:
    """Declare the plugin's markers (so ``--strict-markers`` accepts them)."""
    config.addinivalue_line(
        "markers",
        f"{DATABASE_MARKER}: the test uses protege's database; added by itself to every test "
        f"that requests the protege_db fixture, so `-m {DATABASE_MARKER}` selects them",
    )
    config.addinivalue_line(
        "markers",
        f"{FRESH_DATABASE_MARKER}: the test changes the schema (DDL, migrations), so its "
        "protege_db is a database of its own, migrated for it and thrown away after",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses ``protege_db``, to run them alone on another database."""
    for item in items:
        if DATABASE_MARKER in getattr(item, "fixturenames", ()):
            item.add_marker(DATABASE_MARKER)


@pytest.fixture(scope="session")
def _protege_session_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SessionDatabase]:
    """The database migrated once for this session (or xdist worker), shared by its tests."""
    from protege.testing.database import TEST_DATABASE_VARIABLE, SessionDatabase

    shared = SessionDatabase(
        tmp_path_factory.mktemp("protege-db"), os.environ.get(TEST_DATABASE_VARIABLE)
    )
    yield shared
    shared.close()


@pytest.fixture
def protege_db(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestDatabase]:
    """A fresh, migrated, empty protege database for this test, bound to protege's records.

    SQLite in the test's temporary folder, or on the PostgreSQL server named by
    ``PROTEGE_TEST_DATABASE_URL``; ``PROTEGE_DATABASE_URL`` points at it for the test. The
    schema is migrated once per session and emptied for each test; mark a test that changes
    the schema ``@pytest.mark.protege_fresh_db`` to have it migrate a database of its own.

    Also gives the test its own data directory (``protege-data`` in its temporary folder),
    keeps stored files there (never in the app's S3 bucket) and writes its outgoing mail to
    the outbox there, never through the app's SMTP relay. Sender authentication asks no DNS
    server: only records pinned in ``[mail.authentication.dns]`` are found.
    """
    from protege.config import (
        BLOB_STORE_VARIABLE,
        DATA_DIR_VARIABLE,
        DATABASE_URL_VARIABLE,
        DNS_OFFLINE_VARIABLE,
        MAIL_TRANSPORT_VARIABLE,
    )
    from protege.testing.database import TEST_DATABASE_VARIABLE, fresh_database

    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path / "protege-data"))
    monkeypatch.setenv(DNS_OFFLINE_VARIABLE, "1")
    monkeypatch.setenv(MAIL_TRANSPORT_VARIABLE, "outbox")
    monkeypatch.setenv(BLOB_STORE_VARIABLE, "local")
    if request.node.get_closest_marker(FRESH_DATABASE_MARKER):
        made = fresh_database(tmp_path, os.environ.get(TEST_DATABASE_VARIABLE))
    else:
        shared: SessionDatabase = request.getfixturevalue("_protege_session_database")
        made = shared.checkout(tmp_path)
    with made as database:
        monkeypatch.setenv(DATABASE_URL_VARIABLE, database.url)
        yield database


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    """A scripted Chat Completions server on loopback, configured as this test's model
    (in place of any ``[model]`` the app's ``protege.toml`` names, and its API key).

    Queue its answers with ``scripted_model.script(tool_call(...), say(...))``; read what it
    was sent from ``scripted_model.requests``.
    """
    from protege.config import (
        MODEL_API_KEY_ENV_VARIABLE,
        MODEL_BASE_URL_VARIABLE,
        MODEL_VARIABLE,
    )
    from protege.testing.model import ScriptedModel

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


@pytest.fixture
def protege_app(protege_db: TestDatabase, scripted_model: ScriptedModel) -> Installation:
    """The installation a test runs with: ``protege.toml`` as the fixtures isolate it (this
    test's database, data directory, outbox and scripted model), and the tools the host
    app's modules and the installed plugins offer. Hand it to ``run_reply`` and
    ``run_scheduled`` (``installation=protege_app``), ``run_tool``
    (``manifest=protege_app.manifest``) and ``make_context`` (``config=protege_app.config``).
    """
    from protege.config import load_config
    from protege.installation import open_installation

    return open_installation(load_config(), connect=False)
