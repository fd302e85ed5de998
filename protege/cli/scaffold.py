"""``protege init`` and ``protege plugin new``: the files a host app or a plugin starts with."""

from __future__ import annotations

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
