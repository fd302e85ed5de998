"""The operator's commands with a real MCP server configured: `protege sync` lists and
records it, `protege tools` shows its tools with their server and hints (and what is
withheld), `protege plugins` and `protege doctor` report a server that did not answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

STOCK = Path(__file__).parent / "servers" / "stock.py"
TOML = """
[plugins.protege-mcp.servers.stock]
command = {python}
args = [{script}]
env = ["STOCK_TOOLS", "STOCK_DOWN"]
prefix = "stock_"
"""


@pytest.fixture
def protege(tmp_path):
    """Run the real ``protege`` command in a project whose protege.toml names the stock
    server: ``protege(*args, down=False)``."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "protege.toml").write_text(
        TOML.format(python=json.dumps(sys.executable), script=json.dumps(str(STOCK)))
    )

    def run(*args: str, down: bool = False) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("PROTEGE_")}
        environ.update(STOCK_TOOLS="check_stock,order_more", STOCK_DOWN="1" if down else "")
        with subprocess.Popen(
            [sys.executable, "-m", "protege", *args],
            cwd=project,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as process:
            try:
                out, err = process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    return run


def _row(output: str, tool_id: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(tool_id + " "))


def test_sync_records_the_servers_tools_and_tools_shows_them(protege):
    before = protege("tools")
    assert "stock_check_stock" not in before.stdout
    synced = protege("sync")
    assert synced.returncode == 0, synced.stderr
    assert "All Tools: added" in synced.stdout
    assert "stock_check_stock" in synced.stdout
    listed = protege("tools")
    row = _row(listed.stdout, "stock_check_stock")
    assert "protege-mcp 0.1.0 (server stock)" in row
    assert "read-only" in row
    assert "writes, not destructive" in _row(listed.stdout, "stock_order_more")
    as_json = {t["id"]: t for t in json.loads(protege("tools", "--json").stdout)}
    assert as_json["stock_check_stock"]["server"] == "stock"
    assert as_json["stock_check_stock"]["annotations"] == {"read_only": True}
    assert as_json["stock_check_stock"]["origin"] == "plugin"


def test_a_server_down_at_sync_is_reported_everywhere_and_its_tools_withheld(protege):
    assert protege("sync").returncode == 0
    down = protege("sync", down=True)
    assert down.returncode == 0, down.stderr
    assert "warning: protege-mcp: MCP server stock could not be listed: it exited" in down.stderr
    # Why, in the server's own words, on the operator's terminal (and only there).
    assert "its last stderr lines: stock: the freezer database is unreachable" in down.stderr
    assert "All Tools: removed" not in down.stdout
    listed = protege("tools")
    assert "Withheld (known, not offered until a sync can list them):" in listed.stdout
    assert "stock_check_stock" in listed.stdout.split("Withheld", 1)[1]
    plugins = {p["distribution"]: p for p in json.loads(protege("plugins", "--json").stdout)}
    withheld = plugins["protege-mcp"]["withheld"]
    assert {w["id"] for w in withheld} == {"stock_check_stock", "stock_order_more"}
    assert all("did not answer the last sync" in w["reason"] for w in withheld)
    kit = protege("toolkits", "show", "All Tools").stdout
    assert "stock_check_stock  (withheld: MCP server stock did not answer the last sync" in kit
    doctor = protege("doctor")
    assert doctor.returncode == 1
    assert "tool stock_check_stock from protege-mcp is withheld: MCP server stock did not" in (
        " ".join(doctor.stdout.split())
    )


def test_the_json_of_sync_carries_what_the_servers_said(protege):
    assert protege("sync").returncode == 0
    report = json.loads(protege("sync", "--json", down=True).stdout)
    assert report["all_tools_removed"] == []
    (line,) = report["listing_problems"]
    assert line.startswith("protege-mcp: MCP server stock could not be listed: ")
    assert "freezer database is unreachable" in line or "exited" in line


def test_a_typo_in_the_settings_stops_sync_and_takes_no_tool_away(protege, tmp_path):
    assert protege("sync").returncode == 0
    toml = tmp_path / "project" / "protege.toml"
    toml.write_text(toml.read_text() + "tiemout_seconds = 5\n")
    refused = protege("sync")
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith("Error: sync changed nothing: plugin protege-mcp: protege.toml has ")
    assert "tiemout_seconds (did you mean timeout_seconds?)" in line
    kit = json.loads(protege("toolkits", "show", "All Tools", "--json").stdout)
    assert "stock_check_stock" in [t["id"] for t in kit["tools"]]
