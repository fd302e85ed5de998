"""What a file is, from its bytes: the signatures read_attachment and the harness rely on."""

import codecs

import pytest

from protege.filetypes import as_text, sniff


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(8), "image/png"),
        (b"\xff\xd8\xff\xe0" + bytes(8), "image/jpeg"),
        (b"GIF89a" + bytes(8), "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"%PDF-1.7\n", "application/pdf"),
        (b"PK\x03\x04" + bytes(8), "application/zip"),
        (b"\x00\x00\x00\x20ftypisom", "video/mp4"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", "audio/wav"),
        (b"ID3\x04\x00", "audio/mpeg"),
        (b"\x7fELF\x02\x01", "application/x-executable"),
        (b"plain words", None),
        ("Crème".encode("utf-16"), None),  # a byte-order mark is no media signature
        (b"MZ", None),  # too short to call a program
    ],
)
def test_signatures(data, media_type):
    assert sniff(data) == media_type


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"order,total\r\n", "order,total\r\n"),
        ("Zoë".encode(), "Zoë"),
        (codecs.BOM_UTF8 + "Zoë".encode(), "Zoë"),
        ("Zoë\n".encode("utf-16"), "Zoë\n"),
        (codecs.BOM_UTF16_BE + "Zoë".encode("utf-16-be"), "Zoë"),
        ("Zoë".encode("utf-32"), "Zoë"),
        (b"", ""),
    ],
)
def test_text_is_decoded(data, text):
    assert as_text(data) == text


@pytest.mark.parametrize(
    "data",
    [
        b"nul\x00inside",
        b"\x1b[31mred",  # terminal escapes are not text to show a model
        b"\xff\xfe\x00",  # a UTF-16 mark with an odd number of bytes after it
        "café".encode("latin-1"),  # not UTF-8, and no mark saying otherwise
    ],
)
def test_what_is_not_text(data):
    assert as_text(data) is None
