"""``protege install`` and ``protege uninstall``: pip, run in the environment protege runs in.

As ``llm install`` and ``datasette install`` do: a plugin must land where this ``protege``
will import it, which is not always where the ``pip`` first on the PATH installs.
"""

from __future__ import annotations

import subprocess
import sys

import click

from protege.errors import ProtegeError

# Removing these would leave the command that asked without itself.
PROTECTED = frozenset({"protege", "pip"})
PASS_THROUGH = {"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}


def _pip(*arguments: str) -> None:
    command = [sys.executable, "-m", "pip", *arguments]
    try:
        code = subprocess.call(command)
    except OSError as error:
        raise ProtegeError(f"cannot run pip with {sys.executable}: {error}") from None
    if code != 0:
        raise click.exceptions.Exit(code)


@click.command(context_settings=PASS_THROUGH)
@click.argument("packages", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest.")
@click.option("-e", "--editable", is_flag=True, help="Install a local folder in editable mode.")
def install(packages: tuple[str, ...], upgrade: bool, editable: bool) -> None:
    """Install PACKAGES (plugins, protege[builtins], ...) into protege's own environment.

    Other pip options (--no-deps, --pre, --index-url URL, ...) are passed on to pip.
    """
    arguments = ["install", *(["--upgrade"] if upgrade else [])]
    if editable:
        arguments.append("--editable")
    _pip(*arguments, *packages)
    click.echo("Run `protege plugins` to see what was installed, `protege sync` to offer it.")


@click.command(context_settings=PASS_THROUGH)
@click.argument("packages", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall PACKAGES from protege's own environment."""
    from protege.plugins import normalize

    refused = sorted(p for p in packages if normalize(p) in PROTECTED)
    if refused:
        raise ProtegeError(
            f"protege uninstall will not remove {', '.join(refused)}: it runs on it; "
            f"use {sys.executable} -m pip uninstall"
        )
    _pip("uninstall", *(["--yes"] if yes else []), *packages)
