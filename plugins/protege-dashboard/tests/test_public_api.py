"""The dashboard is a plugin like any other: it imports only protege's public API."""

from __future__ import annotations

import ast
from pathlib import Path

import protege_dashboard

PUBLIC = {
    "protege",
    "protege.admin",
    "protege.models",
    "protege.blobs",
    "protege.mail",
    # Sender verdicts, which the HTTP ingresses build from a provider's own results (the
    # typed public API in pyproject.toml's mypy overrides).
    "protege.authentication",
}


def test_the_dashboard_imports_only_the_public_api():
    package = Path(protege_dashboard.__file__).parent
    used = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(alias.name for alias in node.names)
    internal = {m for m in used if m.split(".")[0] == "protege" and m not in PUBLIC}
    assert internal == set()
