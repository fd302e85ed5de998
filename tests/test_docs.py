"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing
page or a reference mkdocstrings cannot resolve fails the suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_with_every_page_and_the_generated_references(tmp_path):
    result = build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stderr
    site = tmp_path / "site"
    for page in ("tutorial", "tools", "plugins", "toolkits", "runs", "mail", "testing"):
        assert (site / page / "index.html").is_file(), page
    cli = (site / "cli" / "index.html").read_text()
    for command in ("protege init", "protege plugin new", "protege runs list", "protege usage"):
        assert command in cli, command
    api = (site / "api" / "index.html").read_text()
    assert "with_plugin_settings" in api
    assert "plugin_settings" in api


def test_a_broken_link_fails_the_build(tmp_path):
    root = tmp_path / "copy"
    root.mkdir()
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(REPO / "protege", root / "protege")  # what mkdocstrings reads
    page = root / "docs" / "tools.md"
    page.write_text(page.read_text() + "\nSee [the gone page](gone.md).\n")
    result = build(root, tmp_path / "site")
    assert result.returncode != 0
    assert "gone.md" in result.stderr


def test_the_readme_links_to_the_documentation():
    readme = (REPO / "README.md").read_text()
    assert re.search(r"\]\(docs/index\.md\)", readme)
