"""``protege audit``: the log of changes to who may use what."""

from __future__ import annotations

import json

import click

from protege.cli.database import open_database
from protege.cli.output import echo_json


@click.command()
@click.option("--limit", default=50, show_default=True, help="How many entries, newest first.")
@click.option(
    "--kind",
    type=click.Choice(["toolkit", "agent", "grant", "responsibility", "run", "message"]),
    help="Only changes to this kind of subject.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def audit(limit: int, kind: str | None, as_json: bool) -> None:
    """Every change operators and the command line made to access, and every inbound
    inspector's flag or hold on a mail: who, when, before, after."""
    from protege.audit import entries
    from protege.harness.events import printable

    open_database()
    found = entries(limit, subject_kind=kind)
    if as_json:
        echo_json(
            [
                {
                    "at": e.at.isoformat(timespec="seconds"),
                    "actor": e.actor,
                    "action": e.action,
                    "subject_kind": e.subject_kind,
                    "subject": e.subject,
                    "before": e.before,
                    "after": e.after,
                }
                for e in found
            ]
        )
        return
    if not found:
        click.echo("No changes recorded yet.")
    for entry in found:
        click.echo(
            printable(
                f"{entry.at:%Y-%m-%d %H:%M:%S} {entry.actor}: {entry.action}, "
                f"{entry.subject_kind} {entry.subject}"
            )
        )
        for label, state in (("before", entry.before), ("after", entry.after)):
            shown = "-" if state is None else json.dumps(state, ensure_ascii=False)
            click.echo(printable(f"    {label}: {shown}"))
