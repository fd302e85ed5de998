"""``protege rules`` (a grant's sender gate) and ``protege access-rules`` (who reaches an agent)."""

from __future__ import annotations

import click

from protege.cli.database import agent_and_toolkit, open_database
from protege.cli.output import echo_json

KIND = click.Choice(["allow", "deny"])


def _actor() -> str:
    from protege.audit import command_line_actor

    return command_line_actor()


def _list(rules, as_json: bool, empty: str) -> None:
    listed = [{"kind": r.kind, "pattern": r.pattern} for r in sorted(rules, key=lambda r: r.id)]
    if as_json:
        echo_json(listed)
    elif not listed:
        click.echo(empty)
    else:
        for rule in listed:
            click.echo(f"{rule['kind']} {rule['pattern']}")


@click.group()
def rules() -> None:
    """Manage the sender gate of a grant (which senders unlock a toolkit)."""


@rules.command("add")
@click.argument("agent")
@click.argument("toolkit")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def add_rule(agent: str, toolkit: str, kind: str, pattern: str) -> None:
    """Add an allow or deny PATTERN (an address, or one with a single *) to a grant's gate."""
    from protege.operations import add_gate_rule

    open_database()
    _, _, grant = agent_and_toolkit(agent, toolkit)
    rule = add_gate_rule(grant, kind, pattern, actor=_actor())
    click.echo(f"{grant.toolkit.name} on {grant.agent.name}: {rule}")


@rules.command("remove")
@click.argument("agent")
@click.argument("toolkit")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def remove_rule(agent: str, toolkit: str, kind: str, pattern: str) -> None:
    """Remove a rule from a grant's gate."""
    from protege.operations import remove_gate_rule

    open_database()
    _, _, grant = agent_and_toolkit(agent, toolkit)
    removed = remove_gate_rule(grant, kind, pattern, actor=_actor())
    click.echo(f"removed {kind} {removed} from {grant.toolkit.name} on {grant.agent.name}")


@rules.command("list")
@click.argument("agent")
@click.argument("toolkit")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_rules(agent: str, toolkit: str, as_json: bool) -> None:
    """List the rules of a grant's gate."""
    open_database()
    _, _, grant = agent_and_toolkit(agent, toolkit)
    _list(grant.rules, as_json, "no rules: the gate is open to every sender")


@click.group("access-rules")
def access_rules() -> None:
    """Manage who may reach an agent at all (checked before any run)."""


@access_rules.command("add")
@click.argument("agent")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def add_access_rule(agent: str, kind: str, pattern: str) -> None:
    """Add an allow or deny PATTERN to an agent's access rules."""
    from protege.models import Agent
    from protege.operations import add_access_rule

    open_database()
    found = Agent.named(agent)
    rule = add_access_rule(found, kind, pattern, actor=_actor())
    click.echo(f"{found.name}: {rule}")


@access_rules.command("remove")
@click.argument("agent")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def remove_access_rule(agent: str, kind: str, pattern: str) -> None:
    """Remove one of an agent's access rules."""
    from protege.models import Agent
    from protege.operations import remove_access_rule

    open_database()
    found = Agent.named(agent)
    removed = remove_access_rule(found, kind, pattern, actor=_actor())
    click.echo(f"removed {kind} {removed} from {found.name}")


@access_rules.command("list")
@click.argument("agent")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_access_rules(agent: str, as_json: bool) -> None:
    """List an agent's access rules."""
    from protege.models import Agent

    open_database()
    found = Agent.named(agent)
    _list(found.access_rules, as_json, "no rules: anyone may reach this agent")
