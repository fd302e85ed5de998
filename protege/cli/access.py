"""``protege access explain``: why a run would get the tools it gets."""

from __future__ import annotations

import click

from protege.cli.database import open_database
from protege.cli.output import echo_json


@click.group()
def access() -> None:
    """Inspect tool access decisions."""


@access.command("explain")
@click.argument("agent")
@click.option("--sender", help="The address the inbound mail would come from.")
@click.option("--scheduled", is_flag=True, help="Explain a scheduled run instead.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def explain(agent: str, sender: str | None, scheduled: bool, as_json: bool) -> None:
    """For each toolkit of AGENT: admitted or not, and which rule decided; then the tools."""
    from protege.admin import explain as explanation_of
    from protege.models import Agent
    from protege.registry import manifest

    if (sender is None) == (not scheduled):
        raise click.UsageError("give exactly one of --sender ADDRESS or --scheduled")
    open_database()
    found = explanation_of(Agent.named(agent), manifest(), sender=sender, scheduled=scheduled)
    if as_json:
        echo_json(found.as_json())
        return
    for line in found.lines():
        click.echo(line)
