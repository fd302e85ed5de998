"""Telling people about holds: the held sender (``notify_held``) and the operators
(``alert_to``), each at most once per window."""

from __future__ import annotations

import datetime
from typing import Any

from protege.config import Config
from protege.limits.admission import Hold
from protege.models import Agent, Message


def tell_of_hold(
    app: Any, agent: Agent, message: Message, hold: Hold, now: datetime.datetime, config: Config
) -> None:
    """Tell the sender of ``message`` and the operators that its run is held, where the
    configuration asks for it and nobody was told for this window yet."""
