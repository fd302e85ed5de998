"""Held runs go into the queue when their window reopens, oldest first and within the
limits again, or when an operator releases them; queued runs are taken in fair turns."""

import datetime
from email.message import EmailMessage

import attrs
import pytest

from protege.errors import ProtegeError
from protege.gateway.inbound import ingest
from protege.limit_settings import AgentLimits
from protege.limits.holding import held_runs, release, release_due
from protege.limits.standing import standings
from protege.models import Agent, Run
from protege.queue import claim_next, requeue
from tests.limits.mailing import configured, mail, signed

NOON = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


def send(config, sender, number, now, *, proven=False):
    (delivered,) = ingest(
        mail(sender, number),
        config=config,
        recipients=["sundae@thescoop.example"],
        clock=lambda: now,
        verdict=signed(sender) if proven else None,
    )
    return delivered.run


def claim_all(now):
    """Claim every queued run, in the order workers would take them."""
    order = []
    while (claimed := claim_next("test-worker", now, 60)) is not None:
        order.append(claimed[0])
    return order


def test_held_runs_are_released_in_arrival_order_within_the_new_windows_limit(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=2)
    runs = [send(config, "jane@acme.example", n, NOON) for n in range(7)]
    held = [r.id for r in runs[2:]]
    assert held_runs() == held
    assert release_due(NOON + datetime.timedelta(minutes=59), config.limits).queued == []
    next_hour = NOON + datetime.timedelta(hours=1)
    released = release_due(next_hour, config.limits)
    assert released.queued == held[:2]
    assert released.held_on == 3
    still = [Run.get_by_id(i) for i in held[2:]]
    assert {r.held_until for r in still} == {datetime.datetime(2026, 12, 2, 14, 0)}
    assert all(r.status == "held" for r in still)
    assert Run.get_by_id(held[0]).admitted_at == next_hour.replace(tzinfo=None)
    later = release_due(NOON + datetime.timedelta(hours=3), config.limits)
    assert later.queued == held[2:4]
    assert release_due(NOON + datetime.timedelta(hours=4), config.limits).queued == held[4:]
    assert held_runs() == []


def test_a_release_pass_holds_on_with_the_reason_of_the_limit_still_reached(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1, sender_runs_per_day=2)
    runs = [send(config, "jane@acme.example", n, NOON) for n in range(4)]
    release_due(NOON + datetime.timedelta(hours=1), config.limits)
    last = Run.get_by_id(runs[3].id)
    assert last.status == "held"
    assert last.held_until == datetime.datetime(2026, 12, 3)
    assert "sender_runs_per_day" in last.held_reason


def test_an_operator_releases_what_the_limits_would_still_hold(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    runs = [send(config, "jane@acme.example", n, NOON) for n in range(3)]
    assert release([runs[2].id, runs[0].id, 999_999], NOON, by="ops") == [runs[2].id]
    assert Run.get_by_id(runs[2].id).status == "queued"
    assert Run.get_by_id(runs[1].id).status == "held"


def test_a_held_run_is_not_retried_and_says_how_to_release_it(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    send(config, "jane@acme.example", 0, NOON)
    held = send(config, "jane@acme.example", 1, NOON)
    with pytest.raises(ProtegeError, match=f"protege runs release {held.id}"):
        requeue(Run.get_by_id(held.id))


def test_workers_never_claim_a_held_run(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    runs = [send(config, "jane@acme.example", n, NOON) for n in range(3)]
    assert [r.id for r in claim_all(NOON)] == [runs[0].id]


def test_a_quiet_senders_first_mail_is_taken_after_one_run_of_the_flood(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=0)
    flood = [send(config, "flood@acme.example", n, NOON, proven=True) for n in range(10)]
    quiet = send(config, "quiet@acme.example", 100, NOON, proven=True)
    other = send(config, "other@acme.example", 101, NOON, proven=True)
    order = [r.id for r in claim_all(NOON)]
    assert order[:4] == [flood[0].id, quiet.id, other.id, flood[1].id]
    assert order[4:] == [r.id for r in flood[2:]]


def test_a_senders_own_mail_keeps_its_order(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=0)
    first = [send(config, s, n, NOON) for n, s in enumerate(["a@x.example", "a@x.example"])]
    taken = claim_next("w", NOON, 60)
    assert taken is not None
    assert taken[0].id == first[0].id
    more = [send(config, "a@x.example", 10 + n, NOON) for n in range(2)]
    order = [r.id for r in claim_all(NOON)]
    assert order == [first[1].id, *(r.id for r in more)]


def test_a_run_put_back_in_the_queue_goes_before_newer_turns(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=0)
    runs = [send(config, "a@x.example", n, NOON) for n in range(3)]
    taken = claim_next("w", NOON, 60)
    assert taken is not None
    Run.hand_back(taken[0].id, "w")
    order = [r.id for r in claim_all(NOON)]
    assert order == [r.id for r in runs]


def test_an_agent_at_its_runs_in_flight_waits_while_others_go_on(tmp_path, sundae):
    cone = Agent.create(name="Cone", address="cone@thescoop.example")
    config = configured(
        tmp_path,
        sender_runs_per_hour=0,
        sender_runs_per_day=0,
        agents={"Sundae": AgentLimits(agent_runs_in_flight=1)},
    )
    mine = [send(config, "a@x.example", n, NOON) for n in range(2)]
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "b@x.example", cone.address, "Hi"
    message.set_content("Hello")
    (theirs,) = ingest(
        message.as_bytes(), config=config, recipients=[cone.address], clock=lambda: NOON
    )
    first = claim_next("w", NOON, 60, limits=config.limits)
    second = claim_next("w", NOON, 60, limits=config.limits)
    nothing = claim_next("w", NOON, 60, limits=config.limits)
    assert first is not None
    assert second is not None
    assert (first[0].id, second[0].id, nothing) == (mine[0].id, theirs.run.id, None)
    # A run whose worker died no longer holds its place.
    later = NOON + datetime.timedelta(minutes=5)
    Run.update(lease_expires_at=NOON.replace(tzinfo=None)).where(Run.id == mine[0].id).execute()
    taken = claim_next("w", later, 60, limits=config.limits, expired=False)
    assert taken is not None
    assert taken[0].id == mine[1].id


def test_an_operator_cancels_a_held_run_and_no_release_brings_it_back(tmp_path, sundae):
    from protege.operations import cancel_run

    config = configured(tmp_path, sender_runs_per_hour=1)
    send(config, "jane@acme.example", 0, NOON)
    held = send(config, "jane@acme.example", 1, NOON)
    assert cancel_run(held.id, actor="test").describe() == f"run {held.id} cancelled (it was held)"
    cancelled = Run.get_by_id(held.id)
    assert (cancelled.status, cancelled.error) == (
        "cancelled",
        "cancelled by an operator while it was held",
    )
    assert release_due(NOON + datetime.timedelta(days=1), config.limits).queued == []
    assert release([held.id], NOON, by="ops") == []


def test_made_up_addresses_buy_no_turns_mail_that_proves_no_sender_shares_one_lane(
    tmp_path, sundae
):
    config = configured(tmp_path, sender_runs_per_hour=0, unproven_runs_per_hour=0)
    forged = [send(config, f"flood{n}@evil.example", n, NOON) for n in range(30)]
    quiet = send(config, "quiet@acme.example", 100, NOON, proven=True)
    order = [r.id for r in claim_all(NOON)]
    assert order[:3] == [forged[0].id, quiet.id, forged[1].id]
    assert {Run.get_by_id(r.id).lane for r in forged} == {f"unproven:agent {sundae.id}"}
    assert Run.get_by_id(quiet.id).lane == "quiet@acme.example"


def test_mail_that_proves_no_sender_has_its_own_share_of_the_agents_hour(tmp_path, sundae):
    config = configured(tmp_path, agent_runs_per_hour=10, unproven_runs_per_hour=5)
    forged = [send(config, f"flood{n}@evil.example", n, NOON) for n in range(8)]
    assert [r.status for r in forged] == ["queued"] * 5 + ["held"] * 3
    assert Run.get_by_id(forged[5].id).held_reason.startswith(
        "unproven_runs_per_hour reached by mail that did not prove its sender (5 of 5)"
    )
    proven = [send(config, f"c{n}@acme.example", 100 + n, NOON, proven=True) for n in range(6)]
    assert [r.status for r in proven] == ["queued"] * 5 + ["held"]
    assert "agent_runs_per_hour" in Run.get_by_id(proven[5].id).held_reason
    standing = standings([(sundae.id, "Sundae")], NOON, config.limits).agents[sundae.id]
    assert standing.limits["unproven_runs_per_hour"].used == 5
    assert standing.limits["agent_runs_per_hour"].used == 10


def test_a_sender_authentication_that_does_not_enforce_takes_every_sender_at_their_word(
    tmp_path, sundae
):
    config = configured(tmp_path, sender_runs_per_hour=1)
    config = attrs.evolve(
        config,
        mail=attrs.evolve(
            config.mail, authentication=attrs.evolve(config.mail.authentication, mode="report")
        ),
    )
    runs = [send(config, "jane@acme.example", n, NOON) for n in range(2)]
    assert [Run.get_by_id(r.id).sender_key for r in runs] == ["jane@acme.example"] * 2
    assert Run.get_by_id(runs[0].id).lane == "jane@acme.example"
    assert Run.get_by_id(runs[1].id).status == "held"


def test_held_runs_are_released_in_turns_by_lane_not_by_arrival(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, agent_runs_per_hour=2)
    first = [send(config, "a@acme.example", n, NOON, proven=True) for n in range(2)]
    backlog = [send(config, "a@acme.example", 10 + n, NOON, proven=True) for n in range(4)]
    others = [send(config, s, 20 + n, NOON, proven=True) for n, s in enumerate(["b@x.example"])]
    assert [r.status for r in first] == ["queued", "queued"]
    assert {r.status for r in backlog + others} == {"held"}
    released = release_due(NOON + datetime.timedelta(hours=1), config.limits)
    assert released.queued == [backlog[0].id, others[0].id]
