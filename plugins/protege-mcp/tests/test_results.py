"""An MCP tool's result as the model is shown it: untrusted text cut at its limit, images as
parts, other content described, structured content as data, errors as failures."""

import base64
import json
import struct
import zlib

import mcp_types as types

from protege import Trust
from protege_mcp.results import annotations_of, to_result


def png(width: int = 2, height: int = 2) -> bytes:
    """A small, valid RGB PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\0" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def call_result(*content, structured=None, error=False):
    return types.CallToolResult(
        content=list(content), structured_content=structured, is_error=error
    )


def text(value):
    return types.TextContent(text=value)


def test_text_is_untrusted_data_joined():
    result = to_result(call_result(text("one"), text("two")), max_chars=100, max_bytes=1000)
    assert result.ok
    assert result.trust is Trust.UNTRUSTED
    assert result.data == {"text": "one\ntwo", "truncated": False}


def test_long_text_is_cut_and_says_so():
    result = to_result(call_result(text("x" * 500)), max_chars=100, max_bytes=1000)
    assert result.data["text"] == "x" * 100
    assert result.data["truncated"] is True
    assert result.data["notes"] == ["the text was cut at 100 of its 500 characters"]


def test_images_are_parts_the_model_is_shown():
    image = types.ImageContent(data=base64.b64encode(png()).decode(), mime_type="image/png")
    result = to_result(call_result(text("a chart"), image), max_chars=100, max_bytes=10_000)
    assert result.trust is Trust.UNTRUSTED
    assert [part.media_type for part in result.parts] == ["image/png"]
    assert result.parts[0].data == png()
    assert result.data["shown"] == "1 image follows"


def test_images_past_the_byte_limit_or_not_images_are_described_not_shown():
    big = types.ImageContent(data=base64.b64encode(png(64, 64)).decode(), mime_type="image/png")
    fake = types.ImageContent(
        data=base64.b64encode(b"not a png" * 3).decode(), mime_type="image/png"
    )
    garbled = types.ImageContent(data="@@not base64@@", mime_type="image/png")
    result = to_result(call_result(big, fake, garbled), max_chars=100, max_bytes=100)
    assert result.parts == ()
    shown = [item["shown"] for item in result.data["content"]]
    assert shown[0] == "not shown: over the result's size limit"
    assert shown[1].startswith("not shown: an image part must be")
    assert shown[2] == "not shown: its data is not base64"


def test_binary_resources_audio_and_links_are_described_never_dumped():
    blob = base64.b64encode(b"\0\1\2" * 100).decode()
    result = to_result(
        call_result(
            types.AudioContent(data=blob, mime_type="audio/wav"),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="file:///data.bin", mime_type="application/octet-stream", blob=blob
                )
            ),
            types.EmbeddedResource(
                resource=types.TextResourceContents(uri="file:///notes.txt", text="the notes")
            ),
            types.ResourceLink(uri="file:///big.csv", name="big.csv", mime_type="text/csv"),
        ),
        max_chars=1000,
        max_bytes=10_000,
    )
    assert result.data["text"] == "the notes"
    assert blob not in json.dumps(result.data)
    assert [item["kind"] for item in result.data["content"]] == [
        "audio",
        "resource",
        "resource_link",
    ]
    assert result.data["content"][1]["uri"] == "file:///data.bin"
    assert result.data["content"][1]["bytes"] == 300


def test_structured_content_is_data_and_its_json_text_is_not_repeated():
    value = {"temperature": 21.5, "unit": "C"}
    result = to_result(
        call_result(text(json.dumps(value)), structured=value), max_chars=1000, max_bytes=1000
    )
    assert result.data == {"structured": value}
    other = to_result(call_result(text("Mild."), structured=value), max_chars=1000, max_bytes=1000)
    assert other.data == {"structured": value, "text": "Mild.", "truncated": False}


def test_structured_content_too_large_is_left_out_saying_so():
    value = {"rows": ["x" * 50] * 10}
    result = to_result(
        call_result(text(json.dumps(value)), structured=value), max_chars=200, max_bytes=1000
    )
    assert "structured" not in result.data
    assert result.data["truncated"] is True
    assert "is over the 200-character limit and was left out" in result.data["notes"][0]


def test_an_error_is_a_failure_with_the_servers_text_capped():
    result = to_result(call_result(text("no such order"), error=True), max_chars=100, max_bytes=10)
    assert not result.ok
    assert result.trust is Trust.UNTRUSTED
    assert result.reason == "the MCP server's tool failed: no such order"
    long = to_result(call_result(text("e" * 5000), error=True), max_chars=100, max_bytes=10)
    assert long.reason is not None
    assert long.reason.endswith("e" * 100 + " (cut)")
    silent = to_result(call_result(error=True), max_chars=100, max_bytes=10)
    assert (
        silent.reason
        == "the MCP server's tool failed: the tool reported an error without saying what"
    )


def test_annotations_are_the_hints_the_server_set():
    tool = types.Tool(
        name="drop_table",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    assert annotations_of(tool) == {"read_only": False, "destructive": True}
    plain = types.Tool(name="echo", input_schema={"type": "object"})
    assert annotations_of(plain) == {}
    everything = types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    assert annotations_of(plain.model_copy(update={"annotations": everything})) == {
        "read_only": True,
        "destructive": False,
        "idempotent": True,
        "open_world": False,
    }
