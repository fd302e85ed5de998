"""``protege migrate`` and ``protege sync``: bring the database in line with the code."""

from __future__ import annotations

import click

from protege.cli.output import echo_json


@click.command()
def migrate() -> None:
    """Apply pending database schema migrations."""
    from protege import db

    db.connect()
    applied = db.migrate()
    for name in applied:
        click.echo(f"applied {name}")
    if not applied:
        click.echo("The database schema is up to date.")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print what changed as JSON.")
def sync(as_json: bool) -> None:
    """Migrate, then rebuild the system toolkits from the live manifest (run on each deploy)."""
    from protege import db
    from protege.cli.doctor import NO_REPLY
    from protege.cli.state import manifest, plugins
    from protege.config import load_config
    from protege.installation import open_installation
    from protege.toolkits import describe_stale

    db.connect()
    with open_installation(
        load_config(), manifest=manifest(), plugins=plugins(), connect=False
    ) as app:
        report = app.sync()
    found = report.manifest or app.manifest
    warnings = [] if found.can_reply else [NO_REPLY]
    warnings += report.listing_problems
    # What the manifest could not offer: the operator deploying should hear it here, not
    # only from `protege doctor`.
    warnings += [
        f"tool {w.tool_id} from {w.source} is withheld: {w.reason}" for w in found.withheld
    ]
    warnings += [
        f"rejected ({r.origin} {r.source}): {r.reason}"
        for r in found.rejected
        if r.origin != "host"  # a host module's own errors stop sync before this
    ]
    warnings += [describe_stale(name, ids, found) for name, ids in report.stale.items()]
    if as_json:
        echo_json(
            {
                **report.as_dict(),
                "withheld": [w.as_dict() for w in found.withheld],
                "warnings": warnings,
            }
        )
        return
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    for name in report.migrations:
        click.echo(f"applied migration {name}")
    for name in report.created:
        click.echo(f"created toolkit {name}")
    if report.added:
        click.echo(f"All Tools: added {', '.join(report.added)}")
    if report.removed:
        click.echo(f"All Tools: removed {', '.join(report.removed)}")
    if not report.changed:
        click.echo("Nothing to change: the system toolkits match the manifest.")
    if report.default_tools_lacks:
        lacks = report.default_tools_lacks
        click.echo(
            f"Default Tools lacks the built-in tools {', '.join(lacks)} (not added: its "
            "members are yours; add them with `protege toolkits add-tools "
            f'"Default Tools" {" ".join(lacks)}`)'
        )
