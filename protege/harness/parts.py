"""Files shown to the model as themselves: images and PDFs, as Chat Completions content parts.

A tool message cannot carry such parts, so the files a turn's tools gave back follow the
turn's tool messages in one user message. Every file shown is fenced as untrusted, counted
against the run's cap (``[runs]``), and sent only in a form the model accepts (``[model]
input``); whatever is left out is named in its place, with the reason.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import attrs

from protege.config import ModelSettings, RunSettings
from protege.harness.fence import Fence
from protege.result import IMAGE, Part

_KIND_NAMES = {IMAGE: "images", "pdf": "PDFs"}


class PartBudget:
    """How many files, and bytes of them, one run may still show the model."""

    def __init__(self, model: ModelSettings, limits: RunSettings) -> None:
        self.model = model
        self.limits = limits
        self.count = 0
        self.bytes = 0

    def admit(self, part: Part) -> str | None:
        """Take ``part`` out of the budget; or say why it cannot be shown (then nothing is
        taken)."""
        if not self.model.accepts(part.kind):
            return (
                f"the model cannot read {_KIND_NAMES[part.kind]} (its [model] input is "
                f"{', '.join(self.model.input)})"
            )
        if self.count + 1 > self.limits.max_parts_per_run:
            return (
                f"a run shows the model at most {self.limits.max_parts_per_run} files "
                "(max_parts_per_run in [runs])"
            )
        if self.bytes + len(part.data) > self.limits.max_part_bytes_per_run:
            return (
                f"a run shows the model at most {self.limits.max_part_bytes_per_run} bytes of "
                f"files (max_part_bytes_per_run in [runs]); {self.bytes} are used and this "
                f"file is {len(part.data)}"
            )
        self.count += 1
        self.bytes += len(part.data)
        return None


def content_part(part: Part) -> dict[str, Any]:
    """``part`` in the form the Chat Completions API takes: an image part, or a file part."""
    url = f"data:{part.media_type};base64,{base64.b64encode(part.data).decode('ascii')}"
    if part.kind == IMAGE:
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "file", "file": {"filename": part.filename or "document.pdf", "file_data": url}}


@attrs.frozen
class Shown:
    """A file to show: its label inside the fence (which may name it: the name came from
    outside), the words naming it outside the fence (only protege's own), and the part."""

    label: str
    ours: str
    part: Part


def fenced_parts(
    files: Sequence[Shown], budget: PartBudget, fence: Fence, source: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The content parts showing ``files`` inside one fence, and a line for each file left
    out (in protege's own words). No parts at all when every file is left out."""
    shown: list[dict[str, Any]] = []
    left_out: list[str] = []
    for file in files:
        label, part = file.label, file.part
        refused = budget.admit(part)
        if refused is not None:
            left_out.append(f"{file.ours} was not shown: {refused}")
            continue
        shown.append({"type": "text", "text": fence.neutralise(label)})
        shown.append(content_part(part))
    if not shown:
        return [], left_out
    return [
        {"type": "text", "text": fence.opening(source)},
        *shown,
        {"type": "text", "text": fence.closing()},
    ], left_out
