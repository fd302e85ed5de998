"""What a tool gives back: success or failure, with data for the model and details for people."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from protege.filetypes import IMAGE_TYPES, PDF_TYPE, malformed, sniff


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


IMAGE = "image"
PDF = "pdf"


@attrs.frozen
class Part:
    """A file a result shows the model as itself rather than as text: an image (PNG, JPEG,
    GIF or WebP) or a PDF. Make one with ``Part.image(data)`` or ``Part.pdf(data)``; the
    kind is checked against the bytes, so a part is never something other than it says."""

    kind: str = attrs.field(validator=attrs.validators.in_((IMAGE, PDF)))
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    media_type: str
    filename: str = ""

    def __attrs_post_init__(self) -> None:
        found = sniff(self.data)
        if self.kind == IMAGE and found not in IMAGE_TYPES:
            raise ValueError("an image part must be PNG, JPEG, GIF or WebP data")
        if self.kind == PDF and found != PDF_TYPE:
            raise ValueError("a PDF part must be PDF data")
        if self.media_type != found:
            raise ValueError(f"the part's data is {found}, not {self.media_type}")
        problem = malformed(self.data, found)
        if problem is not None:  # a model's API refuses it, and the run would fail
            raise ValueError(f"the {self.kind} cannot be shown: {problem}")

    @classmethod
    def image(cls, data: bytes, filename: str = "") -> Part:
        """An image to show the model; ``ValueError`` unless ``data`` is PNG, JPEG, GIF or
        WebP."""
        data = bytes(data)
        return cls(IMAGE, data, sniff(data) or "application/octet-stream", filename)

    @classmethod
    def pdf(cls, data: bytes, filename: str = "document.pdf") -> Part:
        """A PDF to show the model; ``ValueError`` unless ``data`` is a PDF."""
        return cls(PDF, bytes(data), PDF_TYPE, filename)

    def describe(self) -> dict[str, Any]:
        """What the part is, without its bytes (for the audit trail and the model's text)."""
        return {
            "kind": self.kind,
            "media_type": self.media_type,
            "filename": self.filename,
            "bytes": len(self.data),
        }


def _parts(value: Any) -> tuple[Part, ...]:
    parts = tuple(value or ())
    if not all(isinstance(part, Part) for part in parts):
        raise TypeError("parts must be Part objects (Part.image(...) or Part.pdf(...))")
    return parts


@attrs.frozen
class Result:
    """The outcome of one tool call.

    ``data`` is shown to the model as JSON; ``details`` is for logs and operators and never
    reaches the model; ``trust`` says whether the content came from outside (mail, files, the
    web), in which case the harness fences it before the model reads it. ``parts`` are
    files (images, PDFs) the model is shown as themselves, after the JSON, when its
    ``[model] input`` accepts them.
    """

    ok: bool
    data: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    reason: str | None = None
    details: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    trust: Trust = attrs.field(default=Trust.TRUSTED, converter=Trust)
    parts: tuple[Part, ...] = attrs.field(factory=tuple, converter=_parts)

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


def success(*, parts: Any = (), **data: Any) -> Result:
    """A successful result carrying ``data`` for the model, and ``parts`` (``Part``
    objects) to show it as files."""
    return Result(ok=True, data=data, parts=parts)


def failure(reason: str | BaseException, **data: Any) -> Result:
    """A failed result: ``reason`` (text or an exception) tells the model what went wrong."""
    return Result(ok=False, data=data, reason=_reason_text(reason))
