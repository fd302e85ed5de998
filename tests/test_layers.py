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
    (
        "entry points",
        {
            "cli",
            "testing",
            "serving",
            "supervisor",
            "worker",
            "installation",
            "admin",
            "operations",
            "__main__",
        },
    ),
    ("gateway", {"gateway", "scheduler", "delivery"}),
    ("run queue", {"queue"}),
    ("harness", {"harness"}),
    # Limits, held runs, fair turns and the circuit breaker: read by the gateway, the
    # queue, the workers and the harness alike.
    ("guardrails", {"limits"}),
    ("tools on offer", {"toolkits", "registry", "plugins"}),
    ("records", {"models", "mail", "blobs", "audit"}),
    # protege's own hook implementations (internal plugins) import what they make only
    # when they make it, so that loading the plugins stays light.
    (
        "tool contract",
        {
            "tool",
            "result",
            "context",
            "schema",
            "hookspecs",
            "ingresses",
            "dashboard",
            "defaults",
            "sections",
            "transports",
        },
    ),
    (
        "foundation",
        {
            "errors",
            "config",
            "limit_settings",
            "mailbox_settings",
            "addresses",
            "access",
            "authentication",
            "db",
            "dblock",
            "dbroute",
            "frozen",
            "migrations",
            "cron",
            "filetypes",
            "status",
            "failpoints",
            "reprs",
        },
    ),
]
# Only the command line imports inside functions: so that `protege --help` loads no
# database driver, model client or plugin. The package root loads its public names lazily.
LAZY_IMPORTERS = {"cli", ""}
# And the pytest plugin, which pytest loads into every session wherever protege is installed:
# its fixtures import what they use when a test asks for them (tests/testing/).
LAZY_MODULES = {"testing.plugin"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


_MODULE_NAMES = {f"protege.{name}" if name else "protege" for name in _modules()}


def _unit(module: str) -> str:
    return module.split(".", 1)[0]


def _imports(module: str, path: Path, typing_only: bool = False) -> list[tuple[str, bool]]:
    """The protege modules ``module`` imports, each with whether it is inside a function
    (or, with ``typing_only``, those it imports under ``if TYPE_CHECKING:`` alone)."""
    tree = ast.parse(path.read_text())
    typing_nodes = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if (id(node) in typing_nodes) != typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - node.level + 1]
            names = [".".join([*base, *([node.module] if node.module else [])])]
        else:
            names = [node.module or ""]
        if isinstance(node, ast.ImportFrom):
            # `from protege import gateway` imports protege.gateway, not just the root.
            names = [
                f"{names[0]}.{alias.name}"
                if f"{names[0]}.{alias.name}" in _MODULE_NAMES
                else names[0]
                for alias in node.names
            ]
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
        if is_inner and _unit(module) not in LAZY_IMPORTERS and module not in LAZY_MODULES
    ]
    assert inner == []


def test_no_module_is_part_of_an_import_cycle():
    """Any cycle, of any length, also within one layer or one package (type hints aside)."""
    graph = {
        module: {target for target, _ in targets if target in MODULES and target != module}
        for module, targets in EDGES.items()
        if module  # the package root re-exports lazily, on attribute access
    }
    cycle = _find_cycle(graph)
    assert cycle is None, " -> ".join(f"protege.{m}" for m in cycle or [])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> list[str] | None:
        if module in visiting:
            return [*visiting[visiting.index(module) :], module]
        if module in done:
            return None
        visiting.append(module)
        for target in sorted(graph.get(module, ())):
            found = visit(target)
            if found:
                return found
        visiting.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


# Names used only in annotations may come from above, where the type lives with its layer;
# each such pair is listed here, with why.
TYPE_HINTS_FROM_ABOVE = {
    # Records take the manifest they resolve against; they never build one.
    ("models.agents", "registry"),
    ("models.resolution", "registry"),
    # RunContext names the records it carries.
    ("context", "models"),
    # The web contracts and their hooks name the installation a plugin's ingress or page is
    # handed; they never build one.
    ("ingresses", "installation"),
    ("dashboard", "installation"),
    ("hookspecs", "installation"),
    # register_tools is handed the manifest's registration; the hooks never build one.
    ("hookspecs", "registry"),
}


def test_type_hints_from_above_are_only_the_listed_ones():
    found = set()
    for module, path in MODULES.items():
        if not module:
            continue
        here = _layer(_unit(module))
        for target, _ in _imports(module, path, typing_only=True):
            if target and target != module and _layer(_unit(target)) < here:
                found.add(
                    (module.rsplit(".", 1)[0] if module.count(".") > 1 else module, _unit(target))
                )
    assert found == TYPE_HINTS_FROM_ABOVE
