"""What a file is, read from its first bytes rather than from the type its sender declared."""

from __future__ import annotations

import codecs
import re
import struct
import zlib

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
PDF_TYPE = "application/pdf"

# (prefix, offset, media type): the signatures of the formats protege tells apart.
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, PDF_TYPE),
    (b"PK\x03\x04", 0, "application/zip"),
    (b"PK\x05\x06", 0, "application/zip"),
    (b"\x1f\x8b", 0, "application/gzip"),
    (b"7z\xbc\xaf\x27\x1c", 0, "application/x-7z-compressed"),
    (b"Rar!\x1a\x07", 0, "application/vnd.rar"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", 0, "application/x-ole-storage"),
    (b"MZ", 0, "application/x-msdownload"),
    (b"\x7fELF", 0, "application/x-executable"),
    (b"\x1aE\xdf\xa3", 0, "video/webm"),
    (b"ftyp", 4, "video/mp4"),
    (b"OggS", 0, "audio/ogg"),
    (b"fLaC", 0, "audio/flac"),
    (b"ID3", 0, "audio/mpeg"),
    (b"BM", 0, "image/bmp"),
    (b"II*\x00", 0, "image/tiff"),
    (b"MM\x00*", 0, "image/tiff"),
)
_RIFF = {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}


def sniff(data: bytes) -> str | None:
    """The media type ``data`` is by its signature, or None when no known signature fits
    (plain text has none)."""
    if data[:4] == b"RIFF" and data[8:12] in _RIFF:
        return _RIFF[data[8:12]]
    for prefix, offset, media_type in _SIGNATURES:
        if data[offset : offset + len(prefix)] == prefix:
            if prefix == b"MZ" and len(data) < 64:
                continue  # two letters alone are too weak a sign of a program
            return media_type
    return None


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")  # all but tab and line breaks


def as_text(data: bytes) -> str | None:
    """``data`` decoded as text (UTF-8, or UTF-16/32 with a byte-order mark), or None when it
    is not text: it does not decode, or holds NUL or other control characters."""
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return None
    return None if _CONTROLS.search(text) else text


def malformed(data: bytes, media_type: str) -> str | None:
    """Why ``data`` is not a whole, still image or PDF of ``media_type`` that a model's API
    would accept, or None when it looks like one. Only the structure is checked (header,
    sizes, end marker, frames), not every byte: enough that a file which merely starts with
    a signature is not sent as that file."""
    check = _STRUCTURE.get(media_type)
    if check is None:
        return f"{media_type} is not an image or PDF format shown to models"
    try:
        return check(data)
    except (IndexError, ValueError, struct.error):
        return "its structure is broken"


def _png(data: bytes) -> str | None:
    if len(data) < 45 or data[12:16] != b"IHDR" or struct.unpack(">I", data[8:12])[0] != 13:
        return "it has no PNG header"
    width, height = struct.unpack(">II", data[16:24])
    if not (width and height) or zlib.crc32(data[12:29]) != struct.unpack(">I", data[29:33])[0]:
        return "its PNG header is damaged"
    if data[-12:-8] != b"\x00\x00\x00\x00" or data[-8:-4] != b"IEND":
        return "it is cut short (no PNG end)"
    if b"acTL" in data[33 : data.find(b"IDAT") if b"IDAT" in data else len(data)]:
        return "it is animated"
    return None


def _jpeg(data: bytes) -> str | None:
    if not data.endswith(b"\xff\xd9"):
        return "it is cut short (no JPEG end)"
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return "its JPEG segments are damaged"
        marker = data[position + 1]
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return None if height and width else "its JPEG frame has no size"
        position += 2 + struct.unpack(">H", data[position + 2 : position + 4])[0]
    return "it has no JPEG frame"


def _gif(data: bytes) -> str | None:
    width, height, flags = struct.unpack("<HHB", data[6:11])
    if not (width and height):
        return "its GIF screen has no size"
    position = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    images = 0
    while True:
        block = data[position]
        if block == 0x3B:  # the trailer
            return None if images == 1 else ("it is animated" if images else "it has no image")
        if block == 0x21:  # an extension: its label, then sub-blocks
            position = _gif_sub_blocks(data, position + 2)
        elif block == 0x2C:  # an image: its descriptor, a local colour table, the data
            images += 1
            local = data[position + 9]
            position += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
            position = _gif_sub_blocks(data, position + 1)
        else:
            return "its GIF blocks are damaged"


def _gif_sub_blocks(data: bytes, position: int) -> int:
    while data[position]:
        position += data[position] + 1
    return position + 1


def _webp(data: bytes) -> str | None:
    if struct.unpack("<I", data[4:8])[0] + 8 != len(data) + (len(data) % 2):
        return "its size does not match (cut short or padded)"
    chunk = data[12:16]
    if chunk not in (b"VP8 ", b"VP8L", b"VP8X"):
        return "it has no WebP image"
    if chunk == b"VP8X" and data[20] & 0x02:
        return "it is animated"
    return None


def _pdf(data: bytes) -> str | None:
    if b"%%EOF" not in data[-1024:]:
        return "it is cut short (no PDF end)"
    return None


_JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STRUCTURE = {
    "image/png": _png,
    "image/jpeg": _jpeg,
    "image/gif": _gif,
    "image/webp": _webp,
    PDF_TYPE: _pdf,
}
