"""The object every tool call in a run receives: the run's context, naming the call."""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from protege.addresses import routing_key
from protege.errors import ProtegeError

if TYPE_CHECKING:
    from protege.config import Config
    from protege.models import Agent, Message, Responsibility

# The rule a tool's mail is held to, in the words its refusal uses.
QUEUED_WHILE_RUNNING = "mail can be queued only while the tool call that queues it is running"


class CallOver(ProtegeError):
    """Mail was queued through a context whose tool call is not running: the call returned
    or timed out, or the context was never handed to a tool call (a prompt section's)."""


@attrs.frozen(eq=False)
class Call:
    """One tool call, as the tool running it sees it (``context.call``): the model's ``id``
    for the call and the ``tool`` it calls, and whether it is still ``running``.

    The harness issues one for each call it runs (``CallBook.issue``), even when a model
    uses one id twice, and ends it when the call returns or times out. Mail queued through
    the context is tied to its call (a run retried after a crash queues that call's mail
    once), and refused once the call has ended, from whichever thread or task of the tool
    it comes. A ``Call`` a tool makes itself was issued by nobody, and queues nothing.
    """

    id: str
    tool: str
    # Held by a queue from its last look at ``running`` until its mail is written, and by
    # ``end``: a call ends before a queue looks, or after the queue's mail is written.
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)
    _over: threading.Event = attrs.field(factory=threading.Event, init=False, repr=False)
    _book: CallBook | None = attrs.field(default=None, init=False, repr=False)

    @property
    def running(self) -> bool:
        """Whether the call is still running: it has neither returned nor timed out."""
        return not self._over.is_set()

    def end(self) -> None:
        """Mark the call over (the harness does, when it returns or times out); waits for
        mail being written for it."""
        with self._lock:
            self._over.set()


class CallBook:
    """The tool calls the harness issued in one attempt at a run, and the only ones whose
    mail that attempt's queue takes: a ``Call`` made any other way (by a tool, or in
    another attempt) is refused, so mail is always tied to the call the harness ran."""

    def issue(self, id: str, tool: str) -> Call:
        """A running call of this book, the model's ``id`` for it to ``tool``."""
        call = Call(id=id, tool=tool)
        object.__setattr__(call, "_book", self)
        return call

    def running(self, call: Call | None) -> Call:
        """``call`` if this book issued it and it is running; otherwise ``CallOver``."""
        return _running(call, self)

    def queueing(self, call: Call | None) -> contextlib.AbstractContextManager[Call]:
        """``call``, checked as ``running`` does, kept from ending within the block (where
        its mail is written): ``end`` waits for the block."""
        return _queueing(call, self)


def running(call: Call | None) -> Call:
    """``call`` if the harness issued it and it is running; otherwise ``CallOver``, naming
    the rule."""
    return _running(call, None)


def queueing(call: Call | None) -> contextlib.AbstractContextManager[Call]:
    """``call``, checked as ``running`` does, kept from ending within the block."""
    return _queueing(call, None)


@contextlib.contextmanager
def _queueing(call: Call | None, book: CallBook | None) -> Iterator[Call]:
    issued = _running(call, book)
    with issued._lock:
        yield _running(issued, book)


def _running(call: Call | None, book: CallBook | None) -> Call:
    if call is None:
        raise CallOver(
            f"{QUEUED_WHILE_RUNNING}; this context belongs to no tool call "
            "(only the one handed to a tool's use() does)"
        )
    if call._book is None or (book is not None and call._book is not book):
        raise CallOver(
            f"{QUEUED_WHILE_RUNNING}; call {call.id} to {call.tool} is not one protege "
            "issued in this run (a Call made by a tool, or kept from another attempt, "
            "queues nothing)"
        )
    if not call.running:
        raise CallOver(
            f"{QUEUED_WHILE_RUNNING}; call {call.id} to {call.tool} has ended "
            "(it returned, or timed out)"
        )
    return call


class RunMailQueue(Protocol):
    """What a run's context queues mail with (the harness makes it for each run):
    ``queue(mail, attachments, call=...)`` stores the mail as the run's agent, pending for
    the delivery loop to send, tied to the tool ``call`` that queued it, and returns what
    became of it (``status``, ``message_id``, recipients, refusals)."""

    def __call__(
        self, mail: Mapping[str, Any], attachments: Sequence[Any] = (), *, call: Call | None
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
    ``queue_mail(mail, attachments=())`` queues mail as the run's agent, for the delivery
    loop to send; ``call`` is the tool call the context was handed to; ``cancelled`` tells
    whether an operator cancelled the run; ``mail_scope(tool_id)`` says which of the
    agent's mail a tool may show. Being frozen, the context cannot carry state from one
    tool call to the next: each call is handed a context of its own, the run's with its
    ``call``.
    """

    agent: Agent
    message: Message | None = None
    responsibility: Responsibility | None = attrs.field(
        default=None, validator=_exactly_one_subject
    )
    # How ``queue_mail`` queues: given as ``mail_queue=`` (the harness's, or a test's).
    _mail_queue: RunMailQueue = attrs.field(repr=False)
    config: Config
    logger: logging.Logger | logging.LoggerAdapter
    correlation_id: str | None = None
    # Set when an operator cancels the run (``protege runs cancel``); read ``cancelled``.
    cancellation: threading.Event = attrs.field(factory=threading.Event, repr=False)
    # The tools a grant that admitted this run gives with the whole mail archive open.
    whole_archive: frozenset[str] = frozenset()
    # The tool call this context was handed to; None in the run's own (prompt sections').
    call: Call | None = None

    def queue_mail(
        self, mail: Mapping[str, Any], attachments: Sequence[Any] = ()
    ) -> dict[str, Any]:
        """Queue ``mail`` to be sent as the run's agent, and return what became of it: its
        ``status`` (``queued``: stored, the delivery loop sends it after the call), its
        ``message_id`` and recipients, and any refusals.

        ``mail`` holds ``to``, ``cc``, ``bcc`` (lists of addresses), ``subject``, ``body``
        and, for replies, ``in_reply_to`` and ``references``; From is always the agent.
        ``attachments`` are stored files (``Blob`` or its id). Mail can be queued only
        while the tool call that queues it is running: from the tool itself, or from any
        thread or task it starts (waiting for them before it returns); once the call has
        returned or timed out, it is refused with ``CallOver`` and nothing is stored. A
        call queues at most one mail: asked again in that call, or when a run resumed
        after a crash runs the call again, it queues nothing and returns the first outcome
        (marked ``repeated``). Mail the gateway refuses (no recipient, too many, a bad
        address, attachments over the limits) raises, and nothing is stored.
        """
        return self._mail_queue(mail, attachments, call=self.call)

    def deliver(self, mail: Mapping[str, Any], attachments: Sequence[Any] = ()) -> dict[str, Any]:
        """Deprecated: call ``queue_mail`` (which this calls), the same thing by its true
        name: the mail is queued here, and sent by the delivery loop."""
        warnings.warn(
            "RunContext.deliver is deprecated: call context.queue_mail(mail, attachments), "
            "which queues the mail for the delivery loop to send",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.queue_mail(mail, attachments)

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
