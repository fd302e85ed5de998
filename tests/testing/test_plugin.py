"""The fixtures isolate a test from the host app it runs in, whatever its protege.toml says."""

import socket
import subprocess
import sys

import pytest

from protege.config import load_config
from protege.models import Agent, Message, Toolkit
from protege.plugins import PluginHost
from protege.registry import build_manifest
from protege.testing import run_reply, say, tool_call


@pytest.fixture
def listener():
    """A port that accepts connections and records whether anyone came (nobody should)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        yield server


def nobody_came(server):
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


@pytest.fixture
def app(tmp_path, monkeypatch, listener):
    """A host app configured for production: its own model, key, relay and data folder."""
    port = listener.getsockname()[1]
    root = tmp_path / "app"
    root.mkdir()
    (root / "protege.toml").write_text(
        'data_dir = "production-data"\n'
        "[model]\n"
        'model = "gpt-production"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\n'
        'api_key_env = "APP_PRODUCTION_KEY"\n'
        "timeout = 2\n"
        "max_retries = 0\n"
        "[mail]\n"
        'transport = "smtp"\n'
        'smtp_host = "127.0.0.1"\n'
        f"smtp_port = {port}\n"
        "smtp_starttls = false\n"
        "smtp_retries = 0\n"
        "smtp_timeout = 2\n"
    )
    monkeypatch.setenv("APP_PRODUCTION_KEY", "sk-production-secret")
    return root


def test_a_host_apps_model_relay_and_data_dir_are_replaced_by_the_tests_own(
    app, protege_db, scripted_model, listener, tmp_path
):
    config = load_config(app)
    assert config.model.api_key_env != "APP_PRODUCTION_KEY"
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    scripted_model.script(tool_call("send_email", mode="reply", body="On it."), say("Sent."))

    run = run_reply(
        agent,
        sender="jane@acme.com",
        body="Hi",
        config=config,
        manifest=build_manifest(config, PluginHost()),
    )

    assert (run.status, run.error) == ("done", None)
    assert [r["model"] for r in scripted_model.requests] == ["scripted", "scripted"]
    (sent,) = Message.select().where(Message.direction == "outbound")
    assert sent.status == "sent"
    (eml,) = (tmp_path / "protege-data" / "outbox").glob("*.eml")
    assert b"On it." in eml.read_bytes()
    assert not (app / "production-data").exists()
    assert nobody_came(listener)  # neither the production model nor its relay was asked


def test_the_tests_data_dir_and_transport_apply_without_a_config_file(protege_db, tmp_path):
    config = load_config(tmp_path)
    assert config.data_dir == tmp_path / "protege-data"
    assert config.mail.transport == "outbox"


SUITE = """
import pytest

from protege import db
from protege.models import Agent, AgentAccessRule


def test_uses_the_database(protege_db):
    assert Agent.select().count() == 0


def test_needs_no_database():
    pass


@pytest.mark.protege_fresh_db
def test_changes_the_schema(protege_db):
    db.database.execute_sql("DROP TABLE agent_access_rule")


def test_after_the_change(protege_db):
    assert Agent.create(name="Sundae", address="sundae@thescoop.example").id == 1
    assert AgentAccessRule.select().count() == 0
"""


@pytest.mark.protege_db
def test_database_tests_are_marked_and_a_schema_change_stays_in_its_test(tmp_path):
    (tmp_path / "test_app.py").write_text(SUITE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "protege_db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout
    assert "3 passed, 1 deselected" in result.stdout
