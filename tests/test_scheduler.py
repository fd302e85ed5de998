"""The scheduler: one run per due time, catch-up once, no overlap, the failure policy, and
two schedulers racing on one database. Time comes from a clock the test moves."""

import asyncio
import datetime
import email
import threading
from email import policy
from pathlib import Path

import attrs
import peewee
import pytest

from protege.config import ResponsibilitySettings
from protege.db import database
from protege.delivery import send_pending
from protege.models import Agent, Responsibility, Run, Toolkit
from protege.models.runs import DONE, FAILED, QUEUED
from protege.queue import AlreadyQueued, queue_scheduled
from protege.scheduler import Scheduler
from protege.testing import http_error, say, tool_call
from protege.worker import drain
from tests.looping import ends, protege_threads, until

UTC = datetime.UTC


class Clock:
    """A clock the test sets; it never moves by itself."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


def utc(*parts):
    return datetime.datetime(*parts, tzinfo=UTC)


def stored(moment):
    return moment.astimezone(UTC).replace(tzinfo=None)


def with_policy(installation, **settings):
    config = attrs.evolve(installation.config, responsibilities=ResponsibilitySettings(**settings))
    return attrs.evolve(installation, config=config)


@pytest.fixture
def scout(protege_db):
    return Agent.create(name="Scout", address="scout@thescoop.example")


SINCE = utc(2026, 3, 1, 12)


def duty(agent, name="stock report", schedule="0 7 * * *", since=SINCE, **fields):
    return Responsibility.create(
        agent=agent,
        name=name,
        prompt="Report the stock.",
        schedule=schedule,
        scheduled_from=stored(since),
        **fields,
    )


def due_once_at(agent, moment):
    """A duty due at ``moment`` (the minute), then not for a year: for tests that wait for
    the machine's clock, which the harness uses for a run's own times."""
    schedule = f"{moment.minute} {moment.hour} {moment.day} {moment.month} *"
    return duty(agent, schedule=schedule, since=moment - datetime.timedelta(minutes=1))


def real_minute():
    return datetime.datetime.now(UTC).replace(second=0, microsecond=0)


def runs_of(responsibility):
    return list(Run.select().where(Run.responsibility == responsibility).order_by(Run.id))


def test_a_due_time_queues_one_run_that_knows_its_due_time(protege_app, scout):
    report = duty(scout, timezone="Europe/Berlin")
    clock = Clock(utc(2026, 3, 2, 5, 59))  # 06:59 in Berlin
    scheduler = Scheduler(protege_app, clock=clock)
    assert scheduler.tick().queued == []
    clock.now = utc(2026, 3, 2, 6, 0, 20)
    (run,) = scheduler.tick().queued
    assert (run.kind, run.status, run.responsibility_id) == ("scheduled", QUEUED, report.id)
    assert run.message_id is None
    assert Run.get_by_id(run.id).due_at == datetime.datetime(2026, 3, 2, 6, 0)
    assert scheduler.tick().queued == []  # the same due time, a moment later
    assert len(runs_of(report)) == 1


def test_after_downtime_the_missed_due_times_run_once(protege_app, scout):
    report = duty(scout, schedule="0 * * * *")
    clock = Clock(utc(2026, 3, 2, 7, 0))
    scheduler = Scheduler(protege_app, clock=clock)
    assert len(scheduler.tick().queued) == 1
    Run.update(status=DONE).execute()
    clock.now = utc(2026, 3, 5, 12, 30)  # 77 hourly due times later
    (caught_up,) = scheduler.tick().queued
    assert Run.get_by_id(caught_up.id).due_at == datetime.datetime(2026, 3, 5, 12, 0)
    Run.update(status=DONE).execute()
    assert scheduler.tick().queued == []
    assert len(runs_of(report)) == 2


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        ((2026, 3, 28, 22), [datetime.datetime(2026, 3, 29, 1, 0)]),  # 02:30 skipped: at 03:00
        ((2026, 10, 24, 22), [datetime.datetime(2026, 10, 25, 0, 30)]),  # 02:30 twice: first
    ],
)
def test_across_a_dst_change_the_scheduler_runs_a_fixed_time_once(
    protege_app, scout, day, expected
):
    report = duty(scout, schedule="30 2 * * *", timezone="Europe/Berlin", since=utc(*day))
    clock = Clock(utc(*day))
    scheduler = Scheduler(protege_app, clock=clock)
    for _ in range(8 * 12):  # every five minutes for eight hours around the change
        clock.now += datetime.timedelta(minutes=5)
        scheduler.tick()
        Run.update(status=DONE).execute()
    assert [run.due_at for run in runs_of(report)] == expected


def test_a_run_still_going_holds_back_the_next_until_it_ends(protege_app, scout):
    report = duty(scout, schedule="*/5 * * * *")
    clock = Clock(utc(2026, 3, 2, 7, 0))
    scheduler = Scheduler(protege_app, clock=clock)
    (first,) = scheduler.tick().queued
    Run.update(status="running").where(Run.id == first.id).execute()
    clock.now = utc(2026, 3, 2, 7, 11)
    held = scheduler.tick()
    assert (held.queued, [r.id for r in held.busy]) == ([], [report.id])
    Run.update(status=DONE).where(Run.id == first.id).execute()
    clock.now = utc(2026, 3, 2, 7, 12)
    (next_run,) = scheduler.tick().queued  # 07:05 is skipped, 07:10 runs once, late
    assert Run.get_by_id(next_run.id).due_at == datetime.datetime(2026, 3, 2, 7, 10)
    assert len(runs_of(report)) == 2


def test_a_due_run_is_held_while_its_agent_s_spending_budget_is_reached(protege_app, scout):
    from protege.limits import spending

    report = duty(scout, schedule="0 * * * *")
    allowed = protege_app.config.limits.agent_tokens_per_day
    spending.record(scout.id, "2026-03-02", "scripted", allowed, 0, 0)
    clock = Clock(utc(2026, 3, 2, 7, 0))
    scheduler = Scheduler(protege_app, clock=clock)
    done = scheduler.tick()
    (held,) = done.held
    assert done.queued == []
    stored_run = Run.get_by_id(held.id)
    assert (stored_run.status, stored_run.held_until) == ("held", datetime.datetime(2026, 3, 3))
    assert stored_run.held_reason.startswith("agent_tokens_per_day reached by the agent")
    clock.now = utc(2026, 3, 2, 9, 0)  # due again, but the held run stands for the duty
    later = scheduler.tick()
    assert (later.queued, later.held, [r.id for r in later.busy]) == ([], [], [report.id])
    clock.now = utc(2026, 3, 3, 0, 1)  # a new day: the budget is back
    assert scheduler.tick().released == [held.id]
    assert Run.get_by_id(held.id).status == QUEUED
    assert len(runs_of(report)) == 1


def test_disabled_and_unscheduled_duties_and_due_times_before_creation_queue_nothing(
    protege_app, scout
):
    duty(scout, name="off", enabled=False)
    Responsibility.create(agent=scout, name="on demand", prompt="Only when asked.")
    duty(scout, name="new", since=utc(2026, 3, 2, 8))  # created after today's 07:00
    clock = Clock(utc(2026, 3, 2, 9))
    assert Scheduler(protege_app, clock=clock).tick().queued == []
    clock.now = utc(2026, 3, 3, 7)
    (run,) = Scheduler(protege_app, clock=clock).tick().queued
    assert run.responsibility.name == "new"


def test_an_archived_agents_duties_queue_nothing_until_it_is_restored(protege_app, scout):
    duty(scout)
    scout.archive()
    clock = Clock(utc(2026, 3, 2, 7))
    assert Scheduler(protege_app, clock=clock).tick().queued == []
    scout.restore()
    clock.now = utc(2026, 3, 3, 7)
    (run,) = Scheduler(protege_app, clock=clock).tick().queued
    assert run.agent_id == scout.id


def test_enabling_again_does_not_make_up_for_the_days_it_was_off(protege_app, scout):
    report = duty(scout, enabled=False)
    report.enabled = True
    report.save()  # now (the machine's clock): long after March 2026's due times
    clock = Clock(utc(2026, 3, 10, 12))
    assert Scheduler(protege_app, clock=clock).tick().queued == []
    assert report.scheduled_from > datetime.datetime(2026, 3, 10)


def test_the_database_refuses_a_second_run_for_one_due_time(protege_db, scout):
    report = duty(scout)
    due = utc(2026, 3, 2, 7)
    queue_scheduled(report, due)
    with pytest.raises(AlreadyQueued, match="is queued already"):
        queue_scheduled(report, due)
    with pytest.raises(peewee.IntegrityError), database.atomic():  # whoever writes the row
        Run.create(
            agent=scout,
            kind="scheduled",
            responsibility=report,
            correlation_id="another",
            due_at=stored(due),
        )
    queue_scheduled(report)  # asked to run now: no due time, any number of them
    queue_scheduled(report)
    assert len(runs_of(report)) == 3


def test_two_schedulers_racing_queue_exactly_one_run_per_due_time(protege_app, scout):
    duties = [duty(scout, name=f"duty {n}", schedule="* * * * *") for n in range(12)]
    moment = [utc(2026, 3, 2, 7, 0)]
    rounds = 6
    barrier = threading.Barrier(2)
    passes: list = []
    errors: list[BaseException] = []

    def race(leader: bool) -> None:
        scheduler = Scheduler(protege_app, clock=lambda: moment[0])
        try:
            for _ in range(rounds):
                barrier.wait(timeout=60)
                passes.append(scheduler.tick())
                barrier.wait(timeout=60)
                if leader:  # the runs are done; the next minute comes
                    Run.update(status=DONE).where(Run.status == QUEUED).execute()
                    moment[0] += datetime.timedelta(minutes=1)
                barrier.wait(timeout=60)
        except BaseException as error:
            errors.append(error)
            barrier.abort()
        finally:
            database.close()

    threads = [threading.Thread(target=race, args=(n == 0,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = list(Run.select(Run.responsibility, Run.due_at))
    keys = [(row.responsibility_id, row.due_at) for row in rows]
    assert len(keys) == len(set(keys)) == len(duties) * rounds
    assert sum(len(p.queued) for p in passes) == len(duties) * rounds


def test_a_failed_run_is_retried_as_the_policy_says(protege_app, scout, scripted_model):
    start = real_minute()
    due_once_at(scout, start)
    app = with_policy(protege_app, retries=1, retry_delay_seconds=600)
    scripted_model.script(http_error(401))
    clock = Clock(start)
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    (failed,) = drain(app)
    assert failed.status == FAILED
    clock.now = _real_after(failed, seconds=599)
    assert scheduler.tick().retried == []  # not yet: the delay has not passed
    clock.now = _real_after(failed, seconds=600)
    assert [r.id for r in scheduler.tick().retried] == [failed.id]
    scripted_model.script(say("Stock is fine."))
    (again,) = drain(app)
    assert (again.id, again.status, again.attempts) == (failed.id, DONE, 2)


def test_by_default_a_failure_is_not_retried_and_is_mailed_once(protege_app, scout, scripted_model):
    start = real_minute()
    due_once_at(scout, start)
    app = with_policy(protege_app, notify="ops@thescoop.com")
    scripted_model.script(http_error(401, "the key was refused"))
    clock = Clock(start)
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    (failed,) = drain(app)
    clock.now = _real_after(failed, seconds=3600)
    done = scheduler.tick()
    assert (done.retried, [r.id for r in done.failed]) == ([], [failed.id])
    assert scheduler.tick().failed == []
    (sent,) = _outbox(app)
    assert sent["From"] == "Scout <scout@thescoop.example>"
    assert sent["To"] == "ops@thescoop.com"
    assert sent["Subject"] == "Scheduled run failed: stock report (Scout)"
    body = sent.get_content()
    assert Run.get_by_id(failed.id).error in body
    assert f"protege runs show {failed.id}" in body
    assert Run.get_by_id(failed.id).status == FAILED


def test_without_notify_a_failure_is_recorded_and_nothing_is_sent(
    protege_app, scout, scripted_model
):
    start = real_minute()
    due_once_at(scout, start)
    scripted_model.script(http_error(401))
    clock = Clock(start)
    scheduler = Scheduler(protege_app, clock=clock)
    scheduler.tick()
    (failed,) = drain(protege_app)
    assert len(scheduler.tick().failed) == 1
    assert Run.get_by_id(failed.id).settled_at is not None
    assert _outbox(protege_app) == []


def test_a_scheduled_run_gets_only_proactive_tools_and_mails_a_new_message(
    protege_app, scout, scripted_model
):
    scout.grant(Toolkit.create(name="Operations", member_tool_ids=["send_email"]),
                allow_proactive=True)  # fmt: skip
    scout.grant(Toolkit.create(name="Archive", member_tool_ids=["search_emails"]))
    duty(scout, timezone="Europe/Berlin")
    scripted_model.script(
        tool_call(
            "send_email",
            mode="new",
            to=["mara@thescoop.com"],
            subject="Stock this morning",
            body="All flavours in stock.",
        ),
        say("Sent the report."),
    )
    Scheduler(protege_app, clock=Clock(utc(2026, 3, 2, 6, 1))).tick()
    (run,) = drain(protege_app)
    assert run.status == DONE
    assert scripted_model.offered_tools(0) == ["send_email"]
    assert scripted_model.shown(0)[-1] == {
        "role": "user",
        "content": (
            "Report the stock.\n\n(protege: this is the run due at Monday 02 March 2026, 07:00 "
            "Europe/Berlin for the responsibility 'stock report'.)"
        ),
    }
    (sent,) = _outbox(protege_app)
    assert (sent["To"], sent["Subject"]) == ("mara@thescoop.com", "Stock this morning")


def test_the_scheduler_thread_stops_at_once_while_it_waits(protege_app, scout):
    duty(scout)
    queued = threading.Event()
    app = with_policy(protege_app, poll_seconds=3600)
    scheduler = Scheduler(app, clock=lambda: utc(2026, 3, 2, 8), on_line=lambda _: queued.set())
    scheduler.start()
    assert queued.wait(30)
    scheduler.stop(timeout=30)  # it is waiting an hour for its next pass: stop ends that
    assert not scheduler.running
    assert Run.select().count() == 1


def test_a_clock_without_a_time_zone_is_refused(protege_app):
    with pytest.raises(ValueError, match="aware"):
        Scheduler(protege_app, clock=lambda: datetime.datetime(2026, 3, 2)).tick()


def _real_after(run, seconds):
    finished = Run.get_by_id(run.id).finished_at
    return finished.replace(tzinfo=UTC) + datetime.timedelta(seconds=seconds)


def _outbox(installation):
    send_pending(installation.config)  # what the delivery loop beside the scheduler does
    folder = Path(installation.config.data_dir) / "outbox"
    return [
        email.message_from_bytes(path.read_bytes(), policy=policy.default)
        for path in sorted(folder.glob("*.eml"))
    ]


def test_the_readme_policy_example_is_settings_protege_accepts(tmp_path):
    import re

    from protege.config import load_config

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    (block,) = re.findall(r"```toml\n(\[responsibilities\].*?)```", readme, re.DOTALL)
    (tmp_path / "protege.toml").write_text(block)
    settings = load_config(tmp_path, environ={}).responsibilities
    assert (settings.retries, settings.notify) == (0, "ops@thescoop.com")


@pytest.mark.parametrize("cancel", [False, True])
def test_the_scheduler_on_an_event_loop_queues_then_ends_on_stop_or_a_cancel(
    protege_app, scout, cancel
):
    duty(scout)
    app = with_policy(protege_app, poll_seconds=3600)
    lines = []

    async def serve():
        scheduler = Scheduler(app, clock=lambda: utc(2026, 3, 2, 8), on_line=lines.append)
        serving = asyncio.create_task(scheduler.serve())
        await until(lambda: lines)  # the first pass queued the run
        if cancel:
            serving.cancel()
        else:
            scheduler.stop()  # it is waiting an hour for its next pass: stop ends that
        stopped = await ends(serving)
        scheduler.stop()
        await asyncio.wait({serving})
        return stopped, serving.cancelled()

    assert asyncio.run(serve()) == (True, cancel)
    assert Run.select().count() == 1
    assert protege_threads() == []
