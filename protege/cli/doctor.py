"""``protege doctor``: every problem with the configuration, blob store, plugins and tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from protege.config import Config


@click.command()
def doctor() -> None:
    """Report an unreachable blob store, broken plugins, rejected tool classes and shadowed
    tools; exit 1 if any."""
    from protege.config import load_config
    from protege.registry import manifest

    config = load_config()
    click.echo(f"config: {config.path or 'none found (embedded defaults)'}")
    blob_problem = _blob_store_problem(config)
    found = manifest()
    click.echo(f"tools: {len(found)} offered, from {len(found.plugins)} plugin(s)")
    problems = [*([blob_problem] if blob_problem else []), *found.problems()]
    if not problems:
        click.echo("No problems found.")
        return
    for problem in problems:
        click.echo(f"problem: {problem}")
    raise click.exceptions.Exit(1)


def _blob_store_problem(config: Config) -> str | None:
    """Says where files are kept; for S3, asks the service whether the bucket can be used."""
    from protege.blobs import blob_store_for
    from protege.config import S3
    from protege.errors import ProtegeError

    settings = config.blobs
    if settings.store != S3:
        click.echo(f"blobs: local, in {config.data_dir / 'blobs'}")
        return None
    where = f"s3://{settings.bucket}/{settings.prefix}"
    if settings.endpoint_url:
        where += f" at {settings.endpoint_url}"
    try:
        blob_store_for(config).check()
    except ProtegeError as error:
        click.echo(f"blobs: {where}, not reachable")
        return f"blob store: {error}"
    click.echo(f"blobs: {where}, reachable")
    return None
