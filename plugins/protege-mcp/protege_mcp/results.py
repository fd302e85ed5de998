"""What an MCP tool call gives back, as the protege ``Result`` the model is shown.

Everything an MCP server says is outside content: every result is untrusted, so the harness
fences it before the model reads it. Text is cut at ``max_chars`` (and says so, as
``web_fetch`` does); images become parts the model is shown as themselves; other binary
content is described, never dumped; ``structuredContent`` is data when it fits.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types

from protege import Part, Result, failure, success

# An error's text is a reason, not a document: it is cut shorter than a result's text.
MAX_REASON_CHARS = 2_000
# The longest URI or name a description of content repeats.
MAX_LABEL_CHARS = 300


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _label(value: str | None) -> str | None:
    return None if value is None else _cut(value, MAX_LABEL_CHARS)[0]


def _decoded(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


class _Reading:
    """The content blocks of one result, read in order into text, parts and descriptions."""

    def __init__(self, max_bytes: int) -> None:
        self.texts: list[str] = []
        self.parts: list[Part] = []
        self.described: list[dict[str, Any]] = []
        self.part_bytes = 0
        self.max_bytes = max_bytes

    def read(self, block: mcp_types.ContentBlock) -> None:
        if isinstance(block, mcp_types.TextContent):
            self.texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            self.image(block.data, block.mime_type, uri=None)
        elif isinstance(block, mcp_types.AudioContent):
            self.describe("audio", block.mime_type, len(block.data) * 3 // 4, "audio is not shown")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                self.texts.append(resource.text)
            elif (resource.mime_type or "").startswith("image/"):
                self.image(resource.blob, resource.mime_type or "", uri=resource.uri)
            else:
                self.describe(
                    "resource",
                    resource.mime_type,
                    len(resource.blob) * 3 // 4,
                    "binary content is not shown",
                    uri=_label(resource.uri),
                )
        elif isinstance(block, mcp_types.ResourceLink):
            self.described.append(
                {
                    "kind": "resource_link",
                    "uri": _label(block.uri),
                    "name": _label(block.name),
                    "media_type": _label(block.mime_type),
                    "shown": "a link to a resource of the server; its content is not shown",
                }
            )
        else:  # a kind of content a later protocol version adds
            self.describe(str(getattr(block, "type", "unknown")), None, None, "not shown")

    def describe(
        self,
        kind: str,
        media_type: str | None,
        size: int | None,
        shown: str,
        uri: str | None = None,
    ) -> None:
        about: dict[str, Any] = {"kind": _label(kind), "media_type": _label(media_type)}
        if uri is not None:
            about["uri"] = uri
        if size is not None:
            about["bytes"] = size
        about["shown"] = shown
        self.described.append(about)

    def image(self, data: str, media_type: str, uri: str | None) -> None:
        size = len(data) * 3 // 4
        if self.part_bytes + size > self.max_bytes:
            self.describe("image", media_type, size, "not shown: over the result's size limit", uri)
            return
        decoded = _decoded(data)
        if decoded is None:
            self.describe("image", media_type, size, "not shown: its data is not base64", uri)
            return
        try:
            part = Part.image(decoded)
        except ValueError as error:
            self.describe("image", media_type, len(decoded), f"not shown: {error}", uri)
            return
        self.part_bytes += len(decoded)
        self.parts.append(part)


def _structured(value: Any, max_chars: int) -> tuple[dict[str, Any], str | None]:
    """``value`` as data for the model, or a note saying why it was left out."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return {}, "the structured content is not JSON and was left out"
    if len(shown) > max_chars:
        return {}, (
            f"the structured content ({len(shown)} characters of JSON) is over the "
            f"{max_chars}-character limit and was left out"
        )
    return {"structured": value}, None


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def to_result(result: mcp_types.CallToolResult, *, max_chars: int, max_bytes: int) -> Result:
    """The ``Result`` for the model of one MCP tool call's ``result``, always untrusted.

    Text content (and the text of embedded resources) is joined into ``data["text"]``, cut
    at ``max_chars`` with ``truncated`` saying whether it was. Images become image parts,
    up to ``max_bytes`` of them; audio, binary resources and resource links are described
    in ``data["content"]`` (kind, type, size), never dumped. ``structuredContent`` is
    ``data["structured"]`` when its JSON fits in ``max_chars`` (else a note says it was
    left out); text that only repeats it as JSON is not repeated. A result the server
    marked ``isError`` is a failure whose reason is the server's text, cut shorter.
    """
    reading = _Reading(max_bytes)
    for block in result.content:
        reading.read(block)
    text = "\n".join(reading.texts)

    if result.is_error:
        reason, cut = _cut(text.strip(), min(max_chars, MAX_REASON_CHARS))
        if not reason:
            reason = "the tool reported an error without saying what"
        elif cut:
            reason += " (cut)"
        return failure(reason=f"the MCP server's tool failed: {reason}").untrusted()

    data: dict[str, Any] = {}
    notes: list[str] = []
    structured = result.structured_content
    if structured is not None:
        fitted, note = _structured(structured, max_chars)
        data.update(fitted)
        if note:
            notes.append(note)
    # Text that only repeats the structured content as JSON is not shown twice (unless
    # the structured content was too large, when the text, cut, is what can be shown).
    repeated = "structured" in data and _same_json(text, structured)
    if reading.texts and not repeated:
        shown, cut = _cut(text, max_chars)
        data["text"] = shown
        data["truncated"] = cut
        if cut:
            notes.append(f"the text was cut at {max_chars} of its {len(text)} characters")
    if reading.described:
        data["content"] = reading.described
    if reading.parts:
        count = len(reading.parts)
        data["shown"] = f"{count} image{'s' if count > 1 else ''} follow{'' if count > 1 else 's'}"
    if notes:
        data["notes"] = notes
    return success(parts=reading.parts, **data).untrusted()


ANNOTATIONS = {
    "read_only": "read_only_hint",
    "destructive": "destructive_hint",
    "idempotent": "idempotent_hint",
    "open_world": "open_world_hint",
}


def annotations_of(tool: mcp_types.Tool) -> dict[str, bool]:
    """The behaviour hints the server set on ``tool`` (``read_only``, ``destructive``,
    ``idempotent``, ``open_world``), leaving out those it did not set. Hints from a server,
    to show operators; never a reason to trust a tool."""
    hints = tool.annotations
    if hints is None:
        return {}
    found = {name: getattr(hints, field) for name, field in ANNOTATIONS.items()}
    return {name: bool(value) for name, value in found.items() if value is not None}
