"""The package's shape: imports go one way, down the layers, and sit at the top of modules.

Read from the source (``ast``), so an import inside a function counts as much as one at the
top; imports under ``if TYPE_CHECKING:`` are for annotations only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "protege"

# From the top down: a module may import its own layer and the ones below, never above.
LAYERS = [
    ("entry points", {"cli", "demo", "testing", "worker", "installation", "__main__"}),
    ("gateway", {"gateway"}),
    ("run queue", {"queue"}),
    ("harness", {"harness"}),
    ("tools on offer", {"toolkits", "registry", "plugins"}),
    ("records", {"models", "mail", "blobs"}),
    ("tool contract", {"tool", "result", "context", "schema", "hookspecs"}),
    (
        "foundation",
        {"errors", "config", "addresses", "access", "db", "dblock", "migrations", "filetypes"},
    ),
]
# Only the command line imports inside functions: so that `protege --help` loads no
# database driver, model client or plugin. The package root loads its public names lazily.
LAZY_IMPORTERS = {"cli", ""}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _unit(module: str) -> str:
    return module.split(".", 1)[0]


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """The protege modules ``module`` imports, each with whether it is inside a function."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - node.level + 1]
            names = [".".join([*base, *([node.module] if node.module else [])])]
        else:
            names = [node.module or ""]
        for name in names:
            if name == "protege" or name.startswith("protege."):
                inner = id(node) not in top_level
                found.append((name.removeprefix("protege").lstrip("."), inner))
    return found


MODULES = _modules()
EDGES = {module: _imports(module, path) for module, path in MODULES.items()}


def _layer(unit: str) -> int:
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"protege.{unit} is in no layer of tests/test_layers.py: place it")


def test_every_module_has_a_layer():
    for module in MODULES:
        if module:
            _layer(_unit(module))


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_imports_go_down_the_layers(module):
    here = _layer(_unit(module))
    upward = [target for target, _ in EDGES[module] if target and _layer(_unit(target)) < here]
    assert upward == [], f"protege.{module} ({LAYERS[here][0]}) imports upward: {upward}"


def test_no_two_parts_import_each_other():
    units = {}
    for module, targets in EDGES.items():
        for target, _ in targets:
            if module and target and _unit(module) != _unit(target):
                units.setdefault(_unit(module), set()).add(_unit(target))
    cycles = sorted(
        (a, b) for a, targets in units.items() for b in targets if a < b and a in units.get(b, ())
    )
    assert cycles == []


def test_imports_inside_functions_are_only_for_a_fast_command_line():
    inner = [
        f"protege.{module} imports protege.{target}"
        for module, targets in EDGES.items()
        for target, is_inner in targets
        if is_inner and _unit(module) not in LAZY_IMPORTERS
    ]
    assert inner == []
