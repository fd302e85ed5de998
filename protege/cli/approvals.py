"""``protege approvals``: tool calls waiting for a person's yes, and answering them."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.database import open_database, open_installation
from protege.cli.output import echo_json, echo_table
from protege.errors import ProtegeError


@click.group()
def approvals() -> None:
    """Tool calls waiting for approval: list them, approve or deny them."""


@approvals.command("list")
@click.option("--all", "everything", is_flag=True, help="Answered and expired ones too.")
@click.option("--agent", help="Only this agent's approvals.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_approvals(everything: bool, agent: str | None, as_json: bool) -> None:
    """List approvals, oldest first: pending ones unless --all."""
    from protege.models import Agent, Approval, Run
    from protege.models.approvals import PENDING

    open_database()
    query = Approval.select(Approval, Run, Agent).join(Run).join(Agent).order_by(Approval.id)
    if not everything:
        query = query.where(Approval.status == PENDING)
    if agent is not None:
        query = query.where(Run.agent == Agent.named(agent).id)
    rows = [_summary(a) for a in query]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no approvals are waiting" if not everything else "no approvals")
        return
    echo_table(
        ["id", "run", "agent", "tool", "asked by", "status", "expires (UTC)", "answered by"],
        [
            [
                r["id"],
                r["run"],
                r["agent"],
                r["tool"],
                r["requested_by"] or "(scheduled run)",
                r["status"],
                r["expires_at"],
                r["answered_by"] or "",
            ]
            for r in rows
        ],
    )


@approvals.command("show")
@click.argument("approval_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(approval_id: int, as_json: bool) -> None:
    """Show one approval: the call, its arguments, who may answer, what was decided."""
    from protege.harness.events import printable

    open_database()
    summary = _summary(_approval(approval_id))
    if as_json:
        echo_json(summary)
        return
    for key, value in summary.items():
        click.echo(printable(f"{key}: {value}"))


@approvals.command("approve")
@click.argument("approval_id", type=int)
@click.option("--reason", help="Why (recorded in the run's trail).")
@click.option("--run", "run_now", is_flag=True, help="Carry out the resumed run right away.")
def approve(approval_id: int, reason: str | None, run_now: bool) -> None:
    """Approve a waiting call: it runs once when its run resumes."""
    _answer(approval_id, "approved", reason, run_now)


@approvals.command("deny")
@click.argument("approval_id", type=int)
@click.option("--reason", help="Why (the model is told).")
@click.option("--run", "run_now", is_flag=True, help="Carry out the resumed run right away.")
def deny(approval_id: int, reason: str | None, run_now: bool) -> None:
    """Deny a waiting call: it does not run, and the model is told so."""
    _answer(approval_id, "denied", reason, run_now)


def _answer(approval_id: int, decision: str, reason: str | None, run_now: bool) -> None:
    from protege.audit import command_line_actor
    from protege.operations import answer_approval

    installation = open_installation() if run_now else None
    if installation is None:
        open_database()
    answered = answer_approval(
        _approval(approval_id).id, decision, actor=command_line_actor(), reason=reason
    )
    click.echo(answered.describe())
    run = answered.run
    if installation is not None and run.status == "queued":
        from protege.cli.runs import carried_out

        ended = carried_out(run, installation)
        click.echo(f"run {ended.id}: {ended.status}" + (f" ({ended.error})" if ended.error else ""))


def _approval(approval_id: int):
    from protege.models import Approval

    found = Approval.get_or_none(Approval.id == approval_id)
    if found is None:
        raise ProtegeError(f"no approval {approval_id} (see `protege approvals list`)")
    return found


def _summary(approval) -> dict[str, object]:
    return {
        "id": approval.id,
        "run": approval.run_id,
        "agent": approval.run.agent.name,
        "tool": approval.tool,
        "arguments": approval.arguments,
        "requested_by": approval.requested_by,
        "approvers": list(approval.approvers),
        "notified": list(approval.notified),
        "status": approval.status,
        "created_at": approval.created_at.isoformat(timespec="seconds"),
        "expires_at": approval.expires_at.isoformat(timespec="minutes"),
        "answered_by": approval.answered_by,
        "answered_at": approval.answered_at.isoformat(timespec="seconds")
        if approval.answered_at
        else None,
        "reason": approval.reason,
    }


@approvals.command("require")
@click.argument("agent")
@click.argument("tool")
@click.option(
    "--by",
    "approval_by",
    multiple=True,
    required=True,
    metavar="PATTERN",
    help="Who approves: a sender matching PATTERN (repeatable; e.g. '*@thescoop.com').",
)
@click.option(
    "--to",
    "approval_to",
    multiple=True,
    metavar="ADDRESS",
    help="Mail requests to ADDRESS, an approver (repeatable; default: the plain addresses "
    "among --by).",
)
@click.option(
    "--timeout",
    "approval_timeout",
    metavar="DURATION",
    help="How long a call waits before it is refused: 90m, 72h, 3d (default 72h).",
)
@click.option(
    "--self-approval/--no-self-approval",
    default=True,
    help="Whether a call asked for by an approver runs at once (default: it does).",
)
def require(
    agent: str,
    tool: str,
    approval_by: tuple[str, ...],
    approval_to: tuple[str, ...],
    approval_timeout: str | None,
    self_approval: bool,
) -> None:
    """Make every call to TOOL on AGENT's runs wait for approval, whichever toolkit gives
    it: no grant can lift this (unlike a grant's own approval)."""
    from protege.access import DEFAULT_APPROVAL_TIMEOUT
    from protege.audit import command_line_actor
    from protege.cli.grants import describe_approval, parse_duration
    from protege.cli.state import manifest
    from protege.models import Agent
    from protege.operations import require_tool_approval

    open_database()
    found = Agent.named(agent)
    tools = manifest()
    policy = require_tool_approval(
        found,
        tool,
        tools,
        actor=command_line_actor(),
        approvers=approval_by,
        notify=approval_to,
        timeout=parse_duration(approval_timeout) if approval_timeout else DEFAULT_APPROVAL_TIMEOUT,
        self_approval=self_approval,
    )
    click.echo(describe_approval(tool, found.name, policy).replace("'s tools wait", " waits", 1))
    if tool not in {entry.id for entry in found.available_tools(tools)}:
        click.echo(f"(no toolkit attached to {found.name} gives {tool} yet)")


@approvals.command("unrequire")
@click.argument("agent")
@click.argument("tool")
def unrequire(agent: str, tool: str) -> None:
    """Take back `approvals require` for TOOL on AGENT (a grant's approval, and a tool that
    requires approval itself, still apply)."""
    from protege.audit import command_line_actor
    from protege.models import Agent
    from protege.operations import unrequire_tool_approval

    open_database()
    found = Agent.named(agent)
    unrequire_tool_approval(found, tool, actor=command_line_actor())
    click.echo(f"{tool} no longer requires approval on {found.name} whatever grants it")


@approvals.command("required")
@click.option("--agent", help="Only this agent.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def required(agent: str | None, as_json: bool) -> None:
    """List the tools that wait for approval whatever grants them: those whose class
    requires it, and those an operator made wait on an agent."""
    from protege.cli.grants import format_duration
    from protege.cli.state import manifest
    from protege.models import Agent

    open_database()
    tools = manifest()
    agents = [Agent.named(agent)] if agent else list(Agent.select().order_by(Agent.name))
    rows: list[dict[str, Any]] = []
    for found in agents:
        by_operator = found.approvals_required()
        offered = {entry.id for entry in found.available_tools(tools)}
        for tool_id in sorted(offered | by_operator.keys()):
            entry = tools.get(tool_id)
            by_tool = entry is not None and entry.requires_approval
            if not (by_tool or tool_id in by_operator):
                continue
            policy = by_operator.get(tool_id)
            rows.append(
                {
                    "agent": found.name,
                    "tool": tool_id,
                    "required_by": "tool and operator"
                    if by_tool and policy
                    else ("tool" if by_tool else "operator"),
                    "approvers": list(policy.approvers) if policy else None,
                    "timeout_seconds": policy.timeout if policy else None,
                    "given": tool_id in offered,
                }
            )
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no tool requires approval whatever grants it")
        return
    echo_table(
        ["agent", "tool", "required by", "approvers", "timeout", "given by a toolkit"],
        [
            [
                r["agent"],
                r["tool"],
                r["required_by"],
                ", ".join(r["approvers"]) if r["approvers"] else "(those of its grants)",
                format_duration(r["timeout_seconds"]) if r["timeout_seconds"] else "",
                "yes" if r["given"] else "no",
            ]
            for r in rows
        ],
    )
