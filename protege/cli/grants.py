"""``protege grants``: attaching toolkits to agents, and the terms of each attachment."""

from __future__ import annotations

import click

from protege.cli.database import agent_and_toolkit, audited, open_database


@click.group()
def grants() -> None:
    """Attach toolkits to agents and set the terms of each grant."""


@grants.command("attach")
@click.argument("agent")
@click.argument("toolkit")
@click.option("--allow-proactive", is_flag=True, help="Also offer the tools on scheduled runs.")
def attach(agent: str, toolkit: str, allow_proactive: bool) -> None:
    """Grant TOOLKIT to AGENT, with an open sender gate."""
    from protege.models import Agent, Toolkit

    open_database()
    with audited("toolkit attached") as change:
        grant = Agent.named(agent).grant(Toolkit.named(toolkit), allow_proactive=allow_proactive)
        change.created(grant)
    click.echo(f"attached {grant.toolkit.name} to {grant.agent.name} (gate: open to every sender)")


@grants.command("detach")
@click.argument("agent")
@click.argument("toolkit")
def detach(agent: str, toolkit: str) -> None:
    """Take TOOLKIT away from AGENT, with its gate rules."""
    open_database()
    found_agent, found_toolkit, grant = agent_and_toolkit(agent, toolkit)
    with audited("toolkit detached", grant):
        grant.delete_instance(recursive=True)
    click.echo(f"detached {found_toolkit.name} from {found_agent.name}")


@grants.command("configure")
@click.argument("agent")
@click.argument("toolkit")
@click.option(
    "--allow-proactive/--no-allow-proactive",
    required=True,
    help="Whether the toolkit's tools are offered on the agent's scheduled runs.",
)
def configure(agent: str, toolkit: str, allow_proactive: bool) -> None:
    """Set the terms of a grant."""
    open_database()
    found_agent, found_toolkit, grant = agent_and_toolkit(agent, toolkit)
    with audited("scheduled runs allowed" if allow_proactive else "scheduled runs refused", grant):
        grant.allow_proactive = allow_proactive
        grant.save()
    state = "offered" if allow_proactive else "not offered"
    click.echo(f"{found_toolkit.name} is {state} on {found_agent.name}'s scheduled runs")
