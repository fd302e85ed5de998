"""How long writing and checking a plain reply takes, written directly against written by the
email package, in the same run.

``render`` writes plain mail (ASCII, nothing to quote, encode or fold, body lines within 78
characters) as plain text and everything else with the email package; both are then parsed
back and checked by ``difference``. The script times, for one plain reply, ``render`` and the
email package's path (``package_bytes`` plus the same check), and prints the median of each
and their ratio.

    .venv/bin/python bench/compose.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import attrs

from protege.gateway.compose import Outgoing, difference, now, package_bytes, plain_bytes, render

REPLY = Outgoing(
    sender_name="Sundae",
    sender="sundae@thescoop.example",
    to=("mara@thescoop.com",),
    cc=("orders@thescoop.com",),
    subject="Re: Friday's order",
    date=now(),
    message_id="<0123456789abcdef0123456789abcdef@thescoop.example>",
    in_reply_to="<fedcba9876543210fedcba9876543210@thescoop.com>",
    references=("<fedcba9876543210fedcba9876543210@thescoop.com>",),
    loop=1,
    body="Hello Mara,\n\nYes, Friday works: two tubs of vanilla and one of pistachio.\n"
    "I will send the invoice on Thursday.\n\nSundae\n",
)


def _package_path(outgoing: Outgoing) -> bytes:
    raw = package_bytes(outgoing)
    assert difference(raw, outgoing) is None
    return raw


def _replies(rounds: int, first: int) -> list[Outgoing]:
    """``REPLY`` once per round, each in a thread of its own (its ids and subject), as a
    process writing mail sees them: the same From and To, new ids every time (numbered from
    ``first``: no side reads ids another side's parsing left in ``SharedHeaders``)."""
    return [
        attrs.evolve(
            REPLY,
            subject=f"Re: Friday's order {n}",
            message_id=f"<{n:032x}@thescoop.example>",
            in_reply_to=f"<{n:032x}@thescoop.com>",
            references=(f"<{n:032x}@thescoop.com>",),
        )
        for n in range(first, first + rounds)
    ]


def _median(write: Callable[[Outgoing], bytes], replies: list[Outgoing]) -> float:
    times = []
    for reply in replies:
        started = time.perf_counter()
        write(reply)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    """Time both paths and print their medians and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    assert plain_bytes(REPLY) == package_bytes(REPLY), "the reply is not plain mail"
    for write in (render, _package_path):  # warm both before timing
        _median(write, _replies(50, 0))
    package = _median(_package_path, _replies(rounds, 1 * 10**6))
    direct = _median(render, _replies(rounds, 2 * 10**6))
    written = _median(lambda o: plain_bytes(o) or b"", _replies(rounds, 3 * 10**6))
    print(f"email package, written and checked: {package * 1e3:.3f} ms")
    print(f"render (written directly, checked):  {direct * 1e3:.3f} ms")
    print(f"  of which writing directly:         {written * 1e3:.3f} ms")
    print(f"ratio: {package / direct:.2f}x")


if __name__ == "__main__":
    main()
