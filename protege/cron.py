"""Cron schedules in a time zone: validation, and the instants they fall due.

A schedule is a five-field cron expression (minute, hour, day of month, month, day of week,
with ranges, steps, lists, names, and the ``@daily``-style shorthands) read in an IANA time
zone. Daylight-saving changes are handled as cron users expect:

- a wall-clock time the clock skips (spring forward) falls due at the moment of the jump;
- a wall-clock time that happens twice (fall back) falls due once, the first time;
- a schedule that runs every hour follows real hours instead: nothing is made up for the
  skipped hour and the repeated hour runs again, so it is never two runs in one hour nor a
  gap of two.

Pure computation: no database, no clock of its own (callers pass the time).
"""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Iterator

import attrs
from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from protege.errors import ProtegeError

UTC = datetime.UTC
MAX_EXPRESSION_LENGTH = 200
# A backward DST change is at most a few hours: naive times that far ahead of "now" may
# still fall due at or before it.
_DST_MARGIN = datetime.timedelta(hours=3)
_SHORTHANDS = {
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
}


class ScheduleError(ProtegeError):
    """A cron expression or time zone protege cannot use; the message says why."""


def check_timezone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``); ``ScheduleError`` if unknown."""
    if not isinstance(name, str) or name not in _zone_names():
        raise ScheduleError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin or UTC"
        )
    return zoneinfo.ZoneInfo(name)


def _zone_names() -> set[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = set(zoneinfo.available_timezones()) | {"UTC"}
    return _ZONES


_ZONES: set[str] | None = None


def normalize_expression(expression: str) -> str:
    """``expression`` with its fields separated by single spaces, checked: five fields (or a
    shorthand such as ``@daily``) that match at least once; ``ScheduleError`` says what is
    wrong otherwise."""
    if not isinstance(expression, str):
        raise ScheduleError("a schedule must be text, such as '0 7 * * 1-5'")
    if len(expression) > MAX_EXPRESSION_LENGTH or not all(
        char.isascii() and (char.isprintable() or char == "\t") for char in expression
    ):
        raise ScheduleError(f"{expression!r} is not a cron expression (one line of ASCII)")
    text = " ".join(expression.split())
    if not text:
        raise ScheduleError("the schedule is empty: give five cron fields, such as '0 7 * * 1-5'")
    if text.startswith("@"):
        if text.lower() not in _SHORTHANDS:
            known = ", ".join(sorted(_SHORTHANDS))
            raise ScheduleError(f"unknown shorthand {text!r}: use one of {known}")
        text = text.lower()
    elif len(text.split()) != 5:
        raise ScheduleError(
            f"{text!r} has {len(text.split())} fields; a schedule has five: "
            "minute hour day-of-month month day-of-week (e.g. '0 7 * * 1-5')"
        )
    try:
        croniter(text, datetime.datetime(2000, 1, 1)).get_next(datetime.datetime)
    except CroniterBadDateError:
        raise ScheduleError(f"{text!r} never falls due (no such date)") from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as error:
        reason = " ".join(str(error).split()) or "not understood"
        raise ScheduleError(f"{text!r} is not a valid cron expression: {reason}") from None
    return text


@attrs.frozen
class Schedule:
    """A checked cron expression in a time zone, and the instants (aware, UTC) it falls due."""

    expression: str
    timezone: str = "UTC"
    zone: zoneinfo.ZoneInfo = attrs.field(init=False, repr=False, eq=False)
    every_hour: bool = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "expression", normalize_expression(self.expression))
        object.__setattr__(self, "zone", check_timezone(self.timezone))
        hours = croniter(self.expression).expanded[1]
        object.__setattr__(self, "every_hour", hours == ["*"] or len(set(hours)) == 24)

    def due_after(self, after: datetime.datetime) -> Iterator[datetime.datetime]:
        """The instants it falls due strictly after ``after``, in order, without end."""
        _require_aware(after)
        start = self._local(after) - _DST_MARGIN
        times = croniter(self.expression, start)
        last: datetime.datetime | None = None
        while True:
            for instant in self._instants(times.get_next(datetime.datetime)):
                if instant > after and (last is None or instant > last):
                    last = instant
                    yield instant

    def upcoming(self, after: datetime.datetime, count: int) -> list[datetime.datetime]:
        """The next ``count`` instants it falls due after ``after``."""
        found = []
        for instant in self.due_after(after):
            found.append(instant)
            if len(found) >= count:
                break
        return found

    def latest_due(
        self, now: datetime.datetime, since: datetime.datetime
    ) -> datetime.datetime | None:
        """The last instant it fell due at or before ``now`` and after ``since``, or None.

        However many due times passed since ``since``, this is one: missed runs are caught
        up once, not once each.
        """
        _require_aware(now)
        _require_aware(since)
        start = (self._local(now) + _DST_MARGIN).replace(microsecond=0)
        times = croniter(self.expression, start + datetime.timedelta(seconds=1))
        while True:
            naive = times.get_prev(datetime.datetime)
            for instant in reversed(self._instants(naive)):
                if instant <= now:
                    return instant if instant > since else None

    def local(self, instant: datetime.datetime) -> datetime.datetime:
        """``instant`` in the schedule's time zone."""
        return instant.astimezone(self.zone)

    def _local(self, instant: datetime.datetime) -> datetime.datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None)

    def _instants(self, naive: datetime.datetime) -> list[datetime.datetime]:
        """When the wall-clock time ``naive`` happens, as UTC instants (see the module)."""
        first = naive.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        second = naive.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        if first == second:
            return [first]
        if self._local(first) == naive:  # happens twice: the clock went back
            return [first, second] if self.every_hour else [first]
        if self.every_hour:  # skipped by the clock: that hour does not exist
            return []
        return [self._jump(second, first, naive)]

    def _jump(
        self, before: datetime.datetime, after: datetime.datetime, naive: datetime.datetime
    ) -> datetime.datetime:
        """The instant the clock jumped over ``naive``: the first one whose wall-clock time is
        past it, between ``before`` (still before the jump) and ``after``."""
        low, high = int(before.timestamp()), int(after.timestamp())
        while high - low > 1:
            middle = (low + high) // 2
            if self._local(datetime.datetime.fromtimestamp(middle, UTC)) > naive:
                high = middle
            else:
                low = middle
        return datetime.datetime.fromtimestamp(high, UTC)


def _require_aware(moment: datetime.datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("schedules compute with aware datetimes (a clock returning UTC)")
