"""A worker whose run was taken over by another (its lease ran out) writes nothing more."""

import asyncio
import datetime

import pytest

from protege.gateway.inbound import ingest
from protege.harness.model import close_clients
from protege.harness.runner import carry_out
from protege.installation import open_installation
from protege.models import Agent, Event, Message, Run, Toolkit
from protege.models.base import utcnow
from protege.testing import say, tool_call

EML = (
    b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\nSubject: Melted\r\n"
    b"Message-ID: <j1@acme.com>\r\n\r\nSCP-1042 arrived melted.\r\n"
)


@pytest.fixture
def agent(protege_db):
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    return agent


def _carry_out(run, claim, installation, clock):
    async def carried() -> Run:
        try:
            return await carry_out(run, claim, installation, clock=clock)
        finally:
            await close_clients()

    return asyncio.run(carried())


@pytest.mark.parametrize(
    "answer",
    [say("Done."), tool_call("send_email", mode="reply", body="On it.")],
    ids=["at its end", "at a step"],
)
def test_a_worker_that_lost_its_lease_leaves_the_run_to_the_new_worker(
    agent, config, scripted_model, answer
):
    (delivered,) = ingest(EML, config=config)
    started = utcnow()
    first = Run.claim(delivered.run.id, "worker-a", started, 2)
    later = started + datetime.timedelta(seconds=10)
    second = Run.claim_next("worker-b", later, 2)
    assert second is not None
    assert second.taken_over
    # The new worker has written its first event, under the number the old one would use.
    Event.append(delivered.run.id, [(1, "run_resumed", '{"attempt": 2, "reason": "taken"}')])
    scripted_model.script(answer)
    installation = open_installation(config, connect=False)

    run = _carry_out(Run.get_by_id(delivered.run.id), first, installation, lambda: started)

    assert run.status == "running"  # not ended by the worker that lost it
    stored = Run.get_by_id(run.id)
    assert (stored.status, stored.lease_owner, stored.error) == ("running", "worker-b", None)
    assert [e.kind for e in stored.timeline()] == ["run_resumed"]
    assert not Message.select().where(Message.direction == "outbound").exists()


def test_a_worker_that_lost_its_lease_cannot_end_a_run_the_new_worker_ended(
    agent, config, scripted_model
):
    (delivered,) = ingest(EML, config=config)
    started = utcnow()
    first = Run.claim(delivered.run.id, "worker-a", started, 2)
    second = Run.claim_next("worker-b", started + datetime.timedelta(seconds=10), 2)
    assert second is not None
    # The new worker carries the run to its end before the old one wakes up.
    Event.append(delivered.run.id, [(1, "run_resumed", '{"attempt": 2, "reason": "taken"}')])
    assert Run.get_by_id(delivered.run.id).finish("done", None, "worker-b")
    scripted_model.script(say("Done."))
    installation = open_installation(config, connect=False)

    run = _carry_out(Run.get_by_id(delivered.run.id), first, installation, lambda: started)

    stored = Run.get_by_id(run.id)
    assert (stored.status, stored.error) == ("done", None)
    assert [e.kind for e in stored.timeline()] == ["run_resumed"]


@pytest.mark.parametrize("status", ["done", "failed"])
def test_an_ended_run_is_not_ended_again(agent, config, status):
    (delivered,) = ingest(EML, config=config)
    Run.claim(delivered.run.id, "worker-a", utcnow(), 60)
    assert Run.get_by_id(delivered.run.id).finish(status, "why", "worker-a")
    again = Run.get_by_id(delivered.run.id)
    assert not again.finish("failed", "too late", "worker-a")
    assert not again.finish("failed", "too late", None)
    assert again.status == status
    assert (Run.get_by_id(delivered.run.id).status, again.error) == (status, "why")
