"""``protege demo``: The Scoop's email thread, end to end, added to protege's command line."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to keep the demo's database and files (default: a new temporary folder).",
)
def demo(folder: Path | None) -> None:
    """Send The Scoop's three emails through protege and print the transcript.

    Uses the configured model ([model] in protege.toml, or OPENAI_API_KEY); without one,
    a scripted model, and says so.
    """
    # The demo brings the gateway, the workers and the scripted model: loaded only to run it.
    from the_scoop.demo import run_demo

    run_demo(folder)
