"""``protege dashboard`` and ``protege operators``."""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

import attrs
import click

if TYPE_CHECKING:
    from protege.admin import Config, Installation
    from protege.models import Operator


# Imports wait until a command runs: `register_commands` runs for any plugin command.
def _open(config: Config | None = None) -> Installation:
    """This folder's installation (or ``config``'s), its schema checked current; closed
    when the command ends."""
    from protege import admin

    installation = admin.open_installation(config or admin.load_config())
    click.get_current_context().call_on_close(installation.close)
    with installation.activated():
        admin.require_current()
    return installation


@click.command()
@click.option("--host", help="Address to listen on (default 127.0.0.1: this machine only).")
@click.option("--port", type=int, help="Port to listen on (default 8025; 0: any free port).")
def dashboard(host: str | None, port: int | None) -> None:
    """Serve the operators' dashboard and the HTTP mail ingresses."""
    import uvicorn

    from protege import admin
    from protege_dashboard.app import create_app
    from protege_dashboard.settings import read_settings, refuse_old_table

    config = admin.load_config()
    refuse_old_table(config.plugins)
    installation = _open(config)
    settings = read_settings(installation)
    host = host or settings.host
    port = settings.port if port is None else port
    settings = attrs.evolve(settings, host=host, port=port)
    app = create_app(installation, settings)
    if not _operators():
        click.echo("warning: no operators yet: add one with `protege operators add NAME`", err=True)
    # Bound here, before saying where: the line printed means the dashboard answers.
    listening = _listen(host, port)
    bound_host, bound_port = listening.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    click.echo(f"protege dashboard on http://{shown}:{bound_port}/ (Ctrl-C stops it)")
    sys.stdout.flush()
    serving = uvicorn.Config(app, log_level="warning", server_header=False, lifespan="off")
    uvicorn.Server(serving).run(sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listening = socket.socket(family, kind, proto)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        listening.listen(128)
    except OSError as error:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {error.strerror or error}"
        ) from None
    return listening


def _operators() -> list[Operator]:
    from protege_dashboard.operators import list_operators

    return list_operators()


@click.group()
def operators() -> None:
    """The people who may sign in to the dashboard."""


@operators.command("add")
@click.argument("name")
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from standard input (one line)."
)
def add(name: str, password_stdin: bool) -> None:
    """Add an operator; asks for the password (at least 10 characters)."""
    from protege_dashboard.operators import add_operator

    _open()
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    operator = add_operator(name, password)
    click.echo(f"added operator {operator.name}")


@operators.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove an operator; their sessions end at once."""
    from protege_dashboard.operators import remove_operator

    _open()
    remove_operator(name)
    click.echo(f"removed operator {name}")


@operators.command("list")
def list_command() -> None:
    """List the operators."""
    _open()
    found = _operators()
    if not found:
        click.echo("No operators yet: `protege operators add NAME`.")
    for operator in found:
        click.echo(f"{operator.name}  (added {operator.created_at:%Y-%m-%d %H:%M})")
