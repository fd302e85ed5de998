"""``protege status``: what the workers have before them, per agent."""

from __future__ import annotations

import click

from protege.cli.database import open_database
from protege.cli.output import echo_json, echo_table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def status(as_json: bool) -> None:
    """Show queued, running, stuck, failed and waiting runs and pending mail, per agent,
    and whether the model endpoint is failing.

    A run is stuck when it is running but its worker stopped renewing its lease: serve
    takes it over by itself; `protege runs retry` does at once. While the model endpoint's
    circuit is open, workers take no runs: they wait in the queue until it may be tried.
    """
    from protege.limits.circuit import describe, summary
    from protege.models import Agent
    from protege.models.base import utcnow
    from protege.status import overview

    open_database()
    now = utcnow()
    counts = overview(now)
    endpoint = describe(now)
    names = {agent.id: agent.name for agent in Agent.select(Agent.id, Agent.name)}
    rows = [
        {"agent": names.get(agent_id, f"#{agent_id}"), **row} for agent_id, row in counts.items()
    ]
    rows.sort(key=lambda row: str(row["agent"]))
    if as_json:
        echo_json({"agents": rows, "model_endpoint": endpoint})
        return
    if endpoint is not None:
        click.echo(summary(endpoint))
    if not rows:
        click.echo("nothing queued, running, stuck, failed, waiting or pending")
        return
    columns = ["queued", "running", "stuck", "failed", "waiting", "pending_mail"]
    echo_table(
        ["agent", "queued", "running", "stuck", "failed", "waiting", "pending mail"],
        [[row["agent"], *(row[c] for c in columns)] for row in rows],
    )
