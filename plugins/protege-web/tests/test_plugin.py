import os
import subprocess
import sys

from protege.models import Toolkit
from protege.plugins import PluginStatus, discover
from protege.registry import refresh


def test_found_through_its_entry_point_as_a_builtin():
    (source,) = [s for s in discover() if s.distribution == "protege-web"]
    assert source.entry_point == "protege_web"
    assert source.builtin


def test_loads_cleanly_and_registers_both_web_tools():
    manifest = refresh()
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == "protege-web"]
    assert report.plugin.status is PluginStatus.OK
    assert report.plugin.hooks == ("register_tools",)
    assert sorted(report.tool_ids) == ["web_fetch", "web_search"]
    assert manifest.get("web_fetch").tool_class.trust == "untrusted"
    assert manifest.get("web_search").tool_class.trust == "untrusted"


def test_protege_sync_adds_both_tools_to_all_tools(protege_db, tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
    environ["PROTEGE_DATABASE_URL"] = protege_db.url
    result = subprocess.run(
        [sys.executable, "-m", "protege", "sync"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    members = Toolkit.all_tools().member_tool_ids
    assert {"web_fetch", "web_search"} <= set(members)
