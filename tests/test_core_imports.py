"""The engine stands alone: it imports neither the example apps nor its own test support."""

import ast
from pathlib import Path

import protege

ENGINE = Path(protege.__file__).parent
# The example apps, and the pytest plugin that only tests (and the demo) should load.
FORBIDDEN = ("the_scoop", "protege_weather", "protege.testing")
# `protege model echo` exists to serve the test support's echo model to a newcomer without
# an API key; it imports it when run, and nothing else in the engine does.
SERVES_THE_TEST_SUPPORT = {"cli/model.py": {"protege.testing.echo"}}


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports, wherever the import statement stands."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_engine_module_imports_an_example_app_or_the_test_support():
    offending = {
        str(path.relative_to(ENGINE)): sorted(
            name
            for name in imported_modules(path)
            if any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN)
            and name not in SERVES_THE_TEST_SUPPORT.get(str(path.relative_to(ENGINE)), ())
        )
        for path in ENGINE.rglob("*.py")
        if ENGINE / "testing" not in path.parents
    }
    assert {path: names for path, names in offending.items() if names} == {}


# The web side is protege-dashboard's: the engine states the contracts of its hooks
# (``protege.ingresses``, ``protege.dashboard``) in plain Python.
WEB_FRAMEWORKS = ("starlette", "uvicorn", "jinja2", "python_multipart")


def test_no_engine_module_imports_a_web_framework():
    offending = {
        str(path.relative_to(ENGINE)): sorted(
            name
            for name in imported_modules(path)
            if any(name == f or name.startswith(f"{f}.") for f in WEB_FRAMEWORKS)
        )
        for path in ENGINE.rglob("*.py")
    }
    assert {path: names for path, names in offending.items() if names} == {}
