"""Every hook a plugin may implement is documented: docs/plugins.md carries the reference
written from the specifications, and the README names each hook."""

import importlib.machinery
import importlib.util
import inspect
import re
from pathlib import Path

from protege import hookspecs

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


def hook_docs():
    """``scripts/hook-docs``, imported as a module."""
    path = ROOT / "scripts" / "hook-docs"
    loader = importlib.machinery.SourceFileLoader("hook_docs", str(path))
    spec = importlib.util.spec_from_loader("hook_docs", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def hookspec_signatures() -> dict[str, list[str]]:
    """Each hook specification in protege.hookspecs, with its parameter names."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"  # the attribute pluggy's HookspecMarker sets
    return {
        name: list(inspect.signature(function).parameters)
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, marker)
    }


def test_the_specifications_are_found():
    assert set(hookspec_signatures()) >= {"register_tools", "register_commands"}


def test_the_plugins_page_carries_the_reference_written_from_the_specifications():
    docs = hook_docs()
    page = docs.PAGE.read_text()
    assert docs.rewritten(page) == page, "run scripts/hook-docs"
    headings = dict(re.findall(r"^### (\w+)\(([^)]*)\)$", page, flags=re.MULTILINE))
    for name, parameters in hookspec_signatures().items():
        assert headings.get(name) == ", ".join(parameters), name


def test_each_hook_says_when_it_is_called_uses_its_parameters_and_shows_an_example():
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(function, f"{hookspecs.PROJECT_NAME}_spec"):
            continue
        doc = inspect.getdoc(function) or ""
        assert doc.startswith("Called "), f"{name}: say when protege calls it"
        for parameter in inspect.signature(function).parameters:
            assert f"`{parameter}`" in doc, f"{name}: describe `{parameter}`"
        example = doc.split("Example::", 1)
        assert len(example) == 2, f"{name}: end with an Example:: block"
        assert "@hookimpl" in example[1], f"{name}: the example implements the hook"
        assert f"def {name}(" in example[1], f"{name}: the example implements this hook"


def test_the_readme_names_every_hook():
    section = README.read_text().split("### Hooks", 1)[1].split("\n## ", 1)[0]
    for name in hookspec_signatures():
        assert f"`{name}(" in section, name
