"""``protege agents``: create, list, show and delete agents."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.database import audited, open_database
from protege.cli.output import echo_json, echo_table


@click.group()
def agents() -> None:
    """Manage agents: the colleagues people write to."""


@agents.command("create")
@click.argument("name")
@click.option("--address", required=True, help="The agent's own email address.")
@click.option("--instructions", default="", help="What the agent is for and how it works.")
def create(name: str, address: str, instructions: str) -> None:
    """Create an agent; it is granted Default Tools if `protege sync` has run."""
    from protege.models import Agent

    open_database()
    with audited("agent created") as change:
        agent = Agent.create(name=name, address=address, instructions=instructions)
        change.created(agent)
    click.echo(f"created agent {agent.name} <{agent.address}>")
    granted = [grant.toolkit.name for grant in agent.grants]
    if granted:
        click.echo(f"granted {', '.join(granted)}")
    else:
        click.echo(
            f"warning: {agent.name} has no toolkits, so no tools: there is no Default Tools "
            "toolkit yet. Run `protege sync`, then `protege grants attach "
            f"{agent.name} 'Default Tools'`.",
            err=True,
        )


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_agents(as_json: bool) -> None:
    """List agents with their toolkits."""
    from protege.models import Agent, AgentToolkit, Toolkit

    open_database()
    held: dict[int, list[str]] = {}
    for grant in AgentToolkit.select(AgentToolkit, Toolkit).join(Toolkit).order_by(Toolkit.name):
        held.setdefault(grant.agent_id, []).append(grant.toolkit.name)
    rows = [
        {"name": agent.name, "address": agent.address, "toolkits": held.get(agent.id, [])}
        for agent in Agent.select().order_by(Agent.name)
    ]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("No agents yet: `protege agents create NAME --address ADDRESS`.")
    else:
        echo_table(
            ["NAME", "ADDRESS", "TOOLKITS"],
            [(r["name"], r["address"], ", ".join(r["toolkits"]) or "-") for r in rows],
        )


@agents.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(name: str, as_json: bool) -> None:
    """Show an agent: access rules, each grant with its gate, and the tool catalogue."""
    from protege.models import Agent
    from protege.registry import manifest

    open_database()
    agent = Agent.named(name)
    data: dict[str, Any] = {
        "name": agent.name,
        "address": agent.address,
        "instructions": agent.instructions,
        "access_rules": [str(rule) for rule in agent.access_rules],
        "grants": [
            {
                "toolkit": grant.toolkit.name,
                "allow_proactive": grant.allow_proactive,
                "rules": [str(rule) for rule in grant.rules],
                "tools": grant.toolkit.member_tool_ids,
            }
            for grant in sorted(agent.grants, key=lambda g: g.toolkit.name)
        ],
        "catalogue": [entry.id for entry in agent.available_tools(manifest())],
    }
    if as_json:
        echo_json(data)
        return
    click.echo(f"{agent.name} <{agent.address}>")
    if agent.instructions:
        click.echo(f"instructions: {agent.instructions}")
    click.echo(f"access rules: {', '.join(data['access_rules']) or 'none (anyone may write)'}")
    click.echo("grants:" if data["grants"] else "grants: none (this agent has no tools)")
    for grant in data["grants"]:
        proactive = "yes" if grant["allow_proactive"] else "no"
        click.echo(f"  {grant['toolkit']} (scheduled runs: {proactive})")
        click.echo(f"    gate: {', '.join(grant['rules']) or 'no rules (open to every sender)'}")
        click.echo(f"    tools: {', '.join(grant['tools']) or '-'}")
    click.echo(f"catalogue: {', '.join(data['catalogue']) or '-'}")


@agents.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, yes: bool) -> None:
    """Delete an agent with its grants and rules."""
    from protege.models import Agent

    open_database()
    agent = Agent.named(name)
    if not yes:
        click.confirm(f"Delete agent {agent.name} <{agent.address}>?", abort=True)
    with audited("agent deleted", agent):
        agent.delete_instance(recursive=True)
    click.echo(f"deleted agent {agent.name}")
