"""The Scoop: a small host application used by protege's demo and documentation.

Its tools (``the_scoop.tools``) reach protege as host tools, named by ``tool_modules``;
``the_scoop.scenario`` is the story that ``protege demo`` plays. The package is also a protege
plugin (entry point ``the_scoop``) for one reason: to add the ``demo`` command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protege import hookimpl

if TYPE_CHECKING:
    import click


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``protege demo``."""
    # click and the command module load only when protege asks for a plugin command.
    from the_scoop.commands import demo

    cli.add_command(demo)
