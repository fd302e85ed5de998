"""The fairness figure: how many runs a quiet sender's first mail waits behind a flood.

A flood sender's ``--flood`` mails are stored through ``ingest`` and all queued (no limits:
the backlog is what turns must get past). Runs are then claimed one at a time, as a worker
takes them; before every ``--every``-th claim a new quiet sender writes once, ``--quiet``
senders in all. A quiet mail's delay is the number of runs claimed after it was stored and
before it. Measured twice in one run, on databases made the same way: protege's claims, by
fair turn (``Run.claim_next``), and a FIFO baseline taking the oldest queued run (ORDER BY
id), where a quiet mail waits for the whole backlog ahead of it. Prints the worst delay of
each and their ratio.

Then what fairness costs: claims per second by turn against by id, on the same database and
backlog (alternating, the median of ``--rounds``); and mail stored per second with the
default ``[limits]`` against none, for one sender's flood (held after its first 20) and for
mail from a new sender each time (every limit checked, each admitted).

    .venv/bin/python bench/fairness.py [--flood 2000] [--quiet 20] [--every 50]
        [--mails 500] [--rounds 3] [--database-url postgresql://...]

SQLite in a temporary folder by default; ``--database-url`` names a PostgreSQL server (a
schema of its own for each database, dropped afterwards).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import peewee

from protege.authentication import Verdict
from protege.config import AuthenticationSettings, Config
from protege.db import database
from protege.gateway.inbound import ingest
from protege.limit_settings import LimitSettings
from protege.models import Agent, Run
from protege.testing import fresh_database

AGENT = "sundae@thescoop.example"
FLOOD = "flood@spam.example"
NOW = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.UTC)
LEASE = 300.0
NO_LIMITS = LimitSettings(
    sender_runs_per_hour=0,
    sender_runs_per_day=0,
    agent_runs_per_hour=0,
    agent_tokens_per_day=0,
    agent_tokens_per_month=0,
    installation_tokens_per_day=0,
)
# The baseline's claim: protege's own statement, with the oldest queued run first.
_OLDEST = (
    "UPDATE run SET status = 'running', attempts = attempts + 1, started_at = {p}, "
    "lease_owner = {p}, lease_expires_at = {p} "
    "WHERE id = (SELECT id FROM run WHERE status = 'queued' ORDER BY id LIMIT 1{lock}) "
    "RETURNING id"
)
_DONE = "UPDATE run SET status = 'done', lease_owner = NULL, lease_expires_at = NULL WHERE id = {p}"
_QUEUE_AGAIN = "UPDATE run SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL"

Claim = Callable[[datetime.datetime], "int | None"]


def _mail(sender: str, number: int) -> bytes:
    return (
        f"From: {sender}\r\nTo: {AGENT}\r\nSubject: Mail {number}\r\n"
        f"Date: Mon, 02 Mar 2026 10:00:00 +0000\r\nMessage-ID: <{number}.{sender}>\r\n"
        f"\r\nMail number {number} from {sender}.\r\n"
    ).encode()


def _config(folder: Path, limits: LimitSettings) -> Config:
    base = Config.defaults(folder)
    offline = AuthenticationSettings(offline=True)  # no DNS: protege's own cost
    return attrs.evolve(base, mail=attrs.evolve(base.mail, authentication=offline), limits=limits)


def _store(config: Config, raw: bytes) -> int:
    # Each sender here proves who they are (a signature, as a real mailbox's mail has):
    # mail that proves no sender shares one lane, and would measure that instead.
    sender = raw.split(b"\r\n", 1)[0].decode().removeprefix("From: ")
    domain = sender.rpartition("@")[2]
    signed = Verdict(True, domain, "dkim", "pass", None, (), domain, "bench", sender)
    (delivered,) = ingest(raw, config=config, recipients=[AGENT], clock=lambda: NOW, verdict=signed)
    return delivered.run.id


def _by_turn(now: datetime.datetime) -> int | None:
    claim = Run.claim_next("bench", now, LEASE, look=False, expired=False)
    return None if claim is None else claim.run_id


def _oldest(now: datetime.datetime) -> int | None:
    lock = " FOR UPDATE SKIP LOCKED" if isinstance(database.obj, peewee.PostgresqlDatabase) else ""
    sql = _OLDEST.format(p=database.param, lock=lock)
    expires = now + datetime.timedelta(seconds=LEASE)
    rows = database.execute_sql(sql, (now, "bench", expires)).fetchall()
    return rows[0][0] if rows else None


def worst_delay(folder: Path, url: str | None, claim: Claim, options) -> int:
    """The flood, then quiet senders writing as runs are claimed by ``claim``: the most
    runs claimed between a quiet mail's arrival and its own claim."""
    with fresh_database(folder, url):
        Agent.create(name="Sundae", address=AGENT)
        config = _config(folder, NO_LIMITS)
        for number in range(options.flood):
            _store(config, _mail(FLOOD, number))
        arrived: dict[int, int] = {}  # a quiet mail's run: the claims made before it came
        delays: list[int] = []
        claims = 0
        while len(delays) < options.quiet:
            if claims % options.every == 0 and len(arrived) < options.quiet:
                quiet = f"quiet{len(arrived)}@customers.example"
                arrived[_store(config, _mail(quiet, claims))] = claims
            run_id = claim(NOW.replace(tzinfo=None))
            if run_id is None:
                raise RuntimeError("the queue ran dry before every quiet mail was taken")
            database.execute_sql(_DONE.format(p=database.param), (run_id,))
            if run_id in arrived:
                delays.append(claims - arrived[run_id])
            claims += 1
        return max(delays)


def claim_rates(folder: Path, url: str | None, options) -> dict[str, float]:
    """Claims per second by turn and by id, on one database: the flood and a hundred
    senders' mail queued, claimed through ``--rounds`` times each way, alternating."""
    with fresh_database(folder, url):
        Agent.create(name="Sundae", address=AGENT)
        config = _config(folder, NO_LIMITS)
        for number in range(options.flood):
            _store(config, _mail(FLOOD, number))
            if number % 20 == 0:
                _store(config, _mail(f"sender{number // 20 % 100}@customers.example", number))
        rates: dict[str, list[float]] = {"turn": [], "id": []}
        for _ in range(options.rounds):
            for name, claim in (("turn", _by_turn), ("id", _oldest)):
                database.execute_sql(_QUEUE_AGAIN)
                taken, started = 0, time.perf_counter()
                while claim(NOW.replace(tzinfo=None)) is not None:
                    taken += 1
                rates[name].append(taken / (time.perf_counter() - started))
        return {name: statistics.median(values) for name, values in rates.items()}


def ingest_rate(folder: Path, url: str | None, limits: LimitSettings, senders: str, mails: int):
    """Mail stored per second under ``limits``: one sender's (``flood``) or a new sender's
    each time (``many``)."""
    with fresh_database(folder, url):
        Agent.create(name="Sundae", address=AGENT)
        config = _config(folder, limits)
        raws = [
            _mail(FLOOD if senders == "flood" else f"s{n}@customers.example", n)
            for n in range(mails)
        ]
        started = time.perf_counter()
        for raw in raws:
            _store(config, raw)
        return mails / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=2000, help="the flood's mails")
    parser.add_argument("--quiet", type=int, default=20, help="quiet senders, one mail each")
    parser.add_argument("--every", type=int, default=50, help="claims between quiet mails")
    parser.add_argument("--mails", type=int, default=500, help="mails per ingest measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", help="a PostgreSQL server (default: SQLite)")
    options = parser.parse_args()
    if options.quiet * options.every >= options.flood:
        parser.error("--quiet x --every must be under --flood: the quiet mail comes mid-flood")
    url = options.database_url
    kind = "PostgreSQL" if url else "SQLite"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)

        def place(name: str) -> Path:
            (root / name).mkdir()
            return root / name

        fair = worst_delay(place("fair"), url, _by_turn, options)
        fifo = worst_delay(place("fifo"), url, _oldest, options)
        claims = claim_rates(place("claims"), url, options)
        stored = {
            (senders, side): ingest_rate(
                place(f"{senders}-{side}"), url, limits, senders, options.mails
            )
            for senders in ("flood", "many")
            for side, limits in (("off", NO_LIMITS), ("on", LimitSettings()))
        }
    print(
        f"{kind}: a flood of {options.flood} queued mails; {options.quiet} quiet senders, "
        f"one every {options.every} claims"
    )
    print(f"worst delay of a quiet sender's first mail, in runs: fair turns {fair}, FIFO {fifo}")
    ratio = fifo / max(fair, 1)
    print(f"fair turns: {ratio:.0f}x shorter than FIFO (the bound: one run per sender ahead)")
    print(
        f"claims per second: by turn {claims['turn']:.0f}, by id {claims['id']:.0f}; "
        f"ratio {claims['turn'] / claims['id']:.2f}x"
    )
    for senders, what in (("flood", "one sender's flood"), ("many", "a new sender each mail")):
        on, off = stored[(senders, "on")], stored[(senders, "off")]
        print(
            f"ingest, {what}: {on:.0f}/s with the default limits, {off:.0f}/s with none; "
            f"ratio {on / off:.2f}x"
        )


if __name__ == "__main__":
    main()
