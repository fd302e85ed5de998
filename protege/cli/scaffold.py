"""``protege init``, ``protege tool new`` and ``protege plugin new``: the files a host app,
one of its tools, or a plugin starts with."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import click

from protege.errors import ProtegeError

DISTRIBUTION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*([-_.][A-Za-z0-9]+)*$")


@click.command()
@click.option(
    "--tool-module",
    "tool_modules",
    multiple=True,
    help="A module holding your tools (repeatable), such as myapp.tools.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing protege.toml.")
def init(tool_modules: tuple[str, ...], force: bool) -> None:
    """Write a commented protege.toml in this folder, for a host app."""
    from protege.cli.templates import PROTEGE_TOML
    from protege.config import CONFIG_FILENAME

    path = Path.cwd() / CONFIG_FILENAME
    if path.exists() and not force:
        raise ProtegeError(f"{path} already exists: --force overwrites it")
    path.write_text(PROTEGE_TOML.format(tool_modules=json.dumps(list(tool_modules))))
    click.echo(f"wrote {path}")
    click.echo("Next: `protege sync` creates the database and the system toolkits.")


@click.group()
def plugin() -> None:
    """Start a new plugin distribution."""


@plugin.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "parent",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    help="Where to create the plugin's folder (default: here).",
)
@click.option("--summary", default="Greets people by name.", help="One line on what it does.")
def new(name: str, parent: Path, summary: str) -> None:
    """Write a plugin distribution NAME (such as protege-dice): pyproject.toml with its
    entry point, a tool with settings, tests using protege's pytest plugin, a README."""
    from protege.cli import templates
    from protege.plugins import normalize
    from protege.tool import tool_id_for

    if not DISTRIBUTION_NAME.match(name):
        raise ProtegeError(
            f"{name!r} is not a distribution name: letters and digits, joined by - _ or ."
        )
    distribution = normalize(name)
    module = distribution.replace("-", "_")
    short = distribution.removeprefix("protege-")
    class_name = "".join(part.capitalize() for part in short.split("-")) + "Tool"
    values = {
        "distribution": distribution,
        "module": module,
        "class_name": class_name,
        "tool_id": tool_id_for(class_name),
        "summary": summary,
    }
    root = parent / distribution
    if root.exists():
        raise ProtegeError(f"{root} already exists")
    files = {
        "pyproject.toml": templates.PYPROJECT,
        "README.md": templates.README,
        ".gitignore": templates.GITIGNORE,
        f"{module}/__init__.py": templates.MODULE,
        f"tests/test_{module}.py": templates.TESTS,
    }
    for relative, template in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(template.format(**values))
    click.echo(f"wrote {root}, a plugin offering the tool {values['tool_id']}")
    click.echo(f"Next: cd {root} && pip install -e '.[test]' && pytest")


TOOL_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
IMPORT_LINE = "from protege import Tool\n"


@click.group()
def tool() -> None:
    """Start a new tool in this host app."""


@tool.command("new")
@click.argument("name")
@click.option(
    "--module",
    help="Which of protege.toml's tool_modules gets the tool (default: the first).",
)
def new_tool(name: str, module: str | None) -> None:
    """Write a tool NAME (its id, such as lookup_order) into one of the host app's
    tool_modules, and a test of it using protege's pytest plugin, which passes as written."""
    from protege.cli import templates
    from protege.config import load_config
    from protege.tool import tool_id_for

    if not TOOL_ID.match(name) or "__" in name or name.endswith("_"):
        raise ProtegeError(
            f"{name!r} is not a tool id: lowercase letters, digits and single underscores, "
            "starting with a letter (such as lookup_order)"
        )
    class_name = "".join(part.capitalize() for part in name.split("_")) + "Tool"
    if tool_id_for(class_name) != name:
        raise ProtegeError(f"{name!r} is not a tool id a class name can give: try letters only")
    config = load_config()
    if config.path is None or not config.tool_modules:
        raise ProtegeError(
            "protege.toml names no tool_modules: `protege init --tool-module myapp.tools` "
            "writes one that does"
        )
    module = module or config.tool_modules[0]
    if module not in config.tool_modules:
        raise ProtegeError(
            f"{module} is not one of protege.toml's tool_modules ({', '.join(config.tool_modules)})"
        )
    _refuse_a_taken_id(name)
    root = config.root
    values = {"tool_id": name, "class_name": class_name, "module": module}
    target, written = _tool_file(root, module, name, templates.TOOL_CLASS.format(**values))
    test = root / "tests" / f"test_{name}.py"
    if test.exists():
        raise ProtegeError(f"{test} already exists")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(written)
    test.parent.mkdir(exist_ok=True)
    test.write_text(templates.TOOL_TESTS.format(**values))
    click.echo(f"wrote {class_name} ({name}) in {target} and its test {test}")
    click.echo(
        f"Next: `pytest {test.relative_to(root)}`, then `protege sync` adds it to All Tools."
    )


def _refuse_a_taken_id(name: str) -> None:
    from protege.cli.state import manifest

    taken = manifest().get(name)
    if taken is not None:
        raise ProtegeError(
            f"there is a tool {name} already ({taken.origin.value}, {taken.source}): "
            "choose another name"
        )


def _tool_file(root: Path, module: str, name: str, code: str) -> tuple[Path, str]:
    """Where the tool's class goes, and that file's text with the class in it: a new
    module in a package, added to a module file that exists, or a new module file."""
    path = root.joinpath(*module.split("."))
    if (path / "__init__.py").exists():
        target = path / f"{name}.py"
        if target.exists():
            raise ProtegeError(f"{target} already exists")
        return target, IMPORT_LINE + "\n\n" + code
    target = path.with_suffix(".py")
    if not target.exists():
        for package in [p for p in target.parents if root in p.parents]:
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        return target, IMPORT_LINE + "\n\n" + code
    return target, _with_tool_class(target, code)


def _with_tool_class(target: Path, code: str) -> str:
    """``target``'s text with ``code`` (a tool class) at its end, and ``Tool`` imported
    from protege after its last top-level import if it does not import it already."""
    text = target.read_text()
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise ProtegeError(f"{target} does not parse ({error.msg}, line {error.lineno})") from None
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    has_tool = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "protege"
        and any(alias.name == "Tool" and alias.asname is None for alias in node.names)
        for node in imports
    )
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if not has_tool:
        docstring = ast.get_docstring(tree, clean=False) is not None
        at = imports[-1].end_lineno if imports else (tree.body[0].end_lineno if docstring else 0)
        lines.insert(at or 0, IMPORT_LINE)
    return "".join(lines).rstrip("\n") + "\n\n\n" + code
