"""What a file is, read from its first bytes rather than from the type its sender declared."""

from __future__ import annotations

import codecs
import re

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
