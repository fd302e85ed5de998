"""Mail over a limit is stored and its run held; nothing is dropped, and each limit counts
in its own window of UTC time."""

import datetime

import pytest

from protege.authentication import Verdict
from protege.gateway.inbound import ingest
from protege.limit_settings import AgentLimits, LimitSettings
from protege.limits.admission import BEHIND_HELD, admission, spending_limit_reached
from protege.limits.windows import DAY, HOUR, MONTH, window
from protege.models import Agent, Message, Run
from protege.models.limits import UsageDay
from tests.limits.mailing import configured, mail

NOON = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += datetime.timedelta(**delta)


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


def test_mail_past_the_senders_hourly_limit_is_stored_and_held_until_the_hour_ends(
    tmp_path, sundae
):
    config = configured(tmp_path, sender_runs_per_hour=3)
    clock = Clock(NOON + datetime.timedelta(minutes=20))
    delivered = [
        ingest(
            mail("jane@acme.example", n), config=config, recipients=[sundae.address], clock=clock
        )[0]
        for n in range(5)
    ]
    assert [d.run.status for d in delivered] == ["queued"] * 3 + ["held"] * 2
    held = Run.get_by_id(delivered[3].run.id)
    assert held.held_until == datetime.datetime(2026, 12, 2, 13, 0)
    assert (
        "sender_runs_per_hour reached by jane@acme.example (unproven) (3 of 3)" in held.held_reason
    )
    assert held.admitted_at is None
    assert "held" in delivered[3].reason
    assert Message.select().count() == 5  # nothing dropped
    assert Run.select().count() == 5


def test_a_held_senders_next_mail_waits_behind_it_even_after_the_window_reopens(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    clock = Clock(NOON)
    first, second = (
        ingest(
            mail("jane@acme.example", n), config=config, recipients=[sundae.address], clock=clock
        )[0]
        for n in range(2)
    )
    assert (first.run.status, second.run.status) == ("queued", "held")
    clock.advance(hours=1)  # the window reopened, but the release pass has not run yet
    (third,) = ingest(
        mail("jane@acme.example", 3), config=config, recipients=[sundae.address], clock=clock
    )
    assert third.run.status == "held"
    assert (
        "earlier mail from jane@acme.example (unproven) is held"
        in Run.get_by_id(third.run.id).held_reason
    )


def test_other_senders_are_not_held_by_one_senders_limit(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    clock = Clock(NOON)
    statuses = [
        ingest(mail(sender, n), config=config, recipients=[sundae.address], clock=clock)[
            0
        ].run.status
        for n, sender in enumerate(["a@acme.example", "a@acme.example", "b@acme.example"])
    ]
    assert statuses == ["queued", "held", "queued"]


def test_a_plus_tag_or_case_does_not_make_a_new_sender(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    clock = Clock(NOON)
    senders = ["jane@acme.example", "Jane+again@ACME.example"]
    statuses = [
        ingest(mail(s, n), config=config, recipients=[sundae.address], clock=clock)[0].run.status
        for n, s in enumerate(senders)
    ]
    assert statuses == ["queued", "held"]


def test_the_agents_hourly_limit_holds_every_sender(tmp_path, sundae):
    config = configured(tmp_path, agent_runs_per_hour=2)
    clock = Clock(NOON)
    runs = [
        ingest(
            mail(f"s{n}@acme.example", n), config=config, recipients=[sundae.address], clock=clock
        )[0].run
        for n in range(3)
    ]
    assert [r.status for r in runs] == ["queued", "queued", "held"]
    assert "agent_runs_per_hour reached by the agent" in Run.get_by_id(runs[2].id).held_reason


def test_an_agents_own_limit_overrides_the_installations_only_for_it(tmp_path, sundae):
    other = Agent.create(name="Cone", address="cone@thescoop.example")
    config = configured(
        tmp_path, sender_runs_per_hour=5, agents={"Sundae": AgentLimits(sender_runs_per_hour=1)}
    )
    clock = Clock(NOON)
    for_sundae = [
        ingest(mail("j@acme.example", n), config=config, recipients=[sundae.address], clock=clock)[
            0
        ].run.status
        for n in range(2)
    ]
    for_cone = [
        ingest(
            mail("j@acme.example", 10 + n, to=other.address),
            config=config,
            recipients=[other.address],
            clock=clock,
        )[0].run.status
        for n in range(2)
    ]
    assert for_sundae == ["queued", "held"]
    assert for_cone == ["queued", "queued"]


def test_zero_turns_a_limit_off(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=0)
    clock = Clock(NOON)
    statuses = {
        ingest(mail("j@acme.example", n), config=config, recipients=[sundae.address], clock=clock)[
            0
        ].run.status
        for n in range(30)
    }
    assert statuses == {"queued"}


def test_the_daily_limit_counts_across_hours_and_holds_until_midnight(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=2)
    clock = Clock(NOON)
    runs = []
    for n in range(3):
        runs.append(
            ingest(
                mail("j@acme.example", n), config=config, recipients=[sundae.address], clock=clock
            )[0].run
        )
        clock.advance(hours=2)
    assert [r.status for r in runs] == ["queued", "queued", "held"]
    assert Run.get_by_id(runs[2].id).held_until == datetime.datetime(2026, 12, 3, 0, 0)


def test_spending_is_held_against_the_agents_day_and_month_and_everyones_day(sundae):
    other = Agent.create(name="Cone", address="cone@thescoop.example")
    limits = LimitSettings(
        agent_tokens_per_day=1000, agent_tokens_per_month=1500, installation_tokens_per_day=1400
    )
    UsageDay.create(agent=sundae, day="2026-12-01", model="m", prompt_tokens=900)
    assert spending_limit_reached(sundae.id, NOON, limits.for_agent("Sundae")) is None
    UsageDay.create(agent=sundae, day="2026-12-02", model="m", prompt_tokens=600)
    reached = spending_limit_reached(sundae.id, NOON, limits.for_agent("Sundae"))
    assert reached is not None
    assert (reached.limit, reached.used) == ("agent_tokens_per_month", 1500)
    assert reached.until == datetime.datetime(2027, 1, 1)
    UsageDay.create(agent=other, day="2026-12-02", model="m", completion_tokens=900)
    reached = spending_limit_reached(other.id, NOON, limits.for_agent("Cone"))
    assert reached is not None
    assert (reached.limit, reached.used) == ("installation_tokens_per_day", 1500)


def test_money_limits_count_the_cost_kept_in_millionths(sundae):
    limits = LimitSettings(agent_cost_per_day=0.5)
    UsageDay.create(agent=sundae, day="2026-12-02", model="m", cost_micros=499_999)
    assert spending_limit_reached(sundae.id, NOON, limits.for_agent("Sundae")) is None
    UsageDay.create(agent=sundae, day="2026-12-02", model="n", cost_micros=1)
    reached = spending_limit_reached(sundae.id, NOON, limits.for_agent("Sundae"))
    assert reached is not None
    assert reached.limit == "agent_cost_per_day"
    assert "(0.5000 of 0.5000)" in reached.reason


def test_a_scheduled_run_is_held_by_spending_but_not_by_run_counts(tmp_path, sundae):
    config = configured(tmp_path, agent_runs_per_hour=1, agent_tokens_per_day=10)
    ingest(mail("j@acme.example", 1), config=config, recipients=[sundae.address], clock=Clock(NOON))
    limits = config.limits
    assert admission(sundae.id, "Sundae", "k@acme.example", NOON, limits) is not None
    assert admission(sundae.id, "Sundae", None, NOON, limits, count_runs=False) is None
    UsageDay.create(agent=sundae, day="2026-12-02", model="m", prompt_tokens=10)
    hold = admission(sundae.id, "Sundae", None, NOON, limits, count_runs=False)
    assert hold is not None
    assert hold.limit == "agent_tokens_per_day"


def test_behind_held_is_not_a_limit_and_says_so(tmp_path, sundae):
    config = configured(tmp_path, sender_runs_per_hour=1)
    clock = Clock(NOON)
    for n in range(2):
        ingest(mail("j@acme.example", n), config=config, recipients=[sundae.address], clock=clock)
    hold = admission(sundae.id, "Sundae", "unproven:j@acme.example", NOON, config.limits)
    assert hold is not None
    assert hold.limit == BEHIND_HELD


@pytest.mark.parametrize(
    ("kind", "start", "end"),
    [
        (HOUR, datetime.datetime(2026, 12, 31, 23), datetime.datetime(2027, 1, 1, 0)),
        (DAY, datetime.datetime(2026, 12, 31), datetime.datetime(2027, 1, 1)),
        (MONTH, datetime.datetime(2026, 12, 1), datetime.datetime(2027, 1, 1)),
    ],
)
def test_windows_are_fixed_stretches_of_utc_time(kind, start, end):
    moment = datetime.datetime(2026, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    assert window(kind, moment) == (start, end)
    berlin = moment.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    assert window(kind, berlin) == (start, end)


def test_a_forger_using_an_address_never_uses_up_what_that_address_proves_it_sends(
    tmp_path, sundae
):
    config = configured(tmp_path, sender_runs_per_hour=2)
    clock = Clock(NOON)
    forged = [
        ingest(
            mail("jane@acme.example", n), config=config, recipients=[sundae.address], clock=clock
        )[0].run
        for n in range(4)
    ]
    assert [r.status for r in forged] == ["queued", "queued", "held", "held"]
    signed = Verdict(
        True,
        "acme.example",
        "dkim",
        "pass",
        None,
        (),
        "acme.example",
        "signed",
        "jane@acme.example",
    )
    (real,) = ingest(
        mail("jane@acme.example", 9),
        config=config,
        recipients=[sundae.address],
        clock=clock,
        verdict=signed,
    )
    assert real.message.sender_authenticated
    assert real.run.status == "queued"
    assert Run.get_by_id(real.run.id).sender_key == "jane@acme.example"
    assert Run.get_by_id(forged[0].id).sender_key == "unproven:jane@acme.example"


def test_mail_stored_at_once_from_many_threads_is_held_at_exactly_the_limit(tmp_path, sundae):
    from concurrent.futures import ThreadPoolExecutor

    from protege.db import database

    config = configured(tmp_path, sender_runs_per_hour=10)

    def send(n: int) -> str:
        try:
            (delivered,) = ingest(
                mail("jane@acme.example", n),
                config=config,
                recipients=[sundae.address],
                clock=lambda: NOON,
            )
            return delivered.run.status
        finally:
            database.close()  # this pool thread's own connection

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(send, range(40)))
    assert statuses.count("queued") == 10
    assert statuses.count("held") == 30
    assert Message.select().count() == 40


def test_mail_to_two_agents_in_either_order_at_once_is_stored_without_a_deadlock(tmp_path, sundae):
    from concurrent.futures import ThreadPoolExecutor

    from protege.db import database

    cone = Agent.create(name="Cone", address="cone@thescoop.example")
    config = configured(tmp_path, sender_runs_per_hour=0, sender_runs_per_day=0)

    def send(n: int) -> int:
        order = [sundae.address, cone.address][:: 1 if n % 2 else -1]
        try:
            return len(
                ingest(
                    mail(f"s{n}@acme.example", n, to=", ".join(order)),
                    config=config,
                    recipients=order,
                    clock=lambda: NOON,
                )
            )
        finally:
            database.close()

    with ThreadPoolExecutor(4) as pool:
        stored = list(pool.map(send, range(40)))
    assert stored == [2] * 40
    assert Run.select().where(Run.agent == cone).count() == 40
    assert Run.select().where(Run.agent == sundae).count() == 40
