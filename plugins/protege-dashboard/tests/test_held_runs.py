"""Held runs on the dashboard: listed with why and until when, counted on the Agents page,
released (one, or all of an agent's) behind the login and the CSRF token, and audited."""

from __future__ import annotations

from email.message import EmailMessage

import attrs
import pytest

from protege import admin
from protege.limit_settings import LimitSettings
from protege.models import Agent, AuditEntry, Run

SUNDAE = "sundae@thescoop.example"
SCOUT = "scout@thescoop.example"


@pytest.fixture
def held(installation):
    """Mail the real gateway held: Jane's second and third to Sundae, Bob's second to
    Scout (one run per sender an hour)."""
    Agent.create(name="Sundae", address=SUNDAE)
    Agent.create(name="Scout", address=SCOUT)
    config = attrs.evolve(installation.config, limits=LimitSettings(sender_runs_per_hour=1))
    runs = []
    for number, (sender, to) in enumerate(
        [
            ("jane@acme.com", SUNDAE),
            ("jane@acme.com", SUNDAE),
            ("jane@acme.com", SUNDAE),
            ("bob@acme.com", SCOUT),
            ("bob@acme.com", SCOUT),
        ]
    ):
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = sender, to, f"Question {number}"
        message["Message-ID"] = f"<q{number}@acme.com>"
        message.set_content("Is mango in stock?")
        (delivered,) = admin.ingest(message.as_bytes(), config=config)
        runs.append(delivered.run)
    assert [run.status for run in runs] == ["queued", "held", "held", "queued", "held"]
    return [runs[1], runs[2], runs[4]]


def statuses(runs) -> list[str]:
    return [Run.get_by_id(run.id).status for run in runs]


def test_held_runs_are_listed_with_why_and_until_when(signed_in, held):
    page = signed_in.get("/runs?status=held").text
    for run in held:
        assert f'id="run-{run.id}"' in page
        assert f'id="release-{run.id}"' in page
    assert "sender_runs_per_hour reached by jane@acme.com (unproven) (1 of 1)" in page
    until = Run.get_by_id(held[0].id).held_until.strftime("%Y-%m-%d %H:%M")
    assert until in page
    assert 'id="release-all"' in page
    everything = signed_in.get("/runs").text
    assert 'id="held-runs"' in everything
    assert "3 runs held over a limit" in everything


def test_the_agents_page_counts_held_runs(signed_in, held):
    page = signed_in.get("/agents").text
    sundae = Agent.get(Agent.name == "Sundae")
    assert "3 runs held over a limit" in page
    assert f'id="held-{sundae.id}">2</a>' in page


def test_a_held_run_is_released_from_its_page_and_audited(signed_in, held, token_of):
    first = held[0]
    page = signed_in.get(f"/runs/{first.id}").text
    assert 'id="release-run"' in page
    answer = signed_in.post(f"/runs/{first.id}/release", data={"csrf_token": token_of(page)})
    assert answer.url.path == f"/runs/{first.id}"
    assert f"run {first.id} released: it is queued" in answer.text
    assert statuses(held) == ["queued", "held", "held"]
    (entry,) = AuditEntry.select()
    assert (entry.actor, entry.action, entry.subject) == (
        "operator:mara",
        "held runs released",
        f"run {first.id}",
    )
    late = signed_in.post(f"/runs/{first.id}/release", data={"csrf_token": token_of(page)})
    assert f"run {first.id} is queued, not held: there is nothing to release" in late.text
    assert AuditEntry.select().count() == 1


def test_releasing_all_of_an_agent_leaves_the_others_held(signed_in, held, token_of):
    sundae = Agent.get(Agent.name == "Sundae")
    page = signed_in.get(f"/runs?status=held&agent={sundae.id}").text
    answer = signed_in.post(
        "/runs/release", data={"csrf_token": token_of(page), "agent": str(sundae.id)}
    )
    assert f"2 held runs of Sundae released, queued: runs {held[0].id}, {held[1].id}" in (
        answer.text
    )
    assert statuses(held) == ["queued", "queued", "held"]
    answer = signed_in.post("/runs/release", data={"csrf_token": token_of(page), "agent": ""})
    assert f"run {held[2].id} released: it is queued" in answer.text
    assert statuses(held) == ["queued"] * 3


def test_release_needs_the_csrf_token(signed_in, held):
    run = held[0]
    for data in ({}, {"csrf_token": "x"}):
        assert signed_in.post(f"/runs/{run.id}/release", data=data).status_code == 403
        assert signed_in.post("/runs/release", data=data).status_code == 403
    assert statuses(held) == ["held"] * 3
    assert AuditEntry.select().count() == 0


@pytest.mark.parametrize("form", ["/runs/{id}/release", "/runs/release", "/runs/cancel-held"])
def test_a_stranger_releases_nothing(client, held, form):
    answer = client.post(form.format(id=held[0].id), data={}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login?next=/"
    assert statuses(held) == ["held"] * 3


def test_an_agent_id_that_is_not_ascii_digits_is_no_agent_not_an_error(signed_in, held, token_of):
    page = signed_in.get("/runs?status=held").text
    answer = signed_in.post(
        "/runs/release", data={"csrf_token": token_of(page), "agent": "²"}, follow_redirects=False
    )
    assert answer.status_code == 404
    assert statuses(held) == ["held"] * 3
    assert signed_in.get("/runs?agent=²&before=١٢").status_code == 200


def test_cancelling_every_held_run_of_an_agent_leaves_the_others_held(signed_in, held, token_of):
    sundae = Agent.get(Agent.name == "Sundae")
    page = signed_in.get(f"/runs?status=held&agent={sundae.id}").text
    assert 'id="cancel-all">Cancel every held run of this agent' in page
    answer = signed_in.post(
        "/runs/cancel-held", data={"csrf_token": token_of(page), "agent": str(sundae.id)}
    )
    assert f"2 held runs of Sundae cancelled: runs {held[0].id}, {held[1].id}" in answer.text
    assert statuses(held) == ["cancelled", "cancelled", "held"]
    (entry,) = AuditEntry.select()
    assert (entry.actor, entry.action, entry.subject) == (
        "operator:mara",
        "held runs cancelled",
        "2 held runs of Sundae",
    )
    answer = signed_in.post("/runs/cancel-held", data={"csrf_token": token_of(page), "agent": ""})
    assert f"run {held[2].id} cancelled: it was held" in answer.text
    assert statuses(held) == ["cancelled"] * 3


def test_cancelling_held_runs_needs_the_csrf_token(signed_in, held):
    for data in ({}, {"csrf_token": "x"}):
        assert signed_in.post("/runs/cancel-held", data=data).status_code == 403
    assert statuses(held) == ["held"] * 3
    assert AuditEntry.select().count() == 0
