"""``protege operators`` and ``protege dashboard``, as an operator runs them."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from protege.cli import cli
from protege.models import Operator
from protege.testing import with_plugin_settings
from protege_dashboard.passwords import hash_password, verify_password
from protege_dashboard.settings import DashboardSettings, read_settings


@pytest.fixture
def protege(installation):
    runner = CliRunner()

    def run(*args, stdin=None):
        return runner.invoke(cli, list(args), input=stdin)

    return run


def test_operators_are_added_listed_and_removed(protege):
    added = protege("operators", "add", "mara", "--password-stdin", stdin="a long password\n")
    assert added.exit_code == 0, added.output
    assert added.output == "added operator mara\n"
    stored = Operator.get(Operator.name == "mara").password_hash
    assert stored.startswith("scrypt$")
    assert "a long password" not in stored
    assert protege("operators", "list").output.startswith("mara  (added ")
    assert protege("operators", "remove", "mara").output == "removed operator mara\n"
    assert Operator.select().count() == 0


def test_an_operators_password_is_asked_twice_when_typed(protege):
    added = protege("operators", "add", "mara", stdin="a long password\na long password\n")
    assert added.exit_code == 0, added.output
    assert verify_password("a long password", Operator.get().password_hash)


@pytest.mark.parametrize(
    ("args", "stdin", "said"),
    [
        (("add", "mara", "--password-stdin"), "short\n", "at least 10 characters"),
        (("remove", "nobody"), None, "no operator named 'nobody'"),
    ],
)
def test_operator_mistakes_are_one_clear_line(protege, args, stdin, said):
    result = protege("operators", *args, stdin=stdin)
    assert result.exit_code == 1
    assert said in result.output
    assert "Traceback" not in result.output


def test_a_taken_operator_name_is_refused(protege):
    protege("operators", "add", "mara", "--password-stdin", stdin="a long password\n")
    again = protege("operators", "add", "mara", "--password-stdin", stdin="another password\n")
    assert again.exit_code == 1
    assert "already exists" in again.output


def test_passwords_are_salted_and_checked_in_full():
    first, second = hash_password("a long password"), hash_password("a long password")
    assert first != second
    assert verify_password("a long password", first)
    assert not verify_password("a long passwore", first)
    assert not verify_password("a long password", "scrypt$1$2$3$bad$worse")
    assert not verify_password("a long password", "plain")


def test_a_port_in_use_is_one_clear_line(protege):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = protege("dashboard", "--port", str(port))
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ("prot = 8025", "unknown key prot (did you mean port?) @ plugins.protege-dashboard"),
        ('port = "high"', "plugins.protege-dashboard.port"),
        ("session_hours = 0", "'session_hours' must be > 0"),
        ('allowed_hosts = "dash.example.com"', "must be a list of strings"),
        ('relay_password = "hunter2-hunter2"', "name the environment variable"),
    ],
)
def test_settings_the_dashboard_cannot_use_are_one_clear_line(protege, installation, table, said):
    toml = installation.config.root / "protege.toml"
    toml.write_text(toml.read_text() + f"\n[plugins.protege-dashboard]\n{table}\n")
    result = protege("dashboard", "--port", "0")
    assert result.exit_code == 1
    last = result.output.splitlines()[-1]
    assert last.startswith("Error: protege.toml has settings it cannot use: ")
    assert said in last
    assert "plugins.protege-dashboard" in last
    assert "hunter2" not in result.output


def test_the_old_table_name_is_refused_rather_than_quietly_dropped(protege, installation):
    toml = installation.config.root / "protege.toml"
    old = '[plugins.dashboard]\nallowed_hosts = ["dash.example.com"]\n'
    toml.write_text(toml.read_text() + "\n" + old)
    result = protege("dashboard", "--port", "0")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: protege.toml has [plugins.dashboard]: the dashboard's settings are now "
        "[plugins.protege-dashboard]; rename the table"
    )


def test_ingress_secrets_come_from_the_variables_protege_toml_names(installation):
    configured = with_plugin_settings(
        installation, "protege-dashboard", {"relay_password_env": "MY_RELAY"}
    )
    settings = read_settings(configured)
    assert settings.relay_password_env == "MY_RELAY"
    secrets = settings.secrets({"MY_RELAY": "s3cret-value", "PROTEGE_RELAY_PASSWORD": "other"})
    assert secrets.get("relay") == "s3cret-value"
    assert secrets.get("postmark") is None
    assert "s3cret" not in repr(secrets) + repr(settings)


def test_the_readme_settings_are_the_defaults_and_protege_accepts_them(tmp_path):
    import re
    from pathlib import Path

    from protege import admin

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    (block,) = re.findall(r"```toml\n(\[plugins\.protege-dashboard\].*?)```", readme, re.DOTALL)
    (tmp_path / "protege.toml").write_text(block)
    config = admin.load_config(tmp_path, environ={})
    installation = admin.open_installation(config, connect=False)
    assert read_settings(installation) == DashboardSettings()


def test_the_dashboard_refuses_an_unmigrated_database_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["dashboard"], env={"PROTEGE_DATABASE_URL": f"sqlite:///{tmp_path}/new.db"}
    )
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line.startswith("Error: ")
    assert "run `protege sync`" in line
