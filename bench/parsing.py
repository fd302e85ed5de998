"""How much reading the most hostile shapes of mail costs against a plain mail of the same size.

Each shape stays inside the limits protege accepts (25 MiB a message, a 100 KiB header
block, 1,000 MIME parts, a million lines) and is filled with what the standard library's
parsers are slowest on: comments, commas, quotes and encoded-words in headers, parameters
and RFC 2231 names in part headers, many and nested parts, HTML tags. For each shape the
script times ``check_header_block`` plus ``parse`` (what the gateway does before storing),
and the same for a plain text mail of the same size, in the same run, and prints the median
of each and their ratio. A shape that protege refuses (552, over a limit) is shown so; most are
refused before parsing, which costs next to nothing.

The README's claim: every shape is read (or refused) in under half a second, and no header
shape costs more than 50x a plain mail of its size. Unbounded, some of these shapes took
from seconds to minutes.

    .venv/bin/python bench/parsing.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from protege.config import MailSettings
from protege.gateway.parse import MailRejected, check_header_block, parse

LIMITS = MailSettings()
ROOM = LIMITS.max_header_bytes - 300
HEAD = b"From: Jane <jane@acme.com>\r\nTo: sundae@thescoop.example\r\nMessage-ID: <b@acme.com>\r\n"


def _mail(header: bytes, body: bytes = b"Hello.\r\n") -> bytes:
    return HEAD + header + b"\r\n\r\n" + body


def _parts(part: bytes, count: int) -> bytes:
    body = b"".join(b"--b\r\n" + part + b"\r\n" for _ in range(count)) + b"--b--\r\n"
    return _mail(b'Content-Type: multipart/mixed; boundary="b"', body)


def _params(size: int) -> bytes:
    return b"; ".join(b"a%d=b" % n for n in range(size // 6))


SHAPES = {
    "commas in Cc": _mail(b"Cc: " + b"a," * (ROOM // 2)),
    "comments in Cc": _mail(b"Cc: " + b"(a)" * (ROOM // 3)),
    "quoted names in Cc": _mail(b"Cc: " + b'"a" <b>,' * (ROOM // 8)),
    "groups in Cc": _mail(b"Cc: " + b"g:a;," * (ROOM // 5)),
    "encoded-words in Subject": _mail(b"Subject: " + b"=?utf-8?q?a?=" * (ROOM // 13)),
    "comments in Content-Type": _mail(b"Content-Type: text/plain; " + b"(a)" * (ROOM // 3)),
    "References": _mail(b"References: " + b"<1@x> " * (ROOM // 6)),
    "1000 parts, 4 KiB of parameters each": _parts(
        b"Content-Type: text/plain; " + _params(4000) + b"\r\n\r\nx", 999
    ),
    "1000 parts, RFC 2231 names": _parts(
        b"Content-Type: text/plain\r\nContent-Disposition: attachment; "
        + b"; ".join(b"filename*%d*=utf-8''%%41%%42" % n for n in range(150))
        + b"\r\n\r\nx",
        9,
    ),
    "100 nested multiparts": _mail(
        b'Content-Type: multipart/mixed; boundary="b"',
        b'--b\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n' * 99,
    ),
    "20 MB of HTML tags": _mail(b"Content-Type: text/html", b"<b>" * 6_000_000),
    "20 MB on one line": _mail(b"", b"a" * 20_000_000),
    "a million lines": _mail(b"", b"\n" * (LIMITS.max_message_bytes // 30) + b"x\n" * 990_000),
    "2,000 parts (over the limit)": _parts(b"Content-Type: text/plain\r\n\r\nx", 2_000),
}


def _plain(size: int) -> bytes:
    line = b"Plain words of a plain mail, nothing more.\r\n"
    return _mail(b"Subject: plain", line * max(1, size // len(line)))


def _seconds(raw: bytes) -> tuple[float, bool]:
    started = time.perf_counter()
    refused = False
    try:
        check_header_block(raw, LIMITS)
        parse(raw, LIMITS)
    except MailRejected:
        refused = True
    return time.perf_counter() - started, refused


def _median(raw: bytes, rounds: int) -> tuple[float, bool]:
    runs = [_seconds(raw) for _ in range(rounds)]
    return statistics.median(cost for cost, _ in runs), runs[0][1]


def main() -> None:
    """Print each shape's median cost, its plain baseline's, and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    print(f"{'shape':38s} {'size':>9s} {'shape ms':>9s} {'plain ms':>9s} {'ratio':>7s}")
    for name, raw in SHAPES.items():
        cost, refused = _median(raw, rounds)
        baseline, _ = _median(_plain(len(raw)), rounds)
        outcome = "  refused (552)" if refused else ""
        print(
            f"{name:38s} {len(raw) // 1024:7d} K {cost * 1000:9.1f} {baseline * 1000:9.1f} "
            f"{cost / baseline:6.1f}x{outcome}"
        )


if __name__ == "__main__":
    main()
