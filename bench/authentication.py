"""What verifying the sender costs per inbound mail, against ingest without it.

Both sides run ``ingest`` (parse, store in SQLite, queue the run) on the same signed mail,
in the same process: once with ``[mail.authentication] mode = "off"`` (the baseline) and
once with ``"enforce"``, where each mail's DKIM signature (RSA 2048) is checked, SPF is
evaluated for the SMTP client, and DMARC's record is read. DNS answers come from a warm
cache (pinned records, as a resolver's cache serves them after the first mail of a
domain), so the figure is protege's own cost, not the network's. Prints the median time per
mail of each and their ratio; the README's target is under 1.5x.

    .venv/bin/python bench/authentication.py [--mails 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import attrs

from protege import db
from protege.authentication import authenticate
from protege.config import AuthenticationSettings, Config
from protege.gateway.inbound import ingest
from protege.models import Agent
from protege.testing import DkimKey

KEY = DkimKey.generate("thescoop.com", "bench")
RECORDS = {
    KEY.name: KEY.record,
    "thescoop.com": "v=spf1 ip4:203.0.113.0/24 -all",
    "_dmarc.thescoop.com": "v=DMARC1; p=reject",
}


def _mail(number: int) -> bytes:
    raw = (
        "From: Mara <mara@thescoop.com>\r\nTo: sundae@thescoop.example\r\n"
        f"Subject: Stock, day {number}\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n"
        f"Message-ID: <bench.{number}@thescoop.com>\r\n\r\n"
        + "Mango Sorbet is low again; can you check the order from Tuesday?\r\n"
        * 3
    ).encode()
    return KEY.sign(raw)


def _per_mail(config: Config, mails: list[bytes]) -> float:
    resolver = config.mail.authentication.resolver()
    start = time.perf_counter()
    for raw in mails:
        ingest(
            raw,
            config=config,
            recipients=["sundae@thescoop.example"],
            envelope_sender="bounce@thescoop.com",
            client_ip="203.0.113.5",
            helo="mx.thescoop.com",
            resolver=resolver,
        )
    return (time.perf_counter() - start) / len(mails)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mails", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="protege-bench-auth-"))
    base = Config.defaults(folder)
    db.connect(base.database_url)
    db.migrate()
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    sides = {
        mode: attrs.evolve(
            base,
            mail=attrs.evolve(
                base.mail,
                authentication=AuthenticationSettings(mode=mode, offline=True, dns=RECORDS),
            ),
        )
        for mode in ("off", "enforce")
    }
    times: dict[str, list[float]] = {mode: [] for mode in sides}
    mails = [_mail(n) for n in range(args.mails * args.rounds * 2)]
    for round_number in range(args.rounds):
        for index, (mode, config) in enumerate(sides.items()):
            first = (round_number * 2 + index) * args.mails
            times[mode].append(_per_mail(config, mails[first : first + args.mails]))
    off, on = statistics.median(times["off"]), statistics.median(times["enforce"])
    check = authenticate(mails[0], resolver=sides["enforce"].mail.authentication.resolver())
    assert check.authenticated, check.reason  # the mail measured is the mail that passes
    print(f"ingest without verification: {off * 1000:.2f} ms per mail")
    print(f"ingest with DKIM, SPF, DMARC: {on * 1000:.2f} ms per mail")
    print(f"ratio: {on / off:.2f}x (target: under 1.5x)")


if __name__ == "__main__":
    main()
