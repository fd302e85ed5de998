"""A mail claimed by a delivery loop that died is taken over once its claim runs out."""

import datetime

import attrs
import pytest

from protege.delivery import claim_due
from protege.gateway.outbound import queue_mail
from protege.models.base import utcnow


def _with(config, **changes):
    return attrs.evolve(config, runs=attrs.evolve(config.runs, **changes))


@pytest.mark.parametrize("transport", ["outbox", "smtp"])
def test_a_mail_whose_loop_died_is_taken_over_after_the_runs_lease(sundae, config, transport):
    # A loop that lives renews its claim while the transport takes its time (see
    # tests/test_delivery.py), so the claim itself need only outlast a pause between two
    # renewals, whatever the transport.
    config = _with(config, lease_seconds=2)
    config = attrs.evolve(config, mail=attrs.evolve(config.mail, transport=transport))
    queue_mail(agent=sundae, run=None, config=config, mail={"to": ["a@b.example"], "body": "Hi"})
    now = utcnow()
    taken = claim_due(config, now, 10)  # by a loop that dies before handing it over
    assert len(taken) == 1
    assert claim_due(config, now + datetime.timedelta(seconds=1), 10) == []
    assert claim_due(config, now + datetime.timedelta(seconds=3), 10) == taken
