"""How the delivery loop reads what a transport reported (the contract itself is
``protege.transports``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import attrs

from protege.gateway.relay import Handover, Refusal
from protege.transports import Envelope, MailRefused, Outcome, OutcomeStatus, Transport

__all__ = [
    "NO_OUTCOME",
    "Envelope",
    "MailRefused",
    "Outcome",
    "OutcomeStatus",
    "Transport",
    "handover_of",
    "outcomes_of",
]

logger = logging.getLogger(__name__)

NO_OUTCOME = "the transport reported nothing for this recipient"


def handover_of(
    outcomes: Iterable[Outcome], recipients: Sequence[str], transport: object
) -> Handover:
    """The outcomes a transport reported for ``recipients``, as the delivery loop records
    them: one per recipient (the first it reported), recipients it left out deferred, and
    addresses it was not asked about ignored."""
    found: dict[str, Outcome] = {}
    asked = {address.lower() for address in recipients}
    for outcome in outcomes:
        if not isinstance(outcome, Outcome):
            raise TypeError(f"{type(transport).__name__}.send returned {outcome!r}, not an Outcome")
        if outcome.address.lower() not in asked:
            logger.warning(
                "%s reported an outcome for %s, which it was not asked to send to",
                type(transport).__name__,
                outcome.address,
            )
            continue
        found.setdefault(outcome.address.lower(), outcome)
    # A transport may answer for an address in another case (a server's echo of it): the
    # recipient is the same, and must not be sent the mail again.
    chosen = [
        attrs.evolve(found[a.lower()], address=a)
        if a.lower() in found
        else Outcome.deferred(a, NO_OUTCOME)
        for a in recipients
    ]
    return Handover(
        delivered=tuple(o.address for o in chosen if o.status is OutcomeStatus.DELIVERED),
        refused=tuple(_refusal(o) for o in chosen if o.status is OutcomeStatus.REFUSED),
        deferred=tuple(_refusal(o) for o in chosen if o.status is OutcomeStatus.DEFERRED),
    )


def _refusal(outcome: Outcome) -> Refusal:
    return Refusal(outcome.address, outcome.code, outcome.reason)


def outcomes_of(handover: Handover) -> list[Outcome]:
    """What an SMTP hand-off did (``protege.gateway.relay``), as a transport reports it:
    delivered, refused for good (5xx) and deferred recipients, each with the server's
    answer."""
    return [
        *(Outcome.delivered(address) for address in handover.delivered),
        *(Outcome.refused(r.address, r.reason, code=r.code) for r in handover.refused),
        *(Outcome.deferred(r.address, r.reason, code=r.code) for r in handover.deferred),
    ]
