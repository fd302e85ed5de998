"""Claims and leases: one worker per run, and a run whose worker died is taken over."""

import datetime

import pytest

from protege.mail import record_inbound
from protege.models import Agent, Run
from protege.queue import claim_next, queue_reply

T0 = datetime.datetime(2026, 11, 30, 12, 0, 0)
LEASE = 60.0


def later(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.fixture
def queued(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    return [
        queue_reply(record_inbound(agent, sender="jane@acme.com", body=f"{n}")) for n in range(2)
    ]


def test_claims_take_the_oldest_queued_run_once(queued):
    first = Run.claim_next("a", T0, LEASE)
    second = Run.claim_next("b", T0, LEASE)
    assert [first.run_id, second.run_id] == [queued[0].id, queued[1].id]
    assert Run.claim_next("c", T0, LEASE) is None
    run = Run.get_by_id(queued[0].id)
    assert (run.status, run.attempts, run.lease_owner) == ("running", 1, "a")
    assert run.lease_expires_at == later(LEASE)


def test_a_running_run_is_not_taken_while_its_lease_holds(queued):
    Run.claim_next("a", T0, LEASE)
    Run.claim_next("b", T0, LEASE)
    assert Run.claim_next("c", later(LEASE - 1), LEASE) is None


def test_a_run_whose_lease_expired_is_taken_over_and_resumes_its_trail(queued):
    claim = Run.claim_next("dead", T0, LEASE)
    Run.claim_next("busy", T0, LEASE * 10)
    taken = Run.claim_next("alive", later(LEASE + 1), LEASE)
    assert (taken.run_id, taken.attempts, taken.taken_over) == (claim.run_id, 2, True)
    assert Run.get_by_id(claim.run_id).lease_owner == "alive"


def test_a_busy_worker_between_its_full_looks_takes_queued_runs_only(queued):
    dead = Run.claim_next("dead", T0, LEASE)  # its lease runs out; the other run waits
    busy = Run.claim_next("busy", later(LEASE + 1), LEASE, look=False, expired=False)
    assert busy.run_id == queued[1].id
    assert Run.claim_next("busy", later(LEASE + 1), LEASE, look=False, expired=False) is None
    full = Run.claim_next("busy", later(LEASE + 1), LEASE)
    assert (full.run_id, full.taken_over) == (dead.run_id, True)


def test_the_worker_that_lost_its_run_can_neither_renew_nor_finish_it(queued):
    claim = Run.claim_next("dead", T0, LEASE)
    Run.claim_next("alive", later(LEASE + 1), LEASE)  # the second queued run
    Run.claim_next("alive", later(LEASE + 1), LEASE)  # the expired one
    assert Run.renew_lease(claim.run_id, "dead", later(LEASE + 2), LEASE).held is False
    run = Run.get_by_id(claim.run_id)
    assert run.finish("failed", "late", owner="dead") is False
    assert Run.get_by_id(claim.run_id).status == "running"
    assert run.finish("done", owner="alive") is True


def test_renewing_extends_the_lease(queued):
    claim = Run.claim_next("a", T0, LEASE)
    assert Run.renew_lease(claim.run_id, "a", later(LEASE - 1), LEASE).held
    assert Run.claim_next("b", later(LEASE + 1), LEASE).run_id != claim.run_id  # the other one
    assert Run.claim_next("c", later(LEASE + 1), LEASE) is None


def test_a_run_handed_back_is_queued_again_without_spending_an_attempt(queued):
    claim = Run.claim_next("a", T0, LEASE)
    assert Run.hand_back(claim.run_id, "a")
    run = Run.get_by_id(claim.run_id)
    assert (run.status, run.attempts, run.lease_owner) == ("queued", 0, None)
    assert not Run.hand_back(claim.run_id, "a")  # not held any more


def test_cancelling_a_queued_run_ends_it_and_a_running_one_is_asked_to_stop(queued):
    claim = Run.claim_next("a", T0, LEASE)
    assert Run.request_cancel(queued[1].id, T0) == "queued"
    assert Run.get_by_id(queued[1].id).status == "cancelled"
    assert Run.claim_next("b", T0, LEASE) is None  # a cancelled run is never claimed
    assert Run.renew_lease(claim.run_id, "a", T0, LEASE).cancel_requested is False
    assert Run.request_cancel(claim.run_id, T0) == "running"
    assert Run.renew_lease(claim.run_id, "a", T0, LEASE).cancel_requested is True
    assert Run.request_cancel(10_000, T0) is None


def test_claim_next_loads_the_run_with_its_agent_and_message(queued):
    run, claim = claim_next("a", T0, LEASE)
    assert (run.id, claim.owner, claim.last_seq) == (queued[0].id, "a", 0)
    assert (run.agent.name, run.message.body_text) == ("Sundae", "0")


def test_a_run_left_running_by_a_protege_older_than_leases_is_taken_over(queued):
    Run.update(status="running", attempts=1).where(Run.id == queued[0].id).execute()
    taken = Run.claim_next("alive", T0, LEASE)
    assert (taken.run_id, taken.taken_over) == (queued[0].id, True)


def test_a_run_a_live_worker_holds_is_not_retried(queued):
    from protege.errors import ProtegeError
    from protege.models.base import utcnow
    from protege.queue import requeue

    claim = Run.claim_next("alive", utcnow(), 600)
    with pytest.raises(ProtegeError, match="its worker holds it"):
        requeue(Run.get_by_id(claim.run_id))
    assert Run.get_by_id(claim.run_id).lease_owner == "alive"


def test_a_claim_says_the_run_was_cancelled_while_its_last_worker_had_it(queued):
    first = Run.claim_next("dead", T0, LEASE)
    Run.request_cancel(first.run_id, T0)
    Run.claim_next("other", T0, LEASE)  # the second queued run
    taken = Run.claim_next("alive", later(LEASE + 1), LEASE)
    assert (taken.run_id, taken.cancel_requested) == (first.run_id, True)


def test_cancel_never_says_cancelled_when_an_approval_wakes_the_run_meanwhile(queued):
    """An approval answered while an operator cancels: whichever lands first, a cancel that
    says it cancelled the run has cancelled it (it once looked, then changed, in three
    statements, and a wake-up between them won: "cancelled", yet the run went on)."""

    run_id = queued[0].id
    outcomes = [_cancel_against_a_wake_up(run_id) for _ in range(600)]
    for said, status in outcomes:
        if said in ("queued", "waiting"):
            assert status == "cancelled", (said, status)
        else:  # the wake-up came first: the run was queued, and a cancel would find it so
            assert status == "queued", (said, status)


def _cancel_against_a_wake_up(run_id: int) -> tuple[str | None, str]:
    """Put the run back to waiting; cancel it while an approval wakes it, from two threads
    let go at once; what the cancel said, and the run's status after both."""
    import threading

    from protege.db import database
    from protege.models.approvals import wake

    Run.update(status="waiting", error=None, finished_at=None).where(Run.id == run_id).execute()
    start = threading.Barrier(2)
    said: list[str | None] = []

    def cancel() -> None:
        start.wait()
        said.append(Run.request_cancel(run_id, T0))
        database.close()

    def answer() -> None:
        start.wait()
        wake(run_id)
        database.close()

    threads = [threading.Thread(target=cancel), threading.Thread(target=answer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return said[0], Run.get_by_id(run_id).status
