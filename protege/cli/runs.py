"""``protege runs``: start a run without mail, list runs, and read a run's audit trail."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.database import open_database, open_installation
from protege.cli.output import echo_json, echo_table
from protege.errors import ProtegeError


@click.group()
def runs() -> None:
    """Start, list and inspect agent runs."""


@runs.command("start")
@click.argument("agent")
@click.option("--sender", required=True, help="Who the message is from.")
@click.option("--message", "body", required=True, help="The message body.")
@click.option("--subject", default="", help="The message subject.")
@click.option(
    "--transport",
    type=click.Choice(["outbox", "configured"]),
    default="outbox",
    show_default=True,
    help="Where the run's mail goes: the local outbox, or [mail] transport (SMTP: real mail).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def start(agent: str, sender: str, body: str, subject: str, transport: str, as_json: bool) -> None:
    """Run AGENT on a message from SENDER, as if it had arrived by mail, and show the run.

    Mail the run sends stays in the local outbox unless --transport configured says to
    send it the way [mail] transport does.
    """
    from protege.mail import record_inbound
    from protege.models import Agent
    from protege.queue import queue_reply

    installation = open_installation(mail_transport="outbox" if transport == "outbox" else None)
    found = Agent.named(agent)
    reach = found.admits(sender)
    if not reach.admitted:
        raise ProtegeError(f"{sender} may not write to {found.name}: {reach.reason}")
    click.echo(_where_mail_goes(installation.config, transport), err=True)
    # The operator is speaking for SENDER: the sender counts as authenticated (operator).
    message = record_inbound(found, sender=sender, body=body, subject=subject)
    show_outcome(carried_out(queue_reply(message), installation), as_json)


@runs.command("retry")
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def retry(run_id: int, as_json: bool) -> None:
    """Run a failed or stuck run again, from where it stopped, and show it."""
    from protege.queue import requeue

    installation = open_installation()
    show_outcome(carried_out(requeue(_run_numbered(run_id)), installation), as_json)


@runs.command("cancel")
@click.argument("run_id", type=int, required=False)
@click.option("--held", is_flag=True, help="Every held run (of --agent, from --sender).")
@click.option("--agent", help="With --held: the held runs of this agent.")
@click.option("--sender", help="With --held: the held runs of mail from this address.")
def cancel(run_id: int | None, held: bool, agent: str | None, sender: str | None) -> None:
    """Stop a run: a queued or waiting one at once, a running one at its next step. With
    --held, cancel every held run (of an --agent, from a --sender) instead: a flood's held
    mail, discarded before it is released and paid for."""
    from protege.audit import command_line_actor
    from protege.models import Agent
    from protege.operations import cancel_held, cancel_run

    if held == (run_id is not None):
        raise click.UsageError("give a run id, or --held (with --agent, --sender), not both")
    if not held and (agent or sender):
        raise click.UsageError("--agent and --sender choose held runs: add --held")
    open_database()
    if run_id is not None:
        click.echo(cancel_run(run_id, actor=command_line_actor()).describe())
        return
    chosen = Agent.named(agent) if agent else None
    click.echo(cancel_held(actor=command_line_actor(), agent=chosen, sender=sender).describe())


@runs.command("release")
@click.argument("run_ids", nargs=-1, type=int)
@click.option("--agent", help="Every held run of this agent.")
@click.option("--sender", help="Every held run of mail from this address.")
@click.option("--all", "everything", is_flag=True, help="Every held run.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs released as JSON.")
def release(
    run_ids: tuple[int, ...],
    agent: str | None,
    sender: str | None,
    everything: bool,
    as_json: bool,
) -> None:
    """Queue held runs now, whatever the limits say: RUN_IDS, or those of an --agent
    and/or a --sender, or --all. `protege runs list --held` lists them."""
    from protege.audit import command_line_actor
    from protege.models import Agent
    from protege.operations import release_held

    open_database()
    released = release_held(
        actor=command_line_actor(),
        run_ids=run_ids,
        agent=Agent.named(agent) if agent else None,
        sender=sender,
        everything=everything,
    )
    if as_json:
        echo_json({"released": list(released.run_ids)})
    else:
        click.echo(released.describe())


def carried_out(run, installation):
    """Carry ``run`` out in this process, then send the mail it queued."""
    from protege.delivery import send_pending
    from protege.harness import execute

    ended = execute(run, installation)
    # Its own mail only, not other processes'.
    send_pending(installation.config, run=ended, transport=installation.transport)
    return ended


@runs.command("list")
@click.option("--agent", help="Only this agent's runs.")
@click.option("--responsibility", help="Only the runs of this responsibility.")
@click.option("--status", help="Only runs in this status (queued, running, done, failed...).")
@click.option("--since", "since_value", help="Only runs created since: 30m, 2h, 7d, or a date.")
@click.option("--held", is_flag=True, help="Only held runs, with their sender, why and until when.")
@click.option("--limit", default=20, show_default=True, help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_runs(
    agent: str | None,
    responsibility: str | None,
    status: str | None,
    since_value: str | None,
    held: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List recent runs, newest first: status, duration, tokens, and times with their
    time zone (this machine's in the table, UTC in JSON). With --held, the runs over a
    limit: `protege runs release` queues them before their time."""
    from protege.cli.timing import duration, iso, local, seconds_between, since
    from protege.cli.usage import tokens_by_run
    from protege.models import Agent, Responsibility, Run

    open_database()
    query = Run.select(Run, Agent).join(Agent).order_by(Run.id.desc()).limit(limit)
    whose = Agent.named(agent) if agent else None
    if whose is not None:
        query = query.where(Run.agent == whose)
    if responsibility:
        query = query.where(Run.responsibility == Responsibility.named(responsibility, whose))
    if held:
        if status and status.strip().lower() != "held":
            raise ProtegeError("--held lists held runs: leave out --status")
        status = "held"
    if status:
        query = query.where(Run.status == status.strip().lower())
    if since_value:
        query = query.where(Run.created_at >= since(since_value))
    found = list(query)
    if held:
        _list_held(found, as_json)
        return
    tokens = tokens_by_run(run.id for run in found)
    rows = [
        {
            **_summary(run),
            "created_at": iso(run.created_at),
            "started_at": iso(run.started_at),
            "finished_at": iso(run.finished_at),
            "due_at": iso(run.due_at),
            "duration_seconds": seconds_between(run.started_at, run.finished_at),
            "total_tokens": tokens[run.id].total,
        }
        for run in found
    ]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("No runs yet.")
    else:
        echo_table(
            ["RUN", "AGENT", "KIND", "STATUS", "CREATED", "DURATION", "TOKENS", "DUE", "ERROR"],
            [
                (
                    r["id"],
                    r["agent"],
                    r["kind"],
                    r["status"],
                    local(run.created_at),
                    duration(seconds_between(run.started_at, run.finished_at)),
                    r["total_tokens"],
                    local(run.due_at),
                    _one_line(r["error"]),
                )
                for r, run in zip(rows, found, strict=True)
            ],
        )


def _list_held(found, as_json: bool) -> None:
    from protege.cli.timing import iso, local
    from protege.limits.senders import address_of, shown

    rows = [
        {
            "id": run.id,
            "agent": run.agent.name,
            "kind": run.kind,
            "sender": None if run.sender_key is None else address_of(run.sender_key)[0],
            "sender_proven": None if run.sender_key is None else address_of(run.sender_key)[1],
            "created_at": iso(run.created_at),
            "held_until": iso(run.held_until),
            "reason": run.held_reason,
        }
        for run in found
    ]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("No held runs.")
    else:
        echo_table(
            ["RUN", "AGENT", "SENDER", "HELD UNTIL", "CREATED", "REASON"],
            [
                (
                    r["id"],
                    r["agent"],
                    shown(run.sender_key) if run.sender_key else f"({r['kind']})",
                    local(run.held_until),
                    local(run.created_at),
                    _one_line(r["reason"]),
                )
                for r, run in zip(rows, found, strict=True)
            ],
        )


@runs.command("show")
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(run_id: int, as_json: bool) -> None:
    """Show a run and every event of its audit trail."""
    open_database()
    _show(_run_numbered(run_id), as_json)


def _run_numbered(run_id: int):
    from protege.models import Run

    run = Run.get_or_none(Run.id == run_id)
    if run is None:
        raise ProtegeError(f"no run {run_id}")
    return run


def show_outcome(run, as_json: bool) -> None:
    """Show ``run``; exit with status 1 unless it is done (or waits for approval, or is
    held at a limit: it resumes once released)."""
    _show(run, as_json)
    if run.status not in ("done", "waiting", "held"):
        raise click.exceptions.Exit(1)


def _summary(run) -> dict[str, object]:
    return {
        "id": run.id,
        "agent": run.agent.name,
        "kind": run.kind,
        "status": run.status,
        "attempts": run.attempts,
        "correlation_id": run.correlation_id,
        "created_at": run.created_at.isoformat(timespec="seconds"),
        "due_at": run.due_at.isoformat(timespec="seconds") if run.due_at else None,
        "error": run.error,
    }


def _event_json(row) -> dict[str, object]:
    from protege.harness import events

    stored = row.payload
    if not isinstance(stored, dict):  # nothing to read: show what is there
        return {"seq": row.seq, "kind": row.kind, "payload": stored}
    typed = events.read(row.kind, stored).as_json()
    fields = typed if isinstance(typed, dict) else {}
    # Keys an older or newer version wrote stay visible: this is an audit trail.
    return {"seq": row.seq, "kind": row.kind, **stored, **fields}


def _show(run, as_json: bool) -> None:
    from protege.cli.timing import iso
    from protege.cli.usage import tokens_by_run, usage_json
    from protege.config import load_config
    from protege.harness import events

    timeline = run.timeline()
    sent = _mail_of(run)
    verdict = run.message.verdict if run.message_id else None
    used = usage_json(tokens_by_run([run.id])[run.id], load_config().model)
    if as_json:
        echo_json(
            {
                **_summary(run),
                "held_until": iso(run.held_until),
                "held_reason": run.held_reason,
                "usage": used,
                "sender_verdict": None if verdict is None else verdict.as_json(),
                "events": [_event_json(e) for e in timeline],
                "mail": sent,
            }
        )
        return
    subject = f"message from {run.message.sender}" if run.message_id else run.responsibility.name
    click.echo(
        events.printable(f"run {run.id}: {run.agent.name}, {run.kind} ({subject}), {run.status}")
    )
    if verdict is not None:
        click.echo(events.printable(f"sender: {verdict.summary()}"))
    if run.error:
        click.echo(f"error: {events.printable(run.error)}")
    if run.status == "held" and run.held_reason:
        click.echo(f"held: {events.printable(run.held_reason)}")
    if used["responses"]:
        click.echo(events.printable(_usage_line(used)))
    for event in timeline:
        click.echo(f"{event.seq:4d} {events.render(event.kind, event.payload)}")
    for mail in sent:  # where each mail is now: the delivery loop sends it after the event
        click.echo(events.printable(_mail_line(mail)))


def _usage_line(used: dict[str, Any]) -> str:
    """A run's tokens and cost in one line: in all, then each model's share."""
    from protege.cli.usage import money

    answers = used["responses"]
    plural = "s" if answers != 1 else ""
    line = (
        f"usage: {used['total_tokens']:,} tokens (prompt {used['prompt_tokens']:,}, "
        f"completion {used['completion_tokens']:,}) in {answers} answer{plural}"
        f"; cost {money(used['cost'], used['unpriced_models'])}"
    )
    shares = [
        f"{name} {'no price' if share['cost'] is None else format(share['cost'], '.4f')}"
        for name, share in used["models"].items()
    ]
    return line + (f" ({', '.join(shares)})" if shares else "")


def _mail_line(mail: dict[str, Any]) -> str:
    """Where one mail stands, in one line: for pending mail, how often it was tried, who
    still waits and why, and when the next try is; then who was refused, and any error."""
    import datetime

    line = f"mail {mail['message_id']}: {mail['status']}"
    tries = mail["attempts"]
    if mail["status"] == "pending":
        if tries:
            plural = "s" if tries != 1 else ""
            line += f", tried {tries} time{plural}, still for {', '.join(mail['waiting'])}"
        else:
            line += ", not tried yet (the delivery loop of `protege serve` sends it)"
        if mail["next_attempt_at"] is not None:
            when = datetime.datetime.fromisoformat(mail["next_attempt_at"]).astimezone()
            line += f", next try {when.isoformat(sep=' ', timespec='seconds')}"
    elif tries > 1:
        line += f" after {tries} tries"
    line += "".join(
        f"; refused {r.get('address')} ({r.get('code')} {r.get('reason')})" for r in mail["refused"]
    )
    return line + (f"; {mail['error']}" if mail["error"] else "")


def _mail_of(run) -> list[dict[str, Any]]:
    """The mail ``run`` queued, with what became of it so far."""
    from protege.cli.timing import iso
    from protege.mail import redact_tokens
    from protege.models import Message

    return [
        {
            "message_id": redact_tokens(message.message_id),
            "status": message.status,
            "to": message.to_addresses,
            "waiting": list(message.pending_recipients) if message.status == "pending" else [],
            "refused": [r for r in message.refused_recipients if isinstance(r, dict)],
            "error": message.delivery_error,
            "attempts": message.delivery_attempts,
            "next_attempt_at": iso(message.next_attempt_at)
            if message.status == "pending"
            else None,
        }
        for message in Message.select()
        .where((Message.run == run.id) & (Message.direction == "outbound"))
        .order_by(Message.id)
    ]


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:80] if text else ""


def _where_mail_goes(config, transport: str) -> str:
    from protege.config import load_config

    configured = load_config().mail
    relay = f"SMTP through {configured.smtp_host}:{configured.smtp_port}"
    if configured.transport != "smtp":
        relay = f"the {configured.transport} transport"
    if config.mail.transport == "outbox":
        line = f"mail from this run goes to the outbox {config.data_dir / 'outbox'}, not sent"
        if configured.transport != "outbox":
            line += f"; --transport configured sends it by {relay}"
        return line
    return f"mail from this run is sent by {relay} (--transport configured): people get it"
