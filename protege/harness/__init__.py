"""The harness: one agent run, from the inbound message (or duty) to the last tool call."""

from protege.harness.runner import abandon, carry_out, execute

__all__ = ["abandon", "carry_out", "execute"]
