"""``protege agents``: create, list, show, edit, archive, restore and delete agents."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.database import audited, open_database
from protege.cli.instructions import read_instructions
from protege.cli.output import echo_json, echo_table
from protege.errors import ProtegeError


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
@click.option("--archived", is_flag=True, help="List the archived agents instead.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_agents(archived: bool, as_json: bool) -> None:
    """List agents with their toolkits (archived ones only with --archived)."""
    from protege.models import Agent, AgentToolkit, Toolkit

    open_database()
    held: dict[int, list[str]] = {}
    for grant in AgentToolkit.select(AgentToolkit, Toolkit).join(Toolkit).order_by(Toolkit.name):
        held.setdefault(grant.agent_id, []).append(grant.toolkit.name)
    shown = Agent.select().where(Agent.archived_at.is_null(not archived))
    rows = [
        {"name": agent.name, "address": agent.address, "toolkits": held.get(agent.id, [])}
        for agent in shown.order_by(Agent.name)
    ]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo(
            "No archived agents."
            if archived
            else "No agents yet: `protege agents create NAME --address ADDRESS`."
        )
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
    from protege.cli.state import manifest
    from protege.models import Agent

    open_database()
    agent = Agent.named(name)
    data: dict[str, Any] = {
        "name": agent.name,
        "address": agent.address,
        "instructions": agent.instructions,
        "archived": agent.archived,
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
    if agent.archived:
        click.echo(f"archived: mail to it is refused; `protege agents restore {agent.name}`")
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


@agents.command("edit")
@click.argument("name")
@click.option("--name", "new_name", help="A new name.")
@click.option("--address", help="A new address (mail to the old one is then refused).")
@click.option("--instructions", help="New instructions.")
@click.option("--instructions-file", type=click.Path(dir_okay=False), help="Read them from F.")
def edit(
    name: str,
    new_name: str | None,
    address: str | None,
    instructions: str | None,
    instructions_file: str | None,
) -> None:
    """Change an agent's name, address or instructions."""
    from protege.models import Agent

    text = read_instructions(instructions, instructions_file, required=False)
    if new_name is None and address is None and text is None:
        raise ProtegeError(
            "nothing to change: give --name, --address, --instructions or --instructions-file"
        )
    open_database()
    agent = Agent.named(name)
    with audited("agent edited", agent):
        changed = agent.edit(name=new_name, address=address, instructions=text)
    said = ", ".join(changed) if changed else "nothing changed"
    click.echo(f"edited agent {agent.name} <{agent.address}>: {said}")


def _counted(history: dict[str, int]) -> str:
    parts = [
        f"{count} {kind if count != 1 else kind.removesuffix('s')}"
        for kind, count in history.items()
    ]
    return f"{', '.join(parts[:-1])} and {parts[-1]}"


@agents.command("delete")
@click.argument("name")
@click.option(
    "--archive",
    is_flag=True,
    help="Keep it with its mail and runs, hidden and sent nothing (`protege agents restore`).",
)
@click.option("--purge", is_flag=True, help="Delete its messages, runs and approvals with it.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, archive: bool, purge: bool, yes: bool) -> None:
    """Delete an agent with its grants and rules. One with mail or runs is refused unless
    told to --archive it (kept, restorable) or to --purge them too."""
    from protege.models import Agent

    if archive and purge:
        raise ProtegeError("give --archive or --purge, not both")
    open_database()
    agent = Agent.named(name)
    if archive:
        with audited("agent archived", agent):
            agent.archive()
        click.echo(
            f"archived agent {agent.name}: its mail and runs are kept, mail to it is refused; "
            f"`protege agents restore {agent.name}` brings it back"
        )
        return
    history = agent.history()
    if any(history.values()) and not purge:
        raise ProtegeError(
            f"{agent.name} has {_counted(history)}: give --archive to keep them (the agent "
            "hidden, restorable) or --purge to delete them with it"
        )
    if purge:
        click.echo(f"deleting agent {agent.name} deletes {_counted(history)}")
    if not yes:
        click.confirm(f"Delete agent {agent.name} <{agent.address}>?", abort=True)
    action = f"agent purged with {_counted(history)}" if purge else "agent deleted"
    with audited(action, agent):
        agent.delete_instance(recursive=True)
    click.echo(f"deleted agent {agent.name}")


@agents.command("restore")
@click.argument("name")
def restore(name: str) -> None:
    """Bring an archived agent back: listed, and mail to it accepted again."""
    from protege.models import Agent

    open_database()
    agent = Agent.named(name)
    with audited("agent restored", agent):
        agent.restore()
    click.echo(f"restored agent {agent.name} <{agent.address}>")
