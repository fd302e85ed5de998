"""Writing a run's audit trail: each step an append-only ``Event`` row, in order."""

from __future__ import annotations

import json
from typing import Any

from protege.models import Event, Run

MODEL_REQUEST = "model_request"
MODEL_RESPONSE = "model_response"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
TOOL_REFUSED = "tool_refused"
BUDGET_EXHAUSTED = "budget_exhausted"
DELIVERY = "delivery"
ERROR = "error"


class EventLog:
    """Appends events to one run, numbering them as they come."""

    def __init__(self, run: Run) -> None:
        self.run = run
        last = Event.select(Event.seq).where(Event.run == run).order_by(Event.seq.desc()).first()
        self.seq = 0 if last is None else last.seq

    def record(self, kind: str, **payload: Any) -> Event:
        """Append one event of ``kind`` with ``payload`` (plain JSON data)."""
        self.seq += 1
        return Event.create(
            run=self.run,
            seq=self.seq,
            kind=kind,
            payload_json=json.dumps(payload, default=str, ensure_ascii=False),
        )
