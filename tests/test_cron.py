"""Cron schedules: what is accepted, what is refused and why, and when they fall due."""

import datetime

import pytest

from protege.cron import Schedule, ScheduleError, check_timezone, normalize_expression

UTC = datetime.UTC


def at(*parts, zone="UTC"):
    return datetime.datetime(*parts, tzinfo=check_timezone(zone))


def local(schedule, instants):
    return [schedule.local(i).strftime("%Y-%m-%d %H:%M %Z") for i in instants]


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        ("0 7 * * 1-5", "0 7 * * 1-5"),
        ("  0   7 *  * mon-fri ", "0 7 * * mon-fri"),
        ("*/15 9-17 * jan-mar MON,FRI", "*/15 9-17 * jan-mar MON,FRI"),
        ("@daily", "@daily"),
        ("@Hourly", "@hourly"),
        ("@weekly", "@weekly"),
        ("0 0 1,15 * *", "0 0 1,15 * *"),
    ],
)
def test_five_fields_and_the_usual_extensions_are_accepted(written, kept):
    assert normalize_expression(written) == kept


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("", "the schedule is empty"),
        ("* * * *", "has 4 fields; a schedule has five"),
        ("0 0 7 * * 1-5", "has 6 fields; a schedule has five"),
        ("61 * * * *", "is not a valid cron expression"),
        ("0 25 * * *", "is not a valid cron expression"),
        ("0 7 * * funday", "is not a valid cron expression"),
        ("0 0 30 2 *", "never falls due"),
        ("@reboot", "unknown shorthand '@reboot'"),
        ("H * * * *", "is not a valid cron expression"),
        ("0 7 * * 1\n0 8 * * *", "is not a cron expression"),
        ("0 7 * * \uff11", "is not a cron expression"),
        ("0 " * 150, "is not a cron expression"),
    ],
)
def test_bad_schedules_are_refused_saying_why(written, reason):
    with pytest.raises(ScheduleError, match=reason):
        normalize_expression(written)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "", "europe/berlin"])
def test_unknown_time_zones_are_refused(zone):
    with pytest.raises(ScheduleError, match="unknown time zone"):
        Schedule("@daily", zone)


def test_weekday_mornings_in_the_schedules_time_zone():
    schedule = Schedule("0 7 * * 1-5", "Europe/Berlin")
    due = schedule.upcoming(at(2026, 1, 9, 12), 3)  # a Friday
    assert local(schedule, due) == [
        "2026-01-12 07:00 CET",
        "2026-01-13 07:00 CET",
        "2026-01-14 07:00 CET",
    ]
    assert due[0] == at(2026, 1, 12, 6)


def test_a_time_the_clock_skips_falls_due_once_when_it_jumps():
    # Berlin, 29 March 2026: at 02:00 the clocks go to 03:00, so 02:30 never happens.
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    due = schedule.upcoming(at(2026, 3, 27, 12), 4)
    assert local(schedule, due) == [
        "2026-03-28 02:30 CET",
        "2026-03-29 03:00 CEST",
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]


def test_a_time_that_happens_twice_falls_due_once():
    # Berlin, 25 October 2026: at 03:00 the clocks go back to 02:00; 02:30 happens twice.
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    due = schedule.upcoming(at(2026, 10, 23, 12), 3)
    assert local(schedule, due) == [
        "2026-10-24 02:30 CEST",
        "2026-10-25 02:30 CEST",
        "2026-10-26 02:30 CET",
    ]


def test_an_hourly_schedule_follows_real_hours_across_both_changes():
    schedule = Schedule("30 * * * *", "Europe/Berlin")
    spring = schedule.upcoming(at(2026, 3, 29, 0, 0), 3)
    assert [i.strftime("%H:%M") for i in spring] == ["00:30", "01:30", "02:30"]  # UTC: hourly
    assert local(schedule, spring)[1] == "2026-03-29 03:30 CEST"
    autumn = schedule.upcoming(at(2026, 10, 24, 23, 0), 4)
    assert [i.strftime("%H:%M") for i in autumn] == ["23:30", "00:30", "01:30", "02:30"]
    assert local(schedule, autumn)[1:3] == ["2026-10-25 02:30 CEST", "2026-10-25 02:30 CET"]


def test_due_times_across_a_change_in_new_york():
    # 8 March 2026 in New York: 02:00 EST becomes 03:00 EDT.
    schedule = Schedule("0 7 * * *", "America/New_York")
    due = schedule.upcoming(at(2026, 3, 7, 0), 3)
    assert [i.hour for i in due] == [12, 11, 11]  # 07:00 EST, then 07:00 EDT


def test_latest_due_after_downtime_is_the_last_one_only():
    schedule = Schedule("0 7 * * *", "Europe/Berlin")
    since = at(2026, 3, 1, 6)  # the run for 1 March, 07:00 Berlin, was queued
    now = at(2026, 3, 5, 12)  # four due times later
    assert schedule.latest_due(now, since) == at(2026, 3, 5, 6)
    assert schedule.latest_due(at(2026, 3, 5, 5, 59), since) == at(2026, 3, 4, 6)


def test_latest_due_is_none_until_the_next_due_time():
    schedule = Schedule("0 7 * * *", "UTC")
    since = at(2026, 3, 5, 7)
    assert schedule.latest_due(at(2026, 3, 6, 6, 59, 59), since) is None
    assert schedule.latest_due(at(2026, 3, 6, 7), since) == at(2026, 3, 6, 7)


def test_latest_due_on_the_day_the_clock_skips_the_time():
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    jump = at(2026, 3, 29, 1)  # 03:00 CEST
    assert schedule.latest_due(at(2026, 3, 29, 5), at(2026, 3, 28, 12)) == jump
    assert schedule.latest_due(at(2026, 3, 29, 5), jump) is None


def test_latest_due_on_the_day_the_clock_repeats_the_time():
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    first = at(2026, 10, 25, 0, 30)  # 02:30 CEST
    assert schedule.latest_due(at(2026, 10, 25, 1, 45), at(2026, 10, 24, 12)) == first
    assert schedule.latest_due(at(2026, 10, 25, 1, 45), first) is None  # 02:30 CET: not again


def test_schedules_need_an_aware_time():
    with pytest.raises(ValueError, match="aware"):
        Schedule("@daily").upcoming(datetime.datetime(2026, 1, 1), 1)
