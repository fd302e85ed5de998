"""The hooks a protege plugin may implement.

A plugin is a module named by an entry point in the ``protege`` group; it implements any of the
hooks below with functions decorated by ``protege.hookimpl``::

    from protege import Tool, hookimpl

    class GetForecastTool(Tool):
        ...

    @hookimpl
    def register_tools(register):
        register(GetForecastTool)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from protege.tool import Tool

PROJECT_NAME = "protege"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_tools(register: Callable[[type[Tool]], Any]) -> None:
    """Offer tool classes to the manifest by calling ``register(ToolClass)`` for each.

    Called each time a manifest is built (once per command, once when the server starts),
    so it should only register, with no side effects. A class that breaks the tool
    contract is reported and left out; the plugin's other tools still register. If this hook
    raises, none of the plugin's tools are registered and the plugin is reported as broken.
    A tool whose id a host tool, a built-in tool, or an earlier plugin (by distribution name)
    already uses is shadowed: listed by ``protege tools``, never offered to a model.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``protege`` command line with ``cli.add_command(...)``.

    Called only when a command that protege itself does not define is invoked, so plugins
    are never imported to print ``protege --help``. A command whose name protege already uses
    is ignored.
    """


@hookspec
def plugin_settings() -> Any:
    """Declare the plugin's settings: return an attrs class, or a JSON Schema (a dict) of
    an object.

    The operator writes them in ``[plugins.DISTRIBUTION]`` of ``protege.toml``; they are
    checked when the manifest is built, with errors naming each wrong key as protege names its
    own, and reach the plugin's tools as ``context.config.plugin_settings("DISTRIBUTION")``
    (an instance of the attrs class, or the checked dict with the schema's defaults filled
    in). A key that would hold a secret (``password``, ``token``, ``api_key``...) is refused:
    declare ``..._env`` naming the environment variable that holds it. A plugin whose
    settings are wrong is reported and skipped, like one that fails to import.
    """
