"""``protege access explain``: why a run would get the tools it gets."""

from __future__ import annotations

import click

from protege.cli.database import open_database
from protege.cli.output import echo_json


@click.group()
def access() -> None:
    """Inspect tool access decisions."""


@access.command("explain")
@click.argument("agent")
@click.option("--sender", help="The address the inbound mail would come from.")
@click.option("--scheduled", is_flag=True, help="Explain a scheduled run instead.")
@click.option(
    "--unauthenticated",
    is_flag=True,
    help="As mail that does not prove its sender (a forger's): allow rules do not match.",
)
@click.option(
    "--message",
    "message_id",
    type=int,
    help="Explain a stored inbound message: its sender, as its sender verdict proved it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def explain(
    agent: str,
    sender: str | None,
    scheduled: bool,
    unauthenticated: bool,
    message_id: int | None,
    as_json: bool,
) -> None:
    """For each toolkit of AGENT: admitted or not, and which rule decided; then the tools.

    Allow rules (gates, access rules, approvers) match only a sender whose mail proves its
    domain; --sender explains such mail unless --unauthenticated is given.
    """
    from protege.admin import explain as explanation_of
    from protege.cli.state import manifest
    from protege.config import load_config
    from protege.errors import ProtegeError
    from protege.models import Agent, Message

    if sum((sender is not None, scheduled, message_id is not None)) != 1:
        raise click.UsageError("give exactly one of --sender ADDRESS, --message ID or --scheduled")
    open_database()
    found_agent = Agent.named(agent)
    verdict = None
    authenticated = not unauthenticated
    if message_id is not None:
        message = Message.get_or_none(
            (Message.id == message_id) & (Message.agent == found_agent.id)
        )
        if message is None or not message.inbound:
            raise ProtegeError(f"{found_agent.name} has no inbound message {message_id}")
        sender, verdict = message.sender, message.verdict
        authenticated = message.proves_sender(load_config().mail.authentication)
    found = explanation_of(
        found_agent,
        manifest(),
        sender=sender,
        scheduled=scheduled,
        authenticated=authenticated,
        verdict=verdict,
    )
    if as_json:
        echo_json(found.as_json())
        return
    for line in found.lines():
        click.echo(line)
