"""``protege rules`` (a grant's sender gate) and ``protege access-rules`` (who reaches an agent)."""

from __future__ import annotations

import click

from protege.cli.database import agent_and_toolkit, audited, open_database
from protege.cli.output import echo_json
from protege.errors import ProtegeError

KIND = click.Choice(["allow", "deny"])


def _remove(subject, rules, kind: str, pattern: str, where: str) -> None:
    from protege.access import normalize_pattern

    wanted = normalize_pattern(pattern)
    matching = [rule for rule in rules if rule.kind == kind and rule.pattern == wanted]
    if not matching:
        raise ProtegeError(f"no rule '{kind} {wanted}' on {where}")
    with audited("rule removed", subject):
        for rule in matching:
            rule.delete_instance()
    click.echo(f"removed {kind} {wanted} from {where}")


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
    open_database()
    _, _, grant = agent_and_toolkit(agent, toolkit)
    with audited("rule added", grant):
        rule = grant.add_rule(kind, pattern)
    click.echo(f"{grant.toolkit.name} on {grant.agent.name}: {rule}")


@rules.command("remove")
@click.argument("agent")
@click.argument("toolkit")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def remove_rule(agent: str, toolkit: str, kind: str, pattern: str) -> None:
    """Remove a rule from a grant's gate."""
    open_database()
    _, _, grant = agent_and_toolkit(agent, toolkit)
    _remove(grant, grant.rules, kind, pattern, f"{grant.toolkit.name} on {grant.agent.name}")


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

    open_database()
    found = Agent.named(agent)
    with audited("access rule added", found):
        rule = found.add_access_rule(kind, pattern)
    click.echo(f"{found.name}: {rule}")


@access_rules.command("remove")
@click.argument("agent")
@click.argument("kind", type=KIND)
@click.argument("pattern")
def remove_access_rule(agent: str, kind: str, pattern: str) -> None:
    """Remove one of an agent's access rules."""
    from protege.models import Agent

    open_database()
    found = Agent.named(agent)
    _remove(found, found.access_rules, kind, pattern, found.name)


@access_rules.command("list")
@click.argument("agent")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_access_rules(agent: str, as_json: bool) -> None:
    """List an agent's access rules."""
    from protege.models import Agent

    open_database()
    found = Agent.named(agent)
    _list(found.access_rules, as_json, "no rules: anyone may reach this agent")
