"""Who a run counts against, for limits and fair turns.

A sender is who the mail proves to be, not who it claims: mail that did not prove its
sender counts under ``unproven:`` and the address, so a forger using someone's address
uses up only the unproven count of it, never what that address really sends (and the
agent-wide limits bound a forger who changes address at every mail).
"""

from __future__ import annotations

from protege.addresses import routing_key
from protege.config import AuthenticationSettings
from protege.models import Message

UNPROVEN = "unproven:"
MAX_KEY = 320


def sender_key(
    message: Message, authentication: AuthenticationSettings | None = None
) -> str | None:
    """The key a reply run to ``message`` counts under: its sender's routing key (the bare
    address, tag dropped, lowercased; else the From text as it came, lowercased),
    prefixed ``unproven:`` unless the mail proves its sender under ``authentication``
    (without it, unless it was authenticated); None with no sender at all."""
    key = routing_key(message.sender)
    if key is None:
        key = " ".join((message.sender or "").split()).lower() or None
    if key is None:
        return None
    proven = (
        message.proves_sender(authentication)
        if authentication is not None
        else bool(message.sender_authenticated)
    )
    return (key if proven else UNPROVEN + key)[:MAX_KEY]


def lane_of(key: str | None, agent_id: int) -> str | None:
    """The lane a run of ``key`` takes turns in: its sender's own, or, for mail that did
    not prove its sender, one lane for all such mail of the agent. A claimed address buys
    no turns: mail from a thousand made-up addresses waits in one lane, and every proven
    sender's next mail waits for at most one run of it."""
    if key is None or not key.startswith(UNPROVEN):
        return key
    return f"{UNPROVEN}agent {agent_id}"


def is_unproven(key: str | None) -> bool:
    """Whether ``key`` counts mail that did not prove its sender."""
    return key is not None and key.startswith(UNPROVEN)


def shown(key: str) -> str:
    """A sender key as people read it: ``jane@acme.example (unproven)``."""
    if key.startswith(UNPROVEN):
        return f"{key[len(UNPROVEN) :]} (unproven)"
    return key


def keys_for(address: str) -> list[str]:
    """The keys the mail of ``address`` may count under (proven and unproven), as an
    operator names a sender."""
    key = routing_key(address) or address.strip().lower()
    return [key, UNPROVEN + key]


def address_of(key: str) -> tuple[str, bool]:
    """The sender's address a key stands for, and whether its mail proved it."""
    if key.startswith(UNPROVEN):
        return key[len(UNPROVEN) :], False
    return key, True
