"""One ``repr`` for protege's value classes, so that attrs need not write one per class.

attrs writes and compiles the source of a class's methods when the class is made, and every
protege command pays for that at start-up for the classes it loads (about a quarter of a
millisecond per class for its ``repr`` alone). A repr is needed only when someone looks, so
these classes say ``repr=False`` and share this one instead.
"""

from __future__ import annotations

from typing import Any

import attrs


def fields_repr(self: Any) -> str:
    """``Name(field=value, ...)`` for an attrs instance, leaving out the fields declared
    with ``repr=False`` (secrets), as attrs' own repr would."""
    shown = []
    for field in attrs.fields(type(self)):
        if field.repr is False:
            continue
        value = getattr(self, field.name)
        shown.append(f"{field.name}={field.repr(value) if callable(field.repr) else repr(value)}")
    return f"{type(self).__name__}({', '.join(shown)})"
