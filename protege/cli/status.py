"""``protege status``: what the workers have before them, per agent, and where the limits
stand."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.database import open_database
from protege.cli.output import echo_json, echo_table

COUNTS = ("queued", "running", "stuck", "failed", "waiting", "held", "pending_mail")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option(
    "--reset-circuit",
    is_flag=True,
    help="Close the model endpoint's circuit now (it answers again): runs are taken at once.",
)
def status(as_json: bool, reset_circuit: bool) -> None:
    """Show queued, running, stuck, failed, waiting and held runs and pending mail, per
    agent; the held mail, and the limits in force with what was used of each in the
    window under way; and whether the model endpoint is failing.

    A run is stuck when it is running but its worker stopped renewing its lease: serve
    takes it over by itself; `protege runs retry` does at once. A run is held when its
    mail came over a limit: it starts when the window reopens, or at once with
    `protege runs release`. While the model endpoint's circuit is open, workers take no
    runs: they wait in the queue until it may be tried; `--reset-circuit` closes it at
    once (recorded in the audit log), for an endpoint that answers again.
    """
    if reset_circuit:
        from protege.audit import command_line_actor
        from protege.operations import reset_circuit as close_circuits

        open_database()
        click.echo(close_circuits(actor=command_line_actor()).describe())
        return
    from protege.config import load_config
    from protege.harness.events import printable
    from protege.limits.circuit import describe, summary
    from protege.limits.standing import standings
    from protege.models import Agent
    from protege.models.base import utcnow
    from protege.status import overview

    settings = load_config().limits
    open_database()
    now = utcnow()
    counts = overview(now)
    endpoint = describe(now)
    agents = {
        agent.id: agent
        for agent in Agent.select(Agent.id, Agent.name, Agent.archived_at)
        if agent.archived_at is None or agent.id in counts
    }
    standing = standings(((a.id, a.name) for a in agents.values()), now, settings)
    zero = dict.fromkeys(COUNTS, 0)
    rows = [
        {
            "agent": agent.name,
            **counts.get(agent.id, zero),
            **standing.agents[agent.id].as_json(),
        }
        for agent in agents.values()
    ]
    rows.sort(key=lambda row: str(row["agent"]))
    mailboxes = _mailboxes(now)
    if as_json:
        echo_json(
            {
                "agents": rows,
                "installation": standing.installation_json(),
                "model_endpoint": endpoint,
                "mailboxes": mailboxes,
            }
        )
        return
    if endpoint is not None:
        click.echo(printable(summary(endpoint)))
    busy = [row for row in rows if any(row[c] for c in COUNTS)]
    if not busy:
        click.echo("nothing queued, running, stuck, failed, waiting, held or pending")
    else:
        echo_table(
            ["agent", "queued", "running", "stuck", "failed", "waiting", "held", "pending mail"],
            [[row["agent"], *(row[c] for c in COUNTS)] for row in busy],
        )
    if mailboxes:
        click.echo("\nmailboxes ([mail.imap]):")
        echo_table(
            ["mailbox", "agent", "read by", "last look", "waiting", "lag", "taken", "last error"],
            [
                [
                    box["mailbox"],
                    box["agent"],
                    box["reader"] or "nobody (is serve running?)",
                    _ago(box["seconds_since_check"]),
                    box["waiting"],
                    f"{box['lag_seconds']:.0f} s",
                    box["taken"],
                    printable(str(box["last_error"] or "-"))[:120],
                ]
                for box in mailboxes
            ],
        )
    by_name = sorted(standing.agents.values(), key=lambda agent: agent.name)
    held = [(agent.name, group) for agent in by_name for group in agent.held]
    if held:
        click.echo("\nheld mail (`protege runs list --held`; `protege runs release` queues it):")
        echo_table(
            ["agent", "held", "reason"],
            [(name, group.describe(), group.reason) for name, group in held],
        )
    whose = [(agent.name, agent.limits) for agent in by_name]
    whose.append(("(installation)", standing.installation_limits))
    in_force = [
        (name, limit.limit, *limit.cells())
        for name, limits in whose
        for limit in limits.values()
        if limit.allowed
    ]
    if not in_force:
        click.echo("\nno limits in force ([limits] in protege.toml)")
        return
    click.echo("\nlimits in force, and what was used of each in the window under way:")
    echo_table(["whose", "limit", "used", "allowed", "window ends"], in_force)


def _mailboxes(now: Any) -> list[dict[str, Any]]:
    from protege.config import load_config
    from protege.gateway.checkpoints import standing

    return standing(load_config(), now)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds:.0f} s ago"
