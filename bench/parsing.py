"""How much reading the most hostile mail shapes costs against reading a plain 100 KiB mail.

Each shape fills the header block up to the limit (100 KiB) with what the standard library's
parsers are slowest on: comments, commas, quotes, encoded-words, nested multiparts. Times
``check_header_block`` plus ``parse`` (what the gateway does before storing), and prints the
median of each shape as a ratio to the baseline, measured in the same run. The claim in the
README is that no shape costs more than 100x a plain mail of the same size (under a tenth of
a second), where the unbounded parser took from seconds to minutes.

    .venv/bin/python bench/parsing.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from protege.config import MailSettings
from protege.gateway.parse import MailRejected, check_header_block, parse

LIMITS = MailSettings()
ROOM = LIMITS.max_header_bytes - 300


def _mail(header: bytes, body: bytes = b"Hello.\r\n") -> bytes:
    return (
        b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\n"
        + header
        + b"\r\n\r\n"
        + body
    )


SHAPES = {
    "commas in Cc": _mail(b"Cc: " + b"a," * (ROOM // 2)),
    "comments in Cc": _mail(b"Cc: " + b"(a)" * (ROOM // 3)),
    "quoted names in Cc": _mail(b"Cc: " + b'"a" <b>,' * (ROOM // 8)),
    "groups in To": _mail(b"Cc: " + b"g:a;," * (ROOM // 5)),
    "encoded-words in Subject": _mail(b"Subject: " + b"=?utf-8?q?a?=" * (ROOM // 13)),
    "comments in Content-Type": _mail(b"Content-Type: text/plain; " + b"(a)" * (ROOM // 3)),
    "References": _mail(b"References: " + b"<1@x> " * (ROOM // 6)),
    "nested multiparts": _mail(
        b'Content-Type: multipart/mixed; boundary="b"',
        b'--b\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n' * 2_000,
    ),
}
BASELINE = _mail(b"Subject: plain", b"Plain words of a plain mail.\r\n" * (ROOM // 30))


def _seconds(raw: bytes) -> float:
    started = time.perf_counter()
    try:
        check_header_block(raw, LIMITS)
        parse(raw, LIMITS)
    except MailRejected:
        pass
    return time.perf_counter() - started


def main() -> None:
    """Print each shape's median cost as a ratio to the baseline's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    baseline = statistics.median(_seconds(BASELINE) for _ in range(rounds))
    print(f"baseline (plain mail, {len(BASELINE)} bytes): {baseline * 1000:.2f} ms")
    for name, raw in SHAPES.items():
        cost = statistics.median(_seconds(raw) for _ in range(rounds))
        print(f"{name:28s} {cost * 1000:8.2f} ms  {cost / baseline:6.1f}x")


if __name__ == "__main__":
    main()
