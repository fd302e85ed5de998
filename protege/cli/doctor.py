"""``protege doctor``: every problem with the configuration, plugins and tools."""

from __future__ import annotations

import click


@click.command()
def doctor() -> None:
    """Report broken plugins, rejected tool classes and shadowed tools; exit 1 if any."""
    from protege.config import load_config
    from protege.registry import manifest

    config = load_config()
    click.echo(f"config: {config.path or 'none found (embedded defaults)'}")
    found = manifest()
    click.echo(f"tools: {len(found)} offered, from {len(found.plugins)} plugin(s)")
    problems = found.problems()
    if not problems:
        click.echo("No problems found.")
        return
    for problem in problems:
        click.echo(f"problem: {problem}")
    raise click.exceptions.Exit(1)
