"""protege's own prompt section: the current date and time, in the agent's time zone.

An internal plugin (see ``protege.plugins.INTERNAL_PLUGINS``): it implements the
``prompt_sections`` hook as any plugin would, so a plugin may move its section with
``tryfirst``/``trylast`` or leave it out with a host resolver named ``current_time``.

Agents have no time zone of their own: a scheduled run tells the time in its
responsibility's zone (the one its schedule and due time are written in), any other run in
the installation's ``[runs] timezone`` (UTC unless set).
"""

from __future__ import annotations

import datetime
import zoneinfo
from typing import Any

from protege.context import RunContext
from protege.hookspecs import hookimpl
from protege.sections import PromptSection

SECTION_NAME = "current_time"


def zone_of(context: RunContext) -> str:
    """The IANA time zone the run ``context`` tells the time in."""
    if context.responsibility is not None and context.responsibility.timezone:
        return str(context.responsibility.timezone)
    return context.config.runs.timezone


def describe(now: datetime.datetime, zone: str) -> str:
    """The section's text for the aware time ``now`` in ``zone``."""
    offset = now.strftime("%z")
    return (
        f"It is {now:%A %d %B %Y, %H:%M} in {zone} (UTC{offset[:3]}:{offset[3:]}) "
        "as this run starts."
    )


@hookimpl
def prompt_sections(app: Any, context: RunContext) -> PromptSection:
    """The current date and time, in the run's time zone."""
    zone = zone_of(context)
    now = datetime.datetime.now(zoneinfo.ZoneInfo(zone))
    return PromptSection(SECTION_NAME, describe(now, zone))
