"""Who a run counts against, for limits and fair turns.

A sender is who the mail proves to be, not who it claims: mail that did not prove its
sender counts under ``unproven:`` and the address, so a forger using someone's address
uses up only the unproven count of it, never what that address really sends (and the
agent-wide limits bound a forger who changes address at every mail).
"""

from __future__ import annotations

from protege.addresses import routing_key
from protege.models import Message

UNPROVEN = "unproven:"
MAX_KEY = 320


def sender_key(message: Message) -> str | None:
    """The key a reply run to ``message`` counts under: its sender's routing key (the bare
    address, tag dropped, lowercased; else the From text as it came, lowercased),
    prefixed ``unproven:`` unless the mail proved its sender; None with no sender at all."""
    key = routing_key(message.sender)
    if key is None:
        key = " ".join((message.sender or "").split()).lower() or None
    if key is None:
        return None
    return (key if message.sender_authenticated else UNPROVEN + key)[:MAX_KEY]


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
