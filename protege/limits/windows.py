"""The fixed windows of UTC time limits count in: the hour, the day and the month under way.

Fixed windows (not rolling ones) make "held until" a time an operator and a sender can be
told, and "once per window" a key a notice can be stored under. Times are naive UTC, as
protege stores them.
"""

from __future__ import annotations

import datetime

HOUR, DAY, MONTH = "hour", "day", "month"


def window(kind: str, now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    """The start and end of the ``kind`` window (``hour``, ``day``, ``month``) holding
    ``now`` (naive UTC, or aware, then read in UTC)."""
    now = naive_utc(now)
    if kind == HOUR:
        start = now.replace(minute=0, second=0, microsecond=0)
        return start, start + datetime.timedelta(hours=1)
    if kind == DAY:
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + datetime.timedelta(days=1)
    if kind == MONTH:
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = (start + datetime.timedelta(days=32)).replace(day=1)
        return start, following
    raise ValueError(f"no window {kind!r}: hour, day or month")


def naive_utc(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` as protege stores times: UTC, without a zone."""
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(datetime.UTC).replace(tzinfo=None)


def day_key(moment: datetime.datetime) -> str:
    """The UTC day ``moment`` falls on, as spending is kept under (``YYYY-MM-DD``)."""
    return naive_utc(moment).strftime("%Y-%m-%d")
