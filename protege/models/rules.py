"""Allow/deny address rules: on a grant (the sender gate) and on an agent (who may reach it)."""

from __future__ import annotations

from typing import Any

import peewee

from protege.access import RuleKind, normalize_pattern
from protege.errors import ProtegeError
from protege.models.base import Record


class RuleRecord(Record):
    """An allow or deny rule; its pattern is checked and normalised when saved."""

    kind = peewee.CharField(max_length=5)
    pattern = peewee.CharField(max_length=320)

    def save(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self.kind = RuleKind(self.kind).value
        except ValueError:
            raise ProtegeError(f"rule kind must be allow or deny, not {self.kind!r}") from None
        self.pattern = normalize_pattern(self.pattern)
        return super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.kind} {self.pattern}"
