"""Writing a run's audit trail: each step an append-only ``Event`` row, in order."""

from __future__ import annotations

import json
from typing import Any

from protege.db import database
from protege.models import Event, Run
from protege.models.base import utcnow

MODEL_REQUEST = "model_request"
MODEL_RESPONSE = "model_response"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
TOOL_REFUSED = "tool_refused"
BUDGET_EXHAUSTED = "budget_exhausted"
DELIVERY = "delivery"
ERROR = "error"

# Events are the hottest write of a run: one prepared statement beats building an insert.
_INSERT = (
    "INSERT INTO event (run_id, seq, kind, payload, created_at) VALUES ({p}, {p}, {p}, {p}, {p})"
)


class EventLog:
    """Appends events to one run, numbering them as they come."""

    def __init__(self, run: Run) -> None:
        self.run_id = run.id
        self.seq = 0
        if run.attempts > 1:  # a retried run continues its trail
            last = (
                Event.select(Event.seq).where(Event.run == run).order_by(Event.seq.desc()).first()
            )
            self.seq = 0 if last is None else last.seq

    def record(self, kind: str, **payload: Any) -> None:
        """Append one event of ``kind`` with ``payload`` (plain JSON data)."""
        self.seq += 1
        database.execute_sql(
            _INSERT.format(p=database.param),
            (
                self.run_id,
                self.seq,
                kind,
                json.dumps(payload, default=str, ensure_ascii=False),
                utcnow(),
            ),
        )
