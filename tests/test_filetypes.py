"""Files are told apart by their bytes, and a file shown to a model must be whole and still."""

from pathlib import Path

import pytest

from protege import Part
from protege.filetypes import malformed, sniff

IMAGES = Path(__file__).parent / "fixtures" / "images"  # made once with Pillow


@pytest.mark.parametrize("name", ["still.png", "still.jpg", "still.gif", "still.webp"])
def test_a_whole_still_image_may_be_shown(name):
    data = (IMAGES / name).read_bytes()
    assert malformed(data, sniff(data)) is None
    assert Part.image(data).media_type == sniff(data)


@pytest.mark.parametrize("name", ["moving.png", "moving.gif", "moving.webp"])
def test_an_animated_image_is_not_shown(name):
    data = (IMAGES / name).read_bytes()
    assert malformed(data, sniff(data)) == "it is animated"
    with pytest.raises(ValueError, match="cannot be shown: it is animated"):
        Part.image(data)


@pytest.mark.parametrize("name", ["still.png", "still.jpg", "still.gif", "still.webp"])
def test_an_image_cut_short_is_not_shown(name):
    data = (IMAGES / name).read_bytes()[:-10]
    assert malformed(data, sniff(data)) is not None


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n" + b"junk" * 20,
        b"GIF89a" + b"\x00" * 50,
        b"\xff\xd8\xff" + b"\x00" * 40,
        b"RIFF\x10\x00\x00\x00WEBPjunk",
        b"%PDF-1.7 and then nothing",
    ],
)
def test_bytes_that_only_start_like_a_file_are_not_that_file(data):
    assert malformed(data, sniff(data)) is not None
    with pytest.raises(ValueError, match="cannot be shown"):
        Part.pdf(data) if data.startswith(b"%PDF") else Part.image(data)
