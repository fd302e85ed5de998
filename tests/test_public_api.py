"""The public API is stated once, in docs/api.md, and the code keeps to it.

docs/api.md has a section per public module (a heading ``## `protege.x` ``) listing the
names it exports (``- `name`: ...``). Each public module's ``__all__`` is exactly that list;
the strictly typed modules of pyproject.toml cover the public modules; and protege's own
plugins, the examples and the plugins ``protege plugin new`` writes import nothing but the
public modules and their listed names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
API_PAGE = REPO / "docs" / "api.md"
MODULE_HEADING = re.compile(r"^## `(protege(?:\.\w+)*)`\s*$")
NAME_ITEM = re.compile(r"^- `(\w+)`")
TABLE_ROW = re.compile(r"^\| \[`(protege(?:\.\w+)*)`\]")


def documented_api(text: str) -> dict[str, list[str]]:
    """Each public module docs/api.md documents, with the names it lists for it in order."""
    api: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        heading = MODULE_HEADING.match(line)
        if heading:
            current = api.setdefault(heading.group(1), [])
        elif line.startswith("## "):  # any other section ends the module's list
            current = None
        elif current is not None and (item := NAME_ITEM.match(line)):
            current.append(item.group(1))
    return api


API = documented_api(API_PAGE.read_text())
PUBLIC_MODULES = set(API)


def test_the_page_documents_the_public_modules_each_once_and_in_its_table():
    headings = [
        m.group(1)
        for line in API_PAGE.read_text().splitlines()
        if (m := MODULE_HEADING.match(line))
    ]
    table = [
        m.group(1) for line in API_PAGE.read_text().splitlines() if (m := TABLE_ROW.match(line))
    ]
    assert [name for name, n in Counter(headings).items() if n > 1] == []
    assert table == headings
    assert {"protege", "protege.models", "protege.admin", "protege.testing"} <= PUBLIC_MODULES


def test_documented_api_reads_module_sections_and_their_name_items():
    page = (
        "# API\n\n## `protege.x`\n\nWhat it is.\n\n- `one`: the first.\n- `Two`: the second.\n"
        "  - `nested`: not a name of the module\n\n## Reference\n\n- `later`: not listed\n"
    )
    assert documented_api(page) == {"protege.x": ["one", "Two"]}


@pytest.mark.parametrize("module", sorted(API))
def test_each_public_module_exports_exactly_what_the_page_lists(module):
    listed = API[module]
    assert [name for name, n in Counter(listed).items() if n > 1] == [], "listed twice"
    imported = importlib.import_module(module)
    exported = list(imported.__all__)
    assert [name for name, n in Counter(exported).items() if n > 1] == [], "exported twice"
    differences = {
        "exported but not on docs/api.md": sorted(set(exported) - set(listed)),
        "on docs/api.md but not exported": sorted(set(listed) - set(exported)),
    }
    assert differences == {
        "exported but not on docs/api.md": [],
        "on docs/api.md but not exported": [],
    }
    unresolved = [name for name in exported if not hasattr(imported, name)]
    assert unresolved == []


def _strict_patterns() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    overrides = config["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs")]
    assert len(strict) == 1, "one override lists the strictly typed modules"
    return list(strict[0]["module"])


def _matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):  # as mypy reads it: the package and everything in it
        base = pattern[:-2]
        return module == base or module.startswith(f"{base}.")
    return module == pattern


def _defining_modules() -> set[str]:
    """The modules the public names are defined in (classes and functions), and the hook
    specifications, whose signatures plugins implement."""
    found = {"protege.hookspecs"}
    for module in PUBLIC_MODULES:
        imported = importlib.import_module(module)
        for name in imported.__all__:
            value = getattr(imported, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                found.add(value.__module__)
    return found


def test_every_public_module_is_strictly_typed():
    patterns = _strict_patterns()
    untyped = sorted(m for m in PUBLIC_MODULES if not any(_matches(m, p) for p in patterns))
    assert untyped == [], "add them to the strict [[tool.mypy.overrides]] of pyproject.toml"


def test_the_strictly_typed_protege_modules_are_public_or_define_public_names():
    defining = _defining_modules() | PUBLIC_MODULES
    stale = [
        pattern
        for pattern in _strict_patterns()
        if pattern.split(".")[0] == "protege"
        and not any(_matches(module, pattern) for module in defining)
    ]
    assert stale == []


# Who must keep to the public API: the code protege ships as plugins and examples. Their
# tests may reach further (plugin discovery, the registry) to test the plugin's fit.
SHIPPED = [
    path
    for top in ("plugins", "examples")
    for path in sorted((REPO / top).glob("*/**/*.py"))
    if "tests" not in path.relative_to(REPO / top).parts and path.name != "conftest.py"
]


def _is_protege(module: str | None) -> bool:
    return module is not None and (module == "protege" or module.startswith("protege."))


def protege_imports(source: str, filename: str = "<source>") -> list[tuple[int, str, str | None]]:
    """Every import of protege in ``source``, wherever it stands: (line, module, name), the
    name None for ``import protege.x``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name, None) for alias in node.names if _is_protege(alias.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_protege(node.module):
            found += [(node.lineno, str(node.module), alias.name) for alias in node.names]
    return found


def offences(imports: list[tuple[int, str, str | None]]) -> list[str]:
    """What in ``imports`` is not the public API: a module not documented as public, or a
    name its public module does not list."""
    wrong = []
    for line, module, name in imports:
        if module not in PUBLIC_MODULES:
            wrong.append(f"line {line}: {module} is internal")
        elif (
            name is not None
            and name not in API[module]
            and f"{module}.{name}" not in PUBLIC_MODULES  # from protege import blobs
        ):
            wrong.append(f"line {line}: {module} does not export {name}")
    return wrong


def test_offences_name_internal_modules_and_unlisted_names():
    source = (
        "import protege.db\n"
        "from protege import Tool, blobs, db\n"
        "def later():\n"
        "    from protege.admin import cancel_run, _private\n"
        "from protege_mail import send\n"
    )
    assert offences(protege_imports(source)) == [
        "line 1: protege.db is internal",
        "line 2: protege does not export db",
        "line 4: protege.admin does not export _private",
    ]


def test_shipped_plugins_and_examples_are_found():
    shipped = {path.relative_to(REPO).as_posix() for path in SHIPPED}
    assert "examples/the_scoop/the_scoop/demo.py" in shipped
    assert "plugins/protege-dashboard/protege_dashboard/access_pages.py" in shipped
    assert not any("/tests/" in path for path in shipped)


def test_plugins_and_examples_import_only_the_public_api():
    wrong = {
        path.relative_to(REPO).as_posix(): found
        for path in SHIPPED
        if (found := offences(protege_imports(path.read_text(), str(path))))
    }
    assert wrong == {}


class _Placeholders(dict):
    def __missing__(self, key: str) -> str:
        return "placeholder"


def test_the_plugins_protege_plugin_new_writes_import_only_the_public_api():
    from protege.cli import templates

    written = {
        name: getattr(templates, name).format_map(_Placeholders())
        for name in ("MODULE", "TESTS", "TOOL_CLASS", "TOOL_TESTS")
    }
    wrong = {
        name: found
        for name, source in written.items()
        if (found := offences(protege_imports(source, name)))
    }
    assert wrong == {}
    assert protege_imports(written["MODULE"])  # it does import protege: the check bites


def _python_blocks() -> dict[str, str]:
    """The Python examples of the README and the documentation pages, by where they are."""
    found = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            found[f"{page.relative_to(REPO).as_posix()} example {index + 1}"] = block
    return found


def test_the_documentation_s_examples_import_only_the_public_api():
    blocks = _python_blocks()
    assert "README.md example 1" in blocks
    wrong = {}
    for where, block in blocks.items():
        try:
            imports = protege_imports(block, where)
        except SyntaxError:  # a fragment (a signature, a REPL line): nothing to import
            continue
        if found := offences(imports):
            wrong[where] = found
    assert wrong == {}
