"""What a tool gives back: success or failure, with data for the model and details for people."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs


class Trust(StrEnum):
    """Whether a result's content came from inside the system or from outside it."""

    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


def _reason_text(reason: object) -> str:
    if isinstance(reason, BaseException):
        message = str(reason)
        name = type(reason).__name__
        return f"{name}: {message}" if message else name
    return str(reason)


@attrs.frozen
class Result:
    """The outcome of one tool call.

    ``data`` is shown to the model as JSON; ``details`` is for logs and operators and never
    reaches the model; ``trust`` says whether the content came from outside (mail, files, the
    web), in which case the harness fences it before the model reads it.
    """

    ok: bool
    data: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    reason: str | None = None
    details: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    trust: Trust = attrs.field(default=Trust.TRUSTED, converter=Trust)

    def untrusted(self) -> Result:
        """This result, marked as carrying outside content."""
        return attrs.evolve(self, trust=Trust.UNTRUSTED)

    def with_details(self, **details: Any) -> Result:
        """This result with extra details for logs and operators (never shown to the model)."""
        return attrs.evolve(self, details={**self.details, **details})

    def for_model(self) -> dict[str, Any]:
        """The JSON object the model is shown for this result."""
        if self.ok:
            return {"ok": True, **self.data}
        return {"ok": False, "reason": self.reason, **self.data}


def success(**data: Any) -> Result:
    """A successful result carrying ``data`` for the model."""
    return Result(ok=True, data=data)


def failure(reason: str | BaseException, **data: Any) -> Result:
    """A failed result: ``reason`` (text or an exception) tells the model what went wrong."""
    return Result(ok=False, data=data, reason=_reason_text(reason))
