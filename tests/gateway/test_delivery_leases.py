"""A mail claimed by a delivery loop that died is taken over once its lease runs out."""

import datetime

import attrs

from protege.delivery import claim_due
from protege.gateway.outbound import deliver
from protege.models.base import utcnow


def _with(config, **changes):
    return attrs.evolve(config, runs=attrs.evolve(config.runs, **changes))


def test_an_outbox_mail_whose_loop_died_is_taken_over_after_the_runs_lease(sundae, config):
    config = _with(config, lease_seconds=2)
    deliver(agent=sundae, run=None, config=config, mail={"to": ["a@b.example"], "body": "Hi"})
    now = utcnow()
    taken = claim_due(config, now, 10)  # by a loop that dies before handing it over
    assert len(taken) == 1
    assert claim_due(config, now + datetime.timedelta(seconds=1), 10) == []
    assert claim_due(config, now + datetime.timedelta(seconds=3), 10) == taken


def test_an_smtp_mail_is_held_for_the_relay_s_whole_answer(sundae, config):
    config = _with(config, lease_seconds=2)
    config = attrs.evolve(config, mail=attrs.evolve(config.mail, transport="smtp"))
    deliver(agent=sundae, run=None, config=config, mail={"to": ["a@b.example"], "body": "Hi"})
    now = utcnow()
    assert len(claim_due(config, now, 10)) == 1
    later = now + datetime.timedelta(seconds=4 * config.mail.smtp_timeout - 1)
    assert claim_due(config, later, 10) == []
