"""The ``smtp`` transport: each mail handed to the relay ``[mail]`` names (see
``protege.gateway.relay``), with the relay's answer for each recipient."""

from __future__ import annotations

from collections.abc import Iterable

from protege.config import Config
from protege.delivery.transports import Envelope, MailRefused, Outcome, Transport, outcomes_of
from protege.gateway import relay


class SmtpTransport(Transport):
    """Sends through ``[mail] smtp_host``: accepted recipients are delivered, 5xx answers
    refused, 4xx answers and lost connections deferred; a failure of the whole mail (login,
    certificate, DATA refused for good) is ``MailRefused``."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.settings = config.mail
        self.root = config.root

    def send(self, message: bytes, envelope: Envelope) -> Iterable[Outcome]:
        """One attempt at the relay."""
        answer = relay.send(
            message,
            envelope.sender,
            list(envelope.recipients),
            self.settings,
            root=self.root,
            international=envelope.smtputf8,
        )
        if answer.error is not None:
            raise MailRefused(answer.error)
        return outcomes_of(answer)
