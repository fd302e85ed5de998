"""The harness: one agent run, from the inbound message (or duty) to the last tool call."""

from protege.harness.runner import carry_out, execute

__all__ = ["carry_out", "execute"]
