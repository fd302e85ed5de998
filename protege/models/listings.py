"""What plugins recorded at the last sync about tools that live outside the process."""

from __future__ import annotations

import peewee

from protege.models.base import Record, utcnow


class ToolListing(Record):
    """One plugin's record under one key (``distribution`` normalized): JSON ``data`` the
    plugin wrote through the ``refresh_tools`` hook and reads back in ``register_tools``."""

    distribution = peewee.CharField(max_length=200)
    key = peewee.CharField(max_length=200)
    data = peewee.TextField()
    recorded_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "tool_listing"
        indexes = ((("distribution", "key"), True),)
