"""The README's MCP section: its settings are what protege accepts, and its worked
example's server is a real MCP server whose tool protege offers after a sync."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from protege.config import load_config
from protege.testing import with_plugin_settings

README = Path(__file__).parents[3] / "README.md"


def _block(marker: str, language: str) -> str:
    found = re.search(
        rf"<!-- readme-test: {marker} -->\n```{language}\n(.*?)```", README.read_text(), re.DOTALL
    )
    assert found, marker
    return found.group(1)


def test_the_mcp_settings_examples_are_what_protege_accepts(tmp_path, protege_app):
    text = _block("mcp-settings", "toml") + "\n" + _block("mcp-http-settings", "toml")
    (tmp_path / "protege.toml").write_text(text)
    table = load_config(tmp_path, environ={}).plugins["protege-mcp"]
    with with_plugin_settings(protege_app, "protege-mcp", table) as app:
        settings = app.config.plugin_settings("protege-mcp")
    stock, crm = settings.servers["stock"], settings.servers["crm"]
    assert (stock.command, stock.args, stock.env, stock.prefix) == (
        "python3",
        ("stock_server.py",),
        (),
        "stock_",
    )
    assert stock.timeout_seconds == 20
    assert (crm.url, dict(crm.header_env), crm.tools) == (
        "https://crm.thescoop.example/mcp",
        {"Authorization": "CRM_MCP_AUTHORIZATION"},
        ("find_customer",),
    )


def test_the_worked_examples_server_is_offered_after_a_sync(tmp_path, protege_app):
    (tmp_path / "stock_server.py").write_text(_block("mcp-server", "python"))
    servers = {
        "stock": {
            "command": sys.executable,
            "args": [str(tmp_path / "stock_server.py")],
            "prefix": "stock_",
        }
    }
    with with_plugin_settings(protege_app, "protege-mcp", {"servers": servers}) as app:
        report = app.sync()
    assert "stock_check_stock" in report.added
    assert report.manifest.get("stock_check_stock").summary == (
        "Tells how many tubs of a flavor are in the freezer."
    )
