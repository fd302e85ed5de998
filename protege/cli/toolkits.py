"""``protege toolkits``: bundles of tools that are granted to agents."""

from __future__ import annotations

import click

from protege.cli.database import audited, open_database
from protege.cli.output import echo_json, echo_table
from protege.errors import ProtegeError, did_you_mean


@click.group()
def toolkits() -> None:
    """Manage toolkits: named bundles of tools, granted to agents."""


def _check_ids(tool_ids: tuple[str, ...], force: bool) -> None:
    from protege.cli.state import manifest

    found = manifest()
    unknown = [i for i in tool_ids if i not in found]
    if unknown and not force:
        named = ", ".join(f"{i}{did_you_mean(i, found.ids())}" for i in unknown)
        raise ProtegeError(
            f"not in the manifest: {named} (see `protege tools`; "
            "--force adds them anyway, and they are skipped until they exist)"
        )


def _refuse_all_tools(toolkit) -> None:
    from protege.models.toolkits import ALL_TOOLS

    if toolkit.system_key == ALL_TOOLS:
        raise ProtegeError("All Tools is rewritten by `protege sync`: its members are not edited")


@toolkits.command("create")
@click.argument("name")
@click.option("--description", default="", help="What the toolkit is for.")
@click.option("--tool", "tool_ids", multiple=True, help="A member tool id (repeatable).")
@click.option("--force", is_flag=True, help="Accept tool ids the manifest does not hold.")
def create(name: str, description: str, tool_ids: tuple[str, ...], force: bool) -> None:
    """Create a toolkit."""
    from protege.models import Toolkit

    open_database()
    _check_ids(tool_ids, force)
    with audited("toolkit created") as change:
        toolkit = Toolkit.create(name=name, description=description, member_tool_ids=tool_ids)
        change.created(toolkit)
    click.echo(f"created toolkit {toolkit.name}: {', '.join(toolkit.member_tool_ids) or '-'}")


@toolkits.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_toolkits(as_json: bool) -> None:
    """List toolkits, their members (marking those no installed tool answers to) and how
    many agents hold each."""
    from protege.cli.state import manifest
    from protege.models import Agent, AgentToolkit, Toolkit

    open_database()
    found = manifest()
    holders: dict[int, list[str]] = {}
    for grant in AgentToolkit.select(AgentToolkit, Agent).join(Agent).order_by(Agent.name):
        holders.setdefault(grant.toolkit_id, []).append(grant.agent.name)
    rows = [
        {
            "name": t.name,
            "system": t.system_key,
            "tools": t.member_tool_ids,
            "missing_tools": [i for i in t.member_tool_ids if i not in found],
            "agents": holders.get(t.id, []),
        }
        for t in Toolkit.select().order_by(Toolkit.name)
    ]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("No toolkits yet: run `protege sync`, or `protege toolkits create NAME`.")
    else:
        echo_table(
            ["NAME", "SYSTEM", "TOOLS", "AGENTS"],
            [(r["name"], r["system"] or "-", _members(r), len(r["agents"])) for r in rows],
        )


@toolkits.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(name: str, as_json: bool) -> None:
    """Show a toolkit: its members (and any the manifest lacks) and the agents holding it."""
    from protege.cli.state import manifest
    from protege.models import Toolkit

    open_database()
    toolkit = Toolkit.named(name)
    tools = manifest()
    withheld = {w.tool_id: w.reason for w in tools.withheld}
    members = [
        {
            "id": tool_id,
            "summary": entry.summary if (entry := tools.get(tool_id)) is not None else None,
            "in_manifest": tool_id in tools,
            "withheld": withheld.get(tool_id),
        }
        for tool_id in toolkit.member_tool_ids
    ]
    agents = sorted(grant.agent.name for grant in toolkit.grants)
    if as_json:
        echo_json(
            {
                "name": toolkit.name,
                "description": toolkit.description,
                "system": toolkit.system_key,
                "tools": members,
                "agents": agents,
            }
        )
        return
    system = f" (system: {toolkit.system_key})" if toolkit.system_key else ""
    click.echo(f"{toolkit.name}{system}")
    if toolkit.description:
        click.echo(toolkit.description)
    click.echo("tools:" if members else "tools: none")
    for member in members:
        summary = (
            member["summary"]
            if member["in_manifest"]
            else f"(withheld: {member['withheld']})"
            if member["withheld"]
            else "(not in the manifest: skipped)"
        )
        click.echo(f"  {member['id']}  {summary}")
    click.echo(f"agents: {', '.join(agents) or 'none'}")


@toolkits.command("add-tools")
@click.argument("name")
@click.argument("tool_ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Accept tool ids the manifest does not hold.")
def add_tools(name: str, tool_ids: tuple[str, ...], force: bool) -> None:
    """Add tools to a toolkit."""
    from protege.models import Toolkit

    open_database()
    toolkit = Toolkit.named(name)
    _refuse_all_tools(toolkit)
    _check_ids(tool_ids, force)
    with audited("members added", toolkit):
        added = toolkit.add_tools(tool_ids)
    click.echo(f"{toolkit.name}: added {', '.join(added) or 'nothing (already members)'}")


@toolkits.command("remove-tools")
@click.argument("name")
@click.argument("tool_ids", nargs=-1, required=True)
def remove_tools(name: str, tool_ids: tuple[str, ...]) -> None:
    """Remove tools from a toolkit."""
    from protege.models import Toolkit

    open_database()
    toolkit = Toolkit.named(name)
    _refuse_all_tools(toolkit)
    with audited("members removed", toolkit):
        removed = toolkit.remove_tools(tool_ids)
    click.echo(f"{toolkit.name}: removed {', '.join(removed) or 'nothing (not members)'}")


@toolkits.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, yes: bool) -> None:
    """Delete a toolkit; it is detached from every agent holding it."""
    from protege.models import Toolkit

    open_database()
    toolkit = Toolkit.named(name)
    if toolkit.system_key is not None:
        toolkit.delete_instance()  # raises: system toolkits cannot be deleted
    holders = len(toolkit.grants)
    if not yes:
        click.confirm(f"Delete toolkit {toolkit.name} (held by {holders} agent(s))?", abort=True)
    with audited("toolkit deleted", toolkit):
        toolkit.delete_instance(recursive=True)
    click.echo(f"deleted toolkit {toolkit.name}")


def _members(row: dict) -> str:
    missing = set(row["missing_tools"])
    shown = [f"{i} (missing)" if i in missing else i for i in row["tools"]]
    return ", ".join(shown) or "-"
