"""Responsibility records: checked on save, and when their due times start counting."""

import datetime

import pytest

from protege.cron import ScheduleError
from protege.errors import ProtegeError
from protege.migrations import MIGRATIONS
from protege.models import Agent, Responsibility


@pytest.fixture
def scout(protege_db):
    return Agent.create(name="Scout", address="scout@thescoop.example")


def test_a_schedule_is_kept_normalized_with_its_time_zone(scout):
    duty = Responsibility.create(
        agent=scout,
        name="  stock   report ",
        prompt="Go.",
        schedule=" @DAILY ",
        timezone="Asia/Tokyo",
    )
    again = Responsibility.get_by_id(duty.id)
    assert (again.name, again.schedule, again.timezone, again.enabled) == (
        "stock report",
        "@daily",
        "Asia/Tokyo",
        True,
    )
    assert again.cron.zone.key == "Asia/Tokyo"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"schedule": "0 7 * * * *"}, "has 6 fields"),
        ({"timezone": "Nowhere/City"}, "unknown time zone"),
        ({"prompt": "   "}, "needs instructions"),
        ({"name": "\n"}, "needs a name"),
        ({"name": "stock\x1b[2J"}, "needs a name"),
    ],
)
def test_bad_fields_are_refused_and_nothing_is_stored(scout, fields, error):
    with pytest.raises(ProtegeError, match=error):
        Responsibility.create(**{"agent": scout, "name": "r", "prompt": "Go.", **fields})
    assert Responsibility.select().count() == 0


def test_schedule_errors_are_protege_errors(scout):
    assert issubclass(ScheduleError, ProtegeError)


def test_changing_when_it_runs_restarts_the_count_and_other_changes_do_not(scout):
    old = datetime.datetime(2026, 1, 1)
    duty = Responsibility.create(
        agent=scout, name="r", prompt="Go.", schedule="@daily", scheduled_from=old
    )
    duty = Responsibility.get_by_id(duty.id)
    duty.prompt = "Go now."
    duty.save()
    assert Responsibility.get_by_id(duty.id).scheduled_from == old
    duty.schedule = "@hourly"
    duty.save()
    assert Responsibility.get_by_id(duty.id).scheduled_from > old


def test_two_agents_may_share_a_name_but_one_agent_may_not(scout, protege_db):
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    Responsibility.create(agent=scout, name="report", prompt="Go.")
    Responsibility.create(agent=sundae, name="report", prompt="Go.")
    with pytest.raises(ProtegeError, match="Scout already has a responsibility named 'report'"):
        Responsibility.create(agent=scout, name="report", prompt="Again.")
    assert Responsibility.named("report", sundae).agent_id == sundae.id
    with pytest.raises(ProtegeError, match="say whose with --agent"):
        Responsibility.named("report")


def test_the_migration_is_named_for_it():
    (migration,) = [m for m in MIGRATIONS if m.version == 6]
    assert migration.name == "responsibilities on a schedule"
