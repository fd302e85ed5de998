"""Building the manifest loads the tools' declarations, not what they use to work."""

import subprocess
import sys

HEAVY = ("peewee", "httpx", "httpx2", "bs4", "pypdf", "openai", "mcp", "anyio")

PROGRAM = f"""
import sys
from protege.cli.state import manifest
ids = manifest().ids()
assert {{"search_emails", "send_email", "web_fetch", "web_search", "read_attachment",
         "create_file", "get_forecast"}} <= set(ids), ids
print(" ".join(name for name in {HEAVY!r} if name in sys.modules))
"""


def test_listing_the_tools_imports_no_database_http_or_html_library(tmp_path):
    # In a fresh interpreter, with every installed plugin, as `protege tools` does it.
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == []
