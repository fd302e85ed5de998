"""``protege tools``: the manifest of this folder's installation and the installed plugins."""

from __future__ import annotations

import click

from protege.cli.output import echo_json, echo_table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def tools(as_json: bool) -> None:
    """List every tool on offer, where it comes from, and the tools it shadows."""
    from protege.cli.state import manifest

    found = manifest()
    if as_json:
        # One row per tool class, as every listing command prints: those on offer, then
        # those shadowed (each naming its winner).
        echo_json(
            [{**entry.as_dict(), "status": "offered"} for entry in found.tools]
            + [
                {
                    **loser.as_dict(),
                    "status": "overridden" if found.acknowledged(loser) else "shadowed",
                }
                for loser in found.shadowed
            ]
            + [{**w.as_dict(), "status": "withheld"} for w in found.withheld]
        )
        return
    if not found.tools:
        click.echo("No tools registered.")
    else:
        echo_table(
            ["ID", "NAME", "ORIGIN", "FROM", "HINTS", "SUMMARY"],
            [
                (
                    e.id,
                    e.display_name,
                    e.origin,
                    _source(e.source, e.version) + (f" (server {e.server})" if e.server else ""),
                    _hints(e.annotations),
                    e.summary,
                )
                for e in found.tools
            ],
        )
    if found.shadowed:
        click.echo("\nShadowed (never offered):")
        echo_table(
            ["ID", "ORIGIN", "FROM", "SHADOWED BY"],
            [
                (
                    s.entry.id,
                    s.entry.origin,
                    _source(s.entry.source, s.entry.version),
                    s.winner.describe_source()
                    + (" (on purpose: overrides)" if found.acknowledged(s) else ""),
                )
                for s in found.shadowed
            ],
        )
    if found.withheld:
        click.echo("\nWithheld (known, not offered until a sync can list them):")
        echo_table(
            ["ID", "FROM", "WHY"],
            [(w.tool_id, w.source, w.reason) for w in found.withheld],
        )
    problems = found.problems()
    if problems:
        click.echo(f"\n{len(problems)} problem(s) found: run `protege doctor`.", err=True)


def _source(source: str, version: str | None) -> str:
    return f"{source} {version}" if version else source


# How each annotation reads in the HINTS column, when it is True and when False.
_HINT_WORDS = {
    "read_only": ("read-only", "writes"),
    "destructive": ("destructive", "not destructive"),
    "idempotent": ("idempotent", None),
    "open_world": ("open world", "closed world"),
}


def _hints(annotations: dict[str, bool]) -> str:
    words = []
    for key, (if_true, if_false) in _HINT_WORDS.items():
        if key in annotations:
            word = if_true if annotations[key] else if_false
            if word:
                words.append(word)
    return ", ".join(words) or "-"
