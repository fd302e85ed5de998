"""``protege operators`` and ``protege dashboard``, as an operator runs them."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from protege.cli import cli
from protege.models import Operator
from protege_dashboard.passwords import hash_password, verify_password
from protege_dashboard.settings import read_settings


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


def test_settings_the_dashboard_cannot_use_are_a_clear_error():
    from protege import ProtegeError

    with pytest.raises(ProtegeError, match=r"\[plugins.dashboard\]"):
        read_settings({"prot": 8025})
    with pytest.raises(ProtegeError, match="environment"):
        read_settings({"secrets": {"relay": "x"}})


def test_ingress_secrets_come_from_the_variables_protege_toml_names():
    settings = read_settings({"relay_password_env": "MY_RELAY"}, {"MY_RELAY": "s3cret-value"})
    assert settings.secret("relay") == "s3cret-value"
    assert "s3cret" not in repr(settings)


def test_the_readme_settings_are_the_defaults_and_protege_accepts_them(tmp_path):
    import re
    from pathlib import Path

    from protege.config import load_config
    from protege_dashboard.settings import DashboardSettings

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    (block,) = re.findall(r"```toml\n(\[plugins\.dashboard\].*?)```", readme, re.DOTALL)
    (tmp_path / "protege.toml").write_text(block)
    table = load_config(tmp_path, environ={}).plugin_settings("dashboard")
    assert read_settings(table, {}) == DashboardSettings()


def test_the_dashboard_refuses_an_unmigrated_database_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["dashboard"], env={"PROTEGE_DATABASE_URL": f"sqlite:///{tmp_path}/new.db"}
    )
    assert result.exit_code == 1
    assert "run `protege migrate` or `protege sync`" in result.output
