"""``protege plugins``: the installed plugins and what became of each."""

from __future__ import annotations

from typing import Any

import click

from protege.cli.output import echo_json, echo_table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the plugins as JSON.")
def plugins(as_json: bool) -> None:
    """List installed plugins: version, entry point, hooks, tools, and status."""
    import os

    from protege.cli.doctor import print_tracebacks
    from protege.cli.state import manifest

    found = manifest()
    reports = found.plugins
    if os.environ.get("PROTEGE_DEBUG"):
        print_tracebacks(found)
    if as_json:
        echo_json([report.as_dict() for report in reports])
        return
    if not reports:
        click.echo("No plugins installed.")
        return
    echo_table(
        ["DISTRIBUTION", "VERSION", "ENTRY POINT", "HOOKS", "TOOLS", "REJECTED", "STATUS"],
        [
            (
                r.plugin.source.distribution,
                r.plugin.source.version,
                r.plugin.source.entry_point,
                ", ".join(r.plugin.hooks) or "-",
                ", ".join(r.tool_ids) or "-",
                "; ".join(r.rejected) or "-",
                _status(r),
            )
            for r in reports
        ],
    )


def _status(report: Any) -> str:
    if report.error is not None:
        return f"{report.status}: {report.error}"
    failed = [f"{f.hook} failed {f.count}x ({f.error})" for f in report.plugin.failures.values()]
    withheld = [f"withholds {w.tool_id}: {w.reason}" for w in report.withheld]
    return "; ".join([str(report.status), *failed, *withheld])
