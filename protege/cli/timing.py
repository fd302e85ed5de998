"""Times as the command line shows and reads them: with their time zone, always."""

from __future__ import annotations

import datetime
import re

from protege.errors import ProtegeError

_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def aware(stored: datetime.datetime | None) -> datetime.datetime | None:
    """A stored time (naive UTC) as an aware one."""
    return None if stored is None else stored.replace(tzinfo=datetime.UTC)


def iso(stored: datetime.datetime | None) -> str | None:
    """A stored time in ISO 8601 with its offset (``+00:00``), for JSON."""
    moment = aware(stored)
    return None if moment is None else moment.isoformat(timespec="seconds")


def local(stored: datetime.datetime | None) -> str:
    """A stored time in this machine's time zone, with its offset, for tables."""
    moment = aware(stored)
    return "" if moment is None else moment.astimezone().isoformat(sep=" ", timespec="seconds")


def seconds_between(start: datetime.datetime | None, end: datetime.datetime | None) -> float | None:
    """How long from ``start`` to ``end`` (stored times), or None when either is missing."""
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def duration(seconds: float | None) -> str:
    """``1.2s``, ``3m05s``, ``2h10m``; empty when unknown."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def since(value: str, now: datetime.datetime | None = None) -> datetime.datetime:
    """The stored (naive UTC) time ``value`` names: an age such as ``30m``, ``2h``, ``7d``,
    or an ISO date or time (in this machine's time zone unless it carries an offset)."""
    now = now or datetime.datetime.now(datetime.UTC)
    relative = _RELATIVE.match(value.strip())
    if relative:
        amount, unit = relative.groups()
        moment = now - datetime.timedelta(**{_UNITS[unit]: int(amount)})
    else:
        try:
            moment = datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ProtegeError(
                f"--since {value!r}: give an age (30m, 2h, 7d) or a date or time "
                "(2026-11-30, 2026-11-30T08:00, 2026-11-30T08:00+01:00)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.astimezone()  # the machine's zone, as tables show times
    return moment.astimezone(datetime.UTC).replace(tzinfo=None)
