"""The ``protege`` command line: each command mirrors a piece of the Python API."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Any

import click

from protege.errors import ProtegeError

# Built-in commands are imported only when run, so ``protege --help`` stays fast and never
# imports a plugin, a model client or a database driver.
COMMANDS = {
    "access": ("protege.cli.access", "access", "Explain which tools a run would get, and why."),
    "access-rules": ("protege.cli.rules", "access_rules", "Who may reach an agent at all."),
    "approvals": (
        "protege.cli.approvals",
        "approvals",
        "Tool calls waiting for approval: list, approve, deny.",
    ),
    "audit": ("protege.cli.audit", "audit", "Who changed access, when, before and after."),
    "agents": ("protege.cli.agents", "agents", "Create, list, show and delete agents."),
    "doctor": ("protege.cli.doctor", "doctor", "Report every problem with tools and plugins."),
    "grants": ("protege.cli.grants", "grants", "Attach toolkits to agents, set their terms."),
    "init": ("protege.cli.scaffold", "init", "Write a commented protege.toml for a host app."),
    "install": ("protege.cli.install", "install", "Install plugins into protege's environment."),
    "migrate": ("protege.cli.sync", "migrate", "Apply pending database migrations."),
    "model": ("protege.cli.model", "model", "Serve the echo model, to try protege without a key."),
    "plugin": ("protege.cli.scaffold", "plugin", "Start a new plugin distribution."),
    "plugins": ("protege.cli.plugins", "plugins", "List installed plugins and their status."),
    "receive": ("protege.cli.mail", "receive", "Take one email from a file or standard input."),
    "responsibilities": (
        "protege.cli.responsibilities",
        "responsibilities",
        "Duties agents carry out on a schedule.",
    ),
    "rules": ("protege.cli.rules", "rules", "The sender gate of a grant."),
    "runs": ("protege.cli.runs", "runs", "Start, list and inspect agent runs."),
    "scheduler": (
        "protege.cli.responsibilities",
        "scheduler",
        "Queue due responsibilities alone (serve also does).",
    ),
    "serve": ("protege.cli.mail", "serve", "Receive mail by SMTP and carry out the runs."),
    "status": ("protege.cli.status", "status", "Runs and mail waiting on workers, per agent."),
    "sync": ("protege.cli.sync", "sync", "Migrate and rebuild the system toolkits (each deploy)."),
    "toolkits": ("protege.cli.toolkits", "toolkits", "Create and edit toolkits of tools."),
    "tool": ("protege.cli.scaffold", "tool", "Start a new tool in this host app."),
    "tools": ("protege.cli.tools", "tools", "List the tools in the manifest and where from."),
    "uninstall": (
        "protege.cli.install",
        "uninstall",
        "Remove plugins from protege's environment.",
    ),
    "usage": ("protege.cli.usage", "usage", "Tokens (and cost) per run and per agent."),
}
DEBUG_VARIABLE = "PROTEGE_DEBUG"


class ProtegeGroup(click.Group):
    """A click group that loads built-in commands lazily and plugin commands on demand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugin_commands: dict[str, click.Command] | None = None
        self.clashes: list[str] = []  # one line per plugin command a built-in one hides

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module_name, attribute, _ = COMMANDS[cmd_name]
            return getattr(importlib.import_module(module_name), attribute)
        return self.plugin_commands().get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            known = [*COMMANDS, *self.plugin_commands()]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, summary) for name, (_, _, summary) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        formatter.write_paragraph()
        formatter.write_text("Plugins may add commands of their own; `protege plugins` lists them.")

    def plugin_commands(self) -> dict[str, click.Command]:
        """Commands contributed through the ``register_commands`` hook, collected once."""
        if self._plugin_commands is None:
            from protege.cli.state import plugins as plugin_host
            from protege.plugins import PluginStatus

            host = plugin_host()
            collected: dict[str, click.Command] = {}
            owners: dict[str, Any] = {}
            host.hook.register_commands(cli=_CommandSink(collected, owners))
            for name, owner in list(owners.items()):
                if owner.status is PluginStatus.ERROR:
                    del collected[name], owners[name]
            for plugin in host.plugins:
                if "register_commands" in plugin.failures:
                    click.echo(
                        f"warning: plugin {plugin.source.distribution}: {plugin.error}", err=True
                    )
            self.clashes = [
                f"plugin {owners[name].source.distribution} adds the command `{name}`, "
                "which protege already has: the plugin's is never run"
                for name in sorted(collected)
                if name in COMMANDS
            ]
            self._plugin_commands = {k: v for k, v in collected.items() if k not in COMMANDS}
        return self._plugin_commands

    def invoke(self, ctx: click.Context) -> Any:
        _log_to_stderr()  # here, not at import: `protege --help` stays free of logging
        try:
            return super().invoke(ctx)
        except ProtegeError as error:
            raise click.ClickException(str(error)) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except Exception as error:
            if os.environ.get(DEBUG_VARIABLE):
                raise
            message = " ".join(str(error).split()) or "no message"
            raise click.ClickException(
                f"internal error ({type(error).__name__}: {message}); "
                f"set {DEBUG_VARIABLE}=1 to see the traceback"
            ) from None


class _CommandSink(click.Group):
    """The group plugins add commands to; it records them instead of serving them."""

    def __init__(self, collected: dict[str, click.Command], owners: dict[str, Any]) -> None:
        super().__init__(name="protege")
        self.collected, self.owners = collected, owners

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        from protege.plugins import current_plugin

        owner = current_plugin()
        if owner is None:  # kept by a plugin and called after its hook returned
            raise RuntimeError("commands are added while register_commands runs")
        name = name or cmd.name or ""
        earlier = self.owners.get(name)
        # pluggy calls plugins in its own order; the first by distribution name keeps a name.
        if earlier is None or _sort_key(owner) < _sort_key(earlier):
            self.collected[name] = cmd
            self.owners[name] = owner


def _sort_key(plugin: Any) -> str:
    from protege.plugins import normalize

    return normalize(plugin.source.distribution)


def _version() -> str:
    from protege import __version__

    return __version__


@click.group(cls=ProtegeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="protege")
def cli() -> None:
    """protege: AI colleagues that live in your application and are reached by email."""


def _log_to_stderr() -> None:
    # Warnings go to standard error, never into output a script reads; the problems that
    # `doctor`, `plugins` and `tools` list are not printed a second time as log lines.
    import logging

    from protege.errors import REPORTED

    class LowerLevel(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"{record.levelname.lower()}: {super().format(record)}"

    def ours(record: logging.LogRecord) -> bool:
        # protege's, and its plugins' (protege_mcp, protege_web...): not every library's.
        name = record.name
        from_us = name == "protege" or name.startswith(("protege.", "protege_"))
        return from_us and not getattr(record, REPORTED, False)

    root = logging.getLogger()
    if any(getattr(h, "protege_cli", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.protege_cli = True  # type: ignore[attr-defined]
    handler.setLevel(logging.WARNING)
    handler.setFormatter(LowerLevel("%(message)s"))
    handler.addFilter(ours)
    root.addHandler(handler)


START_UP_SECONDS = 2.0


def main(argv: list[str] | None = None) -> None:
    """Run the command line (the ``protege`` console script); the process ends after it."""
    _collect_after_start_up()
    try:
        cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="protege")
    except BrokenPipeError:
        # The reader went away (`protege tools --json | head`): end quietly. Python would
        # complain again when flushing stdout at exit, so it is pointed at nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    finally:
        _skip_the_last_collection()


def _collect_after_start_up() -> threading.Timer:
    # Start-up (importing the plugins, building the manifest) makes objects that live as long
    # as the process, and Python's cycle collector would look through them all again and
    # again while they are made: with 200 plugins, about a twentieth of `protege tools`. So
    # it is off for the first seconds: most commands are over by then, and a long-running
    # one (serve, the scheduler, the dashboard) has it back from then on.
    import gc

    gc.disable()
    timer = threading.Timer(START_UP_SECONDS, gc.enable)
    timer.daemon = True
    timer.start()
    return timer


def _skip_the_last_collection() -> None:
    # On its way out, Python looks through every object for reference cycles to free: with
    # a few hundred plugins loaded that takes about as long as building the manifest, for
    # memory the system takes back anyway. Frozen objects are left out of that search. They
    # are still freed when their last reference goes; only a finalizer inside a cycle is
    # not run, which Python never promises at exit. The tests call `cli`, never `main`.
    import gc

    gc.freeze()
