"""The harness: one agent run, from the inbound message (or duty) to the last tool call."""

from protege.harness.runner import abandon, execute
from protege.queue import claim_next, queue_reply, queue_scheduled, requeue

__all__ = ["abandon", "claim_next", "execute", "queue_reply", "queue_scheduled", "requeue"]
