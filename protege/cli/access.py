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
    from protege.access import routing_key
    from protege.models import Agent
    from protege.models.resolution import explain as explain_resolution
    from protege.registry import manifest

    if (sender is None) == (not scheduled):
        raise click.UsageError("give exactly one of --sender ADDRESS or --scheduled")
    open_database()
    found = Agent.named(agent)
    resolution = explain_resolution(found, manifest(), sender=sender, scheduled=scheduled)
    reach = None if scheduled else found.admits(sender)
    if as_json:
        echo_json(
            {
                "agent": found.name,
                "run": "scheduled" if scheduled else "reply",
                "sender": sender,
                "routing_key": None if scheduled else routing_key(sender),
                "reaches_agent": None if reach is None else reach.admitted,
                "reach_reason": None if reach is None else reach.reason,
                "toolkits": [
                    {
                        "toolkit": g.toolkit,
                        "admitted": g.admitted,
                        "reason": g.reason,
                        "tools": list(g.tool_ids),
                        "missing": list(g.missing_ids),
                    }
                    for g in resolution.grants
                ],
                "tools": resolution.tool_ids,
            }
        )
        return
    if scheduled:
        click.echo(f"{found.name}, scheduled run")
    elif reach is not None:
        key = routing_key(sender) or "does not parse"
        click.echo(f"{found.name}, reply to {sender} (routing key: {key})")
        verdict = "may write to" if reach.admitted else "may NOT write to"
        click.echo(f"  sender {verdict} {found.name}: {reach.reason}")
    if not resolution.grants:
        click.echo("  no toolkits attached: no tools")
    for grant in resolution.grants:
        mark = "admitted" if grant.admitted else "refused "
        click.echo(f"  {mark}  {grant.toolkit}: {grant.reason}")
        if grant.missing_ids:
            click.echo(f"            skipped (not in the manifest): {', '.join(grant.missing_ids)}")
    click.echo(f"tools: {', '.join(resolution.tool_ids) or 'none'}")
