"""Discovery reads a plugin's name and version from the header lines of its METADATA when
they are plain, to exactly what ``importlib.metadata`` parses, and leaves the rest to it."""

import importlib.metadata
import random
from pathlib import Path

from protege.plugins import _name_and_version

CASES = 2000
NAMES = ["bench-plugin", "Protege_Web", "zo\u00eb-tools", "a.b", "x", ""]
VERSIONS = ["1.0", "0.1.0.dev1", "2!1.0+local", "1.0 ", ""]
OTHER_HEADERS = [
    "Summary: Looks records up",
    "Summary: folded\n  onto two lines",
    "Classifier: Programming Language :: Python :: 3",
    "Requires-Dist: httpx>=0.27",
    "Description: the old way\n        |   more of it\n        |",
    "Keywords: a,b",
    "X-Odd:no-space",
    "Name : spaced",  # not a header line: the email parser ends the header block there
    "   continuation",
    ":no name",
    "From somewhere",
    "Form\x0cfeed: a page break",
]
BODIES = ["", "\n", "\n\n", "\n\nA body.\nName: not-a-header\n", "\n\n\nBody\n\nmore\n"]


class _Counted(importlib.metadata.PathDistribution):
    """A distribution counting how often its METADATA is parsed whole."""

    parsed = 0

    @property
    def metadata(self):  # type: ignore[override]
        type(self).parsed += 1
        return super().metadata


def _line(rng: random.Random, key: str, value: str) -> str:
    spelled = rng.choice([key, key, key, key.lower(), key.upper()])
    space = rng.choice([": ", ": ", ":", ":  ", ": \t"])
    return f"{spelled}{space}{value}{rng.choice(['', '', '', ' ', chr(9)])}"


def _metadata(rng: random.Random, plain: bool) -> str:
    """A METADATA file; ``plain`` ones are as wheels write them."""
    if plain:
        lines = [
            "Metadata-Version: 2.1",
            f"Name: {rng.choice(NAMES[:-1])}",
            f"Version: {rng.choice(VERSIONS[:-1]).strip()}",
            *rng.sample(OTHER_HEADERS[:4], rng.randint(0, 3)),
        ]
        return "\n".join(lines) + rng.choice(BODIES[1:])
    lines = ["Metadata-Version: 2.1"]
    lines += [rng.choice(OTHER_HEADERS) for _ in range(rng.randint(0, 3))]
    for key, values in (("Name", NAMES), ("Version", VERSIONS)):
        for _ in range(rng.choice([0, 1, 1, 1, 1, 2])):
            lines.insert(rng.randint(1, len(lines)), _line(rng, key, rng.choice(values)))
    text = "\n".join(lines) + rng.choice(BODIES)
    return text.replace("\n", "\r\n") if rng.random() < 0.15 else text


def _distribution(folder: Path, n: int, text: str) -> _Counted:
    info = folder / f"plugin_{n}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(text.encode())
    return _Counted(info)


def _by_importlib(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    return dist.metadata["Name"] or "", dist.version


def test_the_name_and_version_are_what_importlib_metadata_parses_from_any_metadata(tmp_path):
    rng = random.Random(20261202)
    direct = 0
    for n in range(CASES):
        text = _metadata(rng, plain=rng.random() < 0.3)
        dist = _distribution(tmp_path, n, text)
        _Counted.parsed = 0
        read = _name_and_version(dist)
        direct += _Counted.parsed == 0

        assert read == _by_importlib(dist), text
    # The corpus has to reach both ways of reading for the comparison to mean anything.
    assert CASES // 4 < direct < CASES * 3 // 4


def test_plain_metadata_is_read_without_parsing_it_whole(tmp_path):
    rng = random.Random(5322)
    _Counted.parsed = 0
    for n in range(CASES // 10):
        dist = _distribution(tmp_path, n, _metadata(rng, plain=True))
        _name_and_version(dist)

    assert _Counted.parsed == 0


def test_metadata_that_is_not_plain_is_left_to_importlib_metadata(tmp_path):
    texts = [
        "Metadata-Version: 2.1\nName: folded\n  name\nVersion: 1.0\n",
        "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 1.0\r\n",
        "Metadata-Version: 2.1\nName : spaced\nName: later\nVersion: 1.0\n",
        "Metadata-Version: 2.1\nName: no-version\n\nVersion: 1.0\n",
    ]
    for n, text in enumerate(texts):
        _Counted.parsed = 0
        dist = _distribution(tmp_path, n, text)

        assert _name_and_version(dist) == _by_importlib(dist)
        assert _Counted.parsed > 0, text
