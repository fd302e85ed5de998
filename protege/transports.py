"""The mail transport contract (public API): how the delivery loop hands one mail to
whatever sends it, and what it expects back.

A transport is a class, registered by name through the ``register_transports`` hook and
chosen by ``[mail] transport``. The installation makes one when it opens, calling the class
with its ``Config``; the delivery loop then calls ``send`` once per attempt at a mail, from its
own threads (several at once), with the exact bytes to send and the envelope, and records the
``Outcome`` reported for each recipient. This module imports nothing heavy, so a plugin can
define a transport at import time and `protege tools` stays light.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from enum import StrEnum

import attrs

from protege.config import Config
from protege.errors import ProtegeError


@attrs.frozen
class Envelope:
    """Who one attempt at a mail is from and to, apart from its bytes.

    ``sender`` is the agent's bare address (SMTP's MAIL FROM); ``recipients`` are the
    addresses still waiting for this mail (RCPT TO), in order, each once. ``smtputf8`` is
    true when an address is not ASCII (the relay must offer SMTPUTF8). ``message_id`` and
    ``queued_at`` name the mail and never change between attempts; ``attempt`` counts from 1.
    """

    sender: str
    recipients: tuple[str, ...]
    smtputf8: bool
    message_id: str
    queued_at: datetime.datetime
    attempt: int = 1


class OutcomeStatus(StrEnum):
    """What became of one recipient in one attempt."""

    DELIVERED = "delivered"
    DEFERRED = "deferred"  # try this recipient again later
    REFUSED = "refused"  # for good: retrying cannot help


@attrs.frozen
class Outcome:
    """What one attempt did for one recipient; make one with ``Outcome.delivered``,
    ``Outcome.deferred`` or ``Outcome.refused``. ``code`` is the SMTP reply code, when the
    answer came from SMTP (0 otherwise); ``reason`` is shown to the operator and the model."""

    address: str
    status: OutcomeStatus = attrs.field(converter=OutcomeStatus)
    reason: str = ""
    code: int = 0

    @classmethod
    def delivered(cls, address: str) -> Outcome:
        """``address`` has the mail."""
        return cls(address, OutcomeStatus.DELIVERED)

    @classmethod
    def deferred(cls, address: str, reason: str, *, code: int = 0) -> Outcome:
        """``address`` should be tried again later (after the backoff), for ``reason``."""
        return cls(address, OutcomeStatus.DEFERRED, reason, code)

    @classmethod
    def refused(cls, address: str, reason: str, *, code: int = 0) -> Outcome:
        """``address`` will never get this mail, for ``reason``."""
        return cls(address, OutcomeStatus.REFUSED, reason, code)


class MailRefused(ProtegeError):
    """Raised by a transport when the whole mail failed and no retry can help (its login
    refused, a certificate that does not verify): everyone still waiting is refused, with
    this message as the reason. Any other exception fails only this attempt: it is counted,
    and the mail is tried again after the backoff."""


class Transport:
    """Base class of a mail transport, as httpx's ``BaseTransport`` is of its transports.

    Subclass it, implement ``send``, and register the class by name in
    ``register_transports``. It is made once per installation with the installation's
    ``Config`` (``self.config``): read your settings from
    ``config.plugin_settings("your-distribution")``. ``send`` is called from several delivery
    threads at once, so keep no per-mail state on the instance.
    """

    def __init__(self, config: Config) -> None:
        self.config = config

    def send(self, message: bytes, envelope: Envelope) -> Iterable[Outcome]:
        """Make one attempt at sending ``message`` (the exact bytes to send, headers and
        all) to ``envelope.recipients``; return an ``Outcome`` for each of them.

        A recipient left without an outcome is deferred. Raise ``MailRefused`` when the whole
        mail failed for good; any other exception counts as a failed attempt, retried later.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement send()")
