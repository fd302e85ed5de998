"""The one object every tool call in a run receives."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from protege.addresses import routing_key

if TYPE_CHECKING:
    from protege.config import Config
    from protege.models import Agent, Message, Responsibility

# The tool call being run, for what must happen at most once per call (sending mail). Set
# by the harness around each call; read by delivery.
current_tool_call: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "protege_tool_call", default=None
)


class Deliver(Protocol):
    """Sends mail as the run's agent: ``deliver(mail, attachments=())`` returns what became
    of it (``status``, ``message_id``, recipients, refusals)."""

    def __call__(
        self, mail: Mapping[str, Any], attachments: Sequence[Any] = ()
    ) -> dict[str, Any]: ...


@attrs.frozen
class MailScope:
    """Which of an agent's mail a tool may show in one run, and the files that came with it.

    With ``whole_archive`` any of it. Otherwise only mail that ``participant`` (the routing
    key of the run's proven sender) was from, to or copied to; with no participant (the
    sender is not proven) only the run's own message, ``message_id``.
    """

    whole_archive: bool = False
    participant: str | None = None
    message_id: int | None = None


WHOLE_ARCHIVE = MailScope(whole_archive=True)


def _exactly_one_subject(instance: RunContext, attribute: attrs.Attribute, value: Any) -> None:
    if (instance.message is None) == (instance.responsibility is None):
        raise ValueError(
            "a RunContext has exactly one of message (reply runs) "
            "or responsibility (scheduled runs)"
        )


@attrs.frozen(kw_only=True)
class RunContext:
    """Everything a tool may know about the run it is part of, frozen for the run's lifetime.

    A reply run has ``message`` set; a scheduled run has ``responsibility`` set; never both.
    ``deliver(mail, attachments=())`` queues mail as the run's agent; ``cancelled`` tells
    whether an operator cancelled the run; ``mail_scope(tool_id)`` says which of the
    agent's mail a tool may show. Being frozen, the context cannot carry state from one
    tool call to the next.
    """

    agent: Agent
    message: Message | None = None
    responsibility: Responsibility | None = attrs.field(
        default=None, validator=_exactly_one_subject
    )
    deliver: Deliver
    config: Config
    logger: logging.Logger | logging.LoggerAdapter
    correlation_id: str | None = None
    # Set when an operator cancels the run (``protege runs cancel``); read ``cancelled``.
    cancellation: threading.Event = attrs.field(factory=threading.Event, repr=False)
    # The tools a grant that admitted this run gives with the whole mail archive open.
    whole_archive: frozenset[str] = frozenset()

    def mail_scope(self, tool_id: str) -> MailScope:
        """Which of the agent's mail the tool ``tool_id`` may show in this run: on a
        scheduled run, or through a grant that opens the whole archive, all of it; else
        the mail the run's sender took part in, when the sender is proven, and otherwise
        the run's own message alone."""
        if self.message is None or tool_id in self.whole_archive:
            return WHOLE_ARCHIVE
        proven = self.message.proves_sender(self.config.mail.authentication)
        participant = routing_key(self.message.sender) if proven else None
        return MailScope(participant=participant, message_id=self.message.id)

    @property
    def cancelled(self) -> bool:
        """Whether the run was cancelled: a long tool may stop early; the run itself stops
        at its next step whatever the tool does."""
        return self.cancellation.is_set()
