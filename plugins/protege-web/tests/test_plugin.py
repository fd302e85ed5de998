import os
import subprocess
import sys

from protege.installation import open_installation
from protege.models import Toolkit
from protege.plugins import PluginStatus, discover


def test_found_through_its_entry_point_as_a_builtin():
    (source,) = [s for s in discover() if s.distribution == "protege-web"]
    assert source.entry_point == "protege_web"
    assert source.builtin


def test_loads_cleanly_and_registers_both_web_tools():
    manifest = open_installation(connect=False).manifest
    (report,) = [r for r in manifest.plugins if r.plugin.source.distribution == "protege-web"]
    assert report.plugin.status is PluginStatus.OK
    assert report.plugin.hooks == ("plugin_settings", "register_tools")
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


SERVE_START = """
import sys

from protege.config import load_config
from protege.installation import open_installation
from protege.worker import Workers

SHARED = ("protege_web.fetch", "protege_web.search", "bs4")
app = open_installation(load_config("."))
before = [name for name in SHARED if name in sys.modules]
workers = Workers(app, max_concurrent_runs=1).start()
after = [name for name in SHARED if name in sys.modules]
workers.stop()
print(before, after)
"""


def test_a_serving_process_imports_what_the_web_tools_use_before_it_takes_runs(
    protege_db, tmp_path
):
    # A fresh process, as after a restart: the first web_fetch must not import httpx and
    # its kin in a tool thread while other runs' model calls use them.
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "PYTHON"))}
    environ["PROTEGE_DATABASE_URL"] = protege_db.url
    result = subprocess.run(
        [sys.executable, "-c", SERVE_START],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == (
        "[] ['protege_web.fetch', 'protege_web.search', 'bs4']"
    )
