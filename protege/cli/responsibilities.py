"""``protege responsibilities`` (duties agents carry out on a schedule) and ``protege
scheduler`` (the scheduler alone, for deployments that run it apart from ``serve``)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import click

from protege.cli.database import audited, open_database, open_installation
from protege.cli.instructions import read_instructions
from protege.cli.output import echo_json, echo_table
from protege.cli.stopping import Stopper
from protege.errors import ProtegeError

UPCOMING = 5


@click.group()
def responsibilities() -> None:
    """Duties agents carry out on their own, on a cron schedule."""


def _agent_option(function: Any) -> Any:
    return click.option("--agent", help="Whose responsibility (when several share the name).")(
        function
    )


def _find(name: str, agent: str | None):
    from protege.models import Agent, Responsibility

    return Responsibility.named(name, Agent.named(agent) if agent else None)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _when(responsibility, instant: datetime.datetime | None) -> str:
    if instant is None:
        return "-"
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=datetime.UTC)
    cron = responsibility.cron
    shown = cron.local(instant) if cron is not None else instant
    return shown.strftime("%Y-%m-%d %H:%M %Z")


def _next_due(responsibility) -> datetime.datetime | None:
    cron = responsibility.cron
    if cron is None or not responsibility.enabled:
        return None
    upcoming = cron.upcoming(_now(), 1)
    return upcoming[0] if upcoming else None


@responsibilities.command("add")
@click.argument("agent")
@click.argument("name")
@click.option("--schedule", help="Five-field cron, e.g. '0 7 * * 1-5' or '@daily'.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--instructions", help="What to do each time (the run's prompt).")
@click.option("--instructions-file", type=click.Path(dir_okay=False), help="Read them from F.")
@click.option("--disabled", is_flag=True, help="Add it switched off.")
def add(
    agent: str,
    name: str,
    schedule: str | None,
    timezone: str,
    instructions: str | None,
    instructions_file: str | None,
    disabled: bool,
) -> None:
    """Give AGENT a responsibility NAME, run on --schedule (or only when asked, without)."""
    from protege.models import Agent, Responsibility

    prompt = read_instructions(instructions, instructions_file, required=True)
    open_database()
    with audited("responsibility added") as change:
        duty = Responsibility.create(
            agent=Agent.named(agent),
            name=name,
            prompt=prompt,
            schedule=schedule,
            timezone=timezone,
            enabled=not disabled,
        )
        change.created(duty)
    click.echo(f"added {duty.agent.name}'s responsibility {duty.name!r}: {_timing(duty)}")


def _timing(duty) -> str:
    if duty.schedule is None:
        return "runs only when asked (`protege responsibilities run`)"
    state = "" if duty.enabled else ", disabled"
    due = _next_due(duty)
    after = f", next due {_when(duty, due)}" if due is not None else ""
    return f"{duty.schedule} ({duty.timezone}){state}{after}"


@responsibilities.command("list")
@click.option("--agent", help="Only this agent's responsibilities.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_responsibilities(agent: str | None, as_json: bool) -> None:
    """List responsibilities with their schedules and next due times."""
    from protege.models import Agent, Responsibility

    open_database()
    query = Responsibility.select(Responsibility, Agent).join(Agent)
    if agent:
        query = query.where(Responsibility.agent == Agent.named(agent))
    rows = [_summary(duty) for duty in query.order_by(Agent.name, Responsibility.name)]
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("No responsibilities yet: `protege responsibilities add AGENT NAME ...`.")
    else:
        echo_table(
            ["AGENT", "NAME", "SCHEDULE", "TIMEZONE", "ENABLED", "NEXT DUE"],
            [
                (
                    r["agent"],
                    r["name"],
                    r["schedule"] or "-",
                    r["timezone"],
                    "yes" if r["enabled"] else "no",
                    r["next_due"] or "-",
                )
                for r in rows
            ],
        )


def _summary(duty) -> dict[str, Any]:
    due = _next_due(duty)
    return {
        "agent": duty.agent.name,
        "name": duty.name,
        "schedule": duty.schedule,
        "timezone": duty.timezone,
        "enabled": duty.enabled,
        "next_due": _when(duty, due) if due is not None else None,
    }


@responsibilities.command("show")
@click.argument("name")
@_agent_option
@click.option("--count", default=UPCOMING, show_default=True, help="How many due times.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(name: str, agent: str | None, count: int, as_json: bool) -> None:
    """Show a responsibility: its instructions, its next due times and its recent runs."""
    from protege.models import Run

    open_database()
    duty = _find(name, agent)
    cron = duty.cron
    upcoming = cron.upcoming(_now(), max(0, min(count, 100))) if cron and duty.enabled else []
    recent = list(Run.select().where(Run.responsibility == duty).order_by(Run.id.desc()).limit(5))
    data = {
        **_summary(duty),
        "instructions": duty.prompt,
        "due": [_when(duty, instant) for instant in upcoming],
        "runs": [
            {
                "id": run.id,
                "status": run.status,
                "due_at": _when(duty, run.due_at) if run.due_at else None,
                "error": run.error,
            }
            for run in recent
        ],
    }
    if as_json:
        echo_json(data)
        return
    click.echo(f"{duty.agent.name}: {duty.name}")
    click.echo(f"schedule: {_timing(duty)}")
    click.echo("instructions:")
    for line in duty.prompt.splitlines():
        click.echo(f"  {line}")
    if data["due"]:
        click.echo("next due:")
        for when in data["due"]:
            click.echo(f"  {when}")
    click.echo("recent runs:" if recent else "recent runs: none")
    for run in data["runs"]:
        due = f", due {run['due_at']}" if run["due_at"] else ", asked for"
        error = f": {run['error']}" if run["error"] else ""
        click.echo(f"  run {run['id']} {run['status']}{due}{error}")


@responsibilities.command("edit")
@click.argument("name")
@_agent_option
@click.option("--name", "new_name", help="A new name.")
@click.option("--schedule", help="A new five-field cron schedule.")
@click.option("--timezone", help="A new IANA time zone.")
@click.option("--instructions", help="New instructions.")
@click.option("--instructions-file", type=click.Path(dir_okay=False), help="Read them from F.")
def edit(
    name: str,
    agent: str | None,
    new_name: str | None,
    schedule: str | None,
    timezone: str | None,
    instructions: str | None,
    instructions_file: str | None,
) -> None:
    """Change a responsibility; a new schedule counts due times from now."""
    prompt = read_instructions(instructions, instructions_file, required=False)
    open_database()
    duty = _find(name, agent)
    changes = {
        "name": new_name,
        "schedule": schedule,
        "timezone": timezone,
        "prompt": prompt,
    }
    changes = {field: value for field, value in changes.items() if value is not None}
    if not changes:
        raise ProtegeError("nothing to change: give --name, --schedule, --timezone or instructions")
    with audited("responsibility edited", duty):
        for field, value in changes.items():
            setattr(duty, field, value)
        duty.save()
    click.echo(f"changed {duty.agent.name}'s responsibility {duty.name!r}: {_timing(duty)}")


@responsibilities.command("enable")
@click.argument("name")
@_agent_option
def enable(name: str, agent: str | None) -> None:
    """Switch a responsibility on; due times count from now (missed ones are not made up)."""
    _switch(name, agent, True)


@responsibilities.command("disable")
@click.argument("name")
@_agent_option
def disable(name: str, agent: str | None) -> None:
    """Switch a responsibility off: the scheduler queues no run for it."""
    _switch(name, agent, False)


def _switch(name: str, agent: str | None, on: bool) -> None:
    open_database()
    duty = _find(name, agent)
    with audited("enabled" if on else "disabled", duty):
        duty.enabled = on
        duty.save()
    click.echo(f"{'enabled' if on else 'disabled'} {duty.agent.name}'s {duty.name!r}")


@responsibilities.command("delete")
@click.argument("name")
@_agent_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, agent: str | None, yes: bool) -> None:
    """Delete a responsibility with its runs and their trails."""
    open_database()
    duty = _find(name, agent)
    if not yes:
        click.confirm(f"Delete {duty.agent.name}'s responsibility {duty.name!r}?", abort=True)
    with audited("responsibility deleted", duty):
        duty.delete_instance(recursive=True)
    click.echo(f"deleted {duty.agent.name}'s responsibility {duty.name!r}")


@responsibilities.command("run")
@click.argument("name")
@_agent_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def run_now(name: str, agent: str | None, as_json: bool) -> None:
    """Carry out a responsibility now, once, in this process, and show the run."""
    from protege.cli.runs import carried_out, show_outcome
    from protege.operations import queue_responsibility

    installation = open_installation()
    queued = queue_responsibility(_find(name, agent))
    show_outcome(carried_out(queued, installation), as_json)


@click.command()
@click.option("--once", is_flag=True, help="Make one pass and exit.")
def scheduler(once: bool) -> None:
    """Queue the runs of due responsibilities, until interrupted (workers run them)."""
    from protege.scheduler import Scheduler

    installation = open_installation()
    running = Scheduler(installation, on_line=_say)
    if once:
        running.tick()
        return
    stopper = Stopper().install()
    every = installation.config.responsibilities.poll_seconds
    _say(f"protege: scheduler looking for due responsibilities every {every:g}s; Ctrl-C stops")
    running.start()  # after the announcement, so that it comes first
    stopper.wait()
    running.stop()


def _say(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()
