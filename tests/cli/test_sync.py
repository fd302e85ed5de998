"""`protege sync` refuses to rebuild the toolkits from a manifest missing a host module."""

import sqlite3

import pytest

from protege.models import Toolkit


@pytest.fixture
def run_protege(protege_in_process):
    """The commands run in-process (click's test runner): none here needs a process."""
    return protege_in_process


PING_TOOL = (
    "from protege import Tool\n\n"
    "class PingTool(Tool):\n"
    '    description = "Pings."\n\n'
    "    def use(self, context):\n"
    "        return self.success()\n"
)
BROKEN = (
    "Error: sync changed nothing: cannot import tool module shop_tools: "
    "ModuleNotFoundError: No module named 'no_such_dependency'"
)


def host_app(project, source):
    (project / "protege.toml").write_text('tool_modules = ["shop_tools"]\n')
    (project / "shop_tools.py").write_text(source)


def test_a_host_module_that_fails_to_import_stops_sync_and_changes_nothing(run_protege, protege_db):
    env = {"PROTEGE_DATABASE_URL": protege_db.url}
    host_app(run_protege.project, PING_TOOL)
    first = run_protege("sync", env=env)
    assert first.returncode == 0, first.stderr
    assert "ping" in Toolkit.all_tools().member_tool_ids

    (run_protege.project / "shop_tools.py").write_text("import no_such_dependency\n")
    result = run_protege("sync", env=env)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [BROKEN]
    assert result.stdout == ""
    assert "ping" in Toolkit.all_tools().member_tool_ids


def test_sync_stops_before_migrating_a_new_database(run_protege, tmp_path):
    database = tmp_path / "new.db"
    host_app(run_protege.project, "import no_such_dependency\n")
    result = run_protege("sync", env={"PROTEGE_DATABASE_URL": f"sqlite:///{database}"})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [BROKEN]
    with sqlite3.connect(database) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        assert tables.fetchall() == []
