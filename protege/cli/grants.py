"""``protege grants``: attaching toolkits to agents, and the terms of each attachment."""

from __future__ import annotations

import click

from protege.cli.database import agent_and_toolkit, open_database


@click.group()
def grants() -> None:
    """Attach toolkits to agents and set the terms of each grant."""


@grants.command("attach")
@click.argument("agent")
@click.argument("toolkit")
@click.option("--allow-proactive", is_flag=True, help="Also offer the tools on scheduled runs.")
def attach(agent: str, toolkit: str, allow_proactive: bool) -> None:
    """Grant TOOLKIT to AGENT, with an open sender gate."""
    from protege.audit import command_line_actor
    from protege.models import Agent, Toolkit
    from protege.operations import attach_toolkit

    open_database()
    grant = attach_toolkit(
        Agent.named(agent),
        Toolkit.named(toolkit),
        actor=command_line_actor(),
        allow_proactive=allow_proactive,
    )
    click.echo(f"attached {grant.toolkit.name} to {grant.agent.name} (gate: open to every sender)")
    warn_of_skipped_approvals(grant.agent, grant.toolkit.name)


def warn_of_skipped_approvals(agent, toolkit: str) -> None:
    """Say where ``toolkit``'s grant lets a sender skip an approval another grant asks for
    (or where another grant skips the approval this one asks for)."""
    from protege.cli.state import manifest
    from protege.models.resolution import bypassed_approvals

    for bypass in bypassed_approvals(agent, manifest()):
        if toolkit in (bypass.given_by, bypass.guarded_by):
            click.echo(f"warning: {bypass.describe(agent.name)}", err=True)


@grants.command("detach")
@click.argument("agent")
@click.argument("toolkit")
def detach(agent: str, toolkit: str) -> None:
    """Take TOOLKIT away from AGENT, with its gate rules."""
    from protege.audit import command_line_actor
    from protege.operations import detach_toolkit

    open_database()
    found_agent, found_toolkit, grant = agent_and_toolkit(agent, toolkit)
    detach_toolkit(grant, actor=command_line_actor())
    click.echo(f"detached {found_toolkit.name} from {found_agent.name}")


@grants.command("configure")
@click.argument("agent")
@click.argument("toolkit")
@click.option(
    "--allow-proactive/--no-allow-proactive",
    default=None,
    help="Whether the toolkit's tools are offered on the agent's scheduled runs.",
)
@click.option(
    "--approval-by",
    "approval_by",
    multiple=True,
    metavar="PATTERN",
    help="Calls to the toolkit's tools wait for a yes from a sender matching PATTERN "
    "(repeatable; same patterns as gate rules, e.g. '*@thescoop.com').",
)
@click.option(
    "--approval-to",
    "approval_to",
    multiple=True,
    metavar="ADDRESS",
    help="Mail approval requests to ADDRESS, an approver (repeatable; default: the "
    "approver patterns that are plain addresses).",
)
@click.option(
    "--approval-timeout",
    metavar="DURATION",
    help="How long a call waits for an answer before it is refused: 90m, 72h, 3d (default 72h).",
)
@click.option(
    "--self-approval/--no-self-approval",
    default=None,
    help="Whether a call asked for by an approver runs at once (default: it does).",
)
@click.option("--no-approval", is_flag=True, help="The toolkit's tools run without approval.")
@click.option(
    "--whole-archive/--no-whole-archive",
    default=None,
    help="Whether the toolkit's mail tools (search_emails, read_attachment, attaching files) "
    "reach all of the agent's mail, or only the mail the run's sender took part in "
    "(the default).",
)
def configure(
    agent: str,
    toolkit: str,
    allow_proactive: bool | None,
    approval_by: tuple[str, ...],
    approval_to: tuple[str, ...],
    approval_timeout: str | None,
    self_approval: bool | None,
    no_approval: bool,
    whole_archive: bool | None,
) -> None:
    """Set the terms of a grant: scheduled runs, the approval its tools need, and the mail
    its mail tools reach."""
    from protege import operations
    from protege.audit import command_line_actor

    approval_options = bool(approval_by or approval_to or approval_timeout) or (
        self_approval is not None
    )
    nothing_else = allow_proactive is None and not approval_options and not no_approval
    if nothing_else and whole_archive is None:
        raise click.UsageError(
            "say what to set: --allow-proactive/--no-allow-proactive, "
            "--approval-by ..., --no-approval, or --whole-archive/--no-whole-archive"
        )
    if no_approval and approval_options:
        raise click.UsageError("--no-approval cannot go with other approval options")
    open_database()
    actor = command_line_actor()
    found_agent, found_toolkit, grant = agent_and_toolkit(agent, toolkit)
    lines = []
    if allow_proactive is not None:
        operations.set_scheduled_runs(grant, allow_proactive, actor=actor)
        state = "offered" if allow_proactive else "not offered"
        lines.append(f"{found_toolkit.name} is {state} on {found_agent.name}'s scheduled runs")
    if whole_archive is not None:
        operations.set_whole_archive(grant, whole_archive, actor=actor)
        lines.append(describe_archive(found_toolkit.name, found_agent.name, whole_archive))
        if whole_archive and not any(rule.kind == "allow" for rule in grant.rules):
            click.echo(
                f"warning: {found_toolkit.name}'s gate has no allow rule, so it admits "
                "strangers: anyone who writes to "
                f"{found_agent.name} can have its mail tools reach all of its mail",
                err=True,
            )
    if no_approval:
        operations.clear_grant_approval(grant, actor=actor)
        lines.append(f"{found_toolkit.name}'s tools run without approval for {found_agent.name}")
    elif approval_options:
        policy = operations.require_grant_approval(
            grant,
            actor=actor,
            approvers=approval_by or None,  # None keeps the grant's approvers
            notify=approval_to or None,
            timeout=parse_duration(approval_timeout) if approval_timeout else None,
            self_approval=self_approval,
        )
        lines.append(describe_approval(found_toolkit.name, found_agent.name, policy))
    for line in lines:
        click.echo(line)
    if no_approval or approval_options:
        warn_of_skipped_approvals(found_agent, found_toolkit.name)


def describe_archive(toolkit: str, agent: str, whole_archive: bool) -> str:
    """One line saying which of the agent's mail a grant's mail tools reach."""
    if whole_archive:
        return f"{toolkit}'s mail tools reach all of {agent}'s mail, for any sender it admits"
    return f"{toolkit}'s mail tools reach only the mail the run's sender took part in"


def describe_approval(toolkit: str, agent: str, policy) -> str:
    """One line saying what approval a grant's tools need."""
    own = (
        "an approver asking is approved at once"
        if policy.self_approval
        else ("someone other than the asker must approve")
    )
    return (
        f"{toolkit}'s tools wait for approval by {', '.join(policy.approvers)} on {agent}'s "
        f"runs (requests to {', '.join(policy.notify)}; refused after "
        f"{format_duration(policy.timeout)} unanswered; {own})"
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Seconds in a duration such as ``90m``, ``72h`` or ``3d`` (a bare number is seconds)."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in _UNITS else "s"
    number = value[:-1] if value[-1:] in _UNITS else value
    if not number.isdigit() or int(number) == 0:
        raise click.BadParameter(f"{text!r} is not a duration such as 90m, 72h or 3d")
    return int(number) * _UNITS[unit]


def format_duration(seconds: int) -> str:
    """``seconds`` in the largest whole unit (``72h``, ``3d``, ``90m``)."""
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"
