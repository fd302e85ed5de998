"""Opening the configured database for a command, and finding records by name."""

from __future__ import annotations

from protege import db


def open_database(*, migrated: bool = True) -> None:
    """Connect to the configured database; unless told otherwise, insist it is migrated."""
    db.connect()
    if migrated:
        db.require_current()


def agent_and_toolkit(agent_name: str, toolkit_name: str):
    """The agent and toolkit the command names, and the grant attaching one to the other."""
    from protege.models import Agent, Toolkit

    agent = Agent.named(agent_name)
    toolkit = Toolkit.named(toolkit_name)
    return agent, toolkit, agent.grant_of(toolkit)
