"""Opening the configured installation or database for a command, and finding records.

Commands import what they use when they run (here and in every command module), so that
``protege --help`` loads no database driver, model client or plugin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from protege import db
from protege.cli.output import warn_missing_host_tools

if TYPE_CHECKING:
    from protege.audit import Change
    from protege.installation import Installation


def open_database(*, migrated: bool = True) -> None:
    """Connect to the configured database; unless told otherwise, insist it is migrated."""
    if migrated:
        db.connect_existing()
        db.require_current()
    else:
        db.connect()


def open_installation(*, mail_transport: str | None = None) -> Installation:
    """The installation of this folder's ``protege.toml``: its database connected and
    checked current, its manifest built once (with a warning per host module that failed
    to import). ``mail_transport``, when given, replaces ``[mail] transport``."""
    import attrs

    from protege.cli.state import plugins
    from protege.config import load_config
    from protege.installation import open_installation as build

    config = load_config()
    if mail_transport is not None:
        config = attrs.evolve(config, mail=attrs.evolve(config.mail, transport=mail_transport))
    db.connect_existing(config.database_url)
    db.require_current()
    installation = build(config, connect=False, plugins=plugins())
    warn_missing_host_tools(installation.manifest)
    others = len(installation.manifest.problems()) - len(installation.manifest.host_import_errors)
    if others > 0:
        click.echo(
            f"warning: {others} problem(s) with plugins or tools: run `protege doctor`", err=True
        )
    return installation


def agent_and_toolkit(agent_name: str, toolkit_name: str):
    """The agent and toolkit the command names, and the grant attaching one to the other."""
    from protege.models import Agent, Toolkit

    agent = Agent.named(agent_name)
    toolkit = Toolkit.named(toolkit_name)
    return agent, toolkit, agent.grant_of(toolkit)


@contextlib.contextmanager
def audited(action: str, subject: Any = None) -> Iterator[Change]:
    """Make a change to access and record it in the audit log, as the system user."""
    from protege.audit import change, command_line_actor

    with change(command_line_actor(), action, subject) as made:
        yield made
