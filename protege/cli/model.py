"""``protege model echo``: a model to try protege with, before choosing a real one."""

from __future__ import annotations

import sys

import click

from protege.errors import ProtegeError


@click.group()
def model() -> None:
    """Models served by protege itself, for trying it without an API key."""


@model.command("echo")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True)
def echo(host: str, port: int) -> None:
    """Serve the echo model (an OpenAI-compatible Chat Completions endpoint, no key needed)
    until interrupted: it replies to each email by quoting it, after calling any offered
    tool the email names with a JSON object (`lookup_order {"order_number": "SCP-1042"}`).
    It does what an email says with the tools it is offered: for trying protege on your own
    mail, never for mail from outside."""
    from protege.cli.stopping import Stopper
    from protege.testing.echo import EchoModel

    try:
        server = EchoModel(host, port)
    except OSError as error:
        raise ProtegeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    stopper = Stopper().install()
    server.start()
    _say(f"protege: the echo model answers at {server.base_url}; Ctrl-C stops")
    _say("Point protege at it, in the shell you run protege in:")
    _say(f"    export PROTEGE_MODEL=echo PROTEGE_MODEL_BASE_URL={server.base_url}")
    _say(f'or under [model] in protege.toml: model = "echo", base_url = "{server.base_url}"')
    stopper.wait()
    server.stop()
    _say("protege: stopped")


def _say(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()  # a reader (or a test) sees each line as it happens
