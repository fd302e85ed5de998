"""Printing for the command line: aligned tables and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    import json  # only the commands asked for JSON need it

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows under headers, each column as wide as its widest cell. Cells come from
    mail and models too: control characters, line breaks and bidirectional overrides are
    shown escaped, so that no cell can break its row or reorder what a terminal shows."""
    from protege.harness.events import printable

    cells = [
        [str(h) for h in headers],
        *[["" if c is None else printable(str(c)) for c in r] for r in rows],
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    # One write for the whole table: click.echo flushes each time it is called.
    click.echo(
        "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in cells
        )
    )


def warn_missing_host_tools(manifest: Any) -> None:
    """Warn on standard error, one line each, about host tool modules that failed to import;
    their tools are not offered until they are fixed."""
    for error in manifest.host_import_errors:
        click.echo(f"warning: {error}; its tools are not offered", err=True)
