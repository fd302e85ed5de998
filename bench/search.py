"""What ``search_emails`` costs at a million messages, on SQLite and PostgreSQL.

Fills one agent's mailbox with ``--messages`` messages (1,000,000 by default) in bulk, by
``INSERT ... SELECT`` through the real schema, so its triggers and indexes do their work as
for mail that arrives; then times ``protege.mail.search`` (limit 10, as the tool's default)
for each kind of query and prints its p50 and p95:

- a rare word (in 10 messages per million), a word in 1% and a word in 10% of the mail;
- a sender filter (one sender of 1,000, so 0.1% of the mail);
- a date range (one day of the year the mail spans), and the same with the 10% word;
- beyond the targets, scoped to what one sender took part in (as ``search_emails``
  searches for a sender without a grant that opens the whole archive): their newest mail,
  and the 10% word, which their mail never has, so every message holding it is read;
- beyond the targets, a word that only another agent's mail has: ``--others`` messages
  (100,000 by default) of a second agent, newer than the first's, each holding it.

Target: p95 <= 50 ms for each of the first six at 1,000,000 messages, on both databases.
PostgreSQL runs in a schema of its own, dropped afterwards.

    .venv/bin/python bench/search.py [--messages 100000] [--others 10000] [--repeat 30]
        [--database sqlite|postgresql|both] [--postgres-url postgresql://...]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peewee

from protege import MailScope, db
from protege.mail import search
from protege.models import Agent
from protege.testing import fresh_database

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
START = datetime.datetime(2025, 1, 1)
SPACING_SECONDS = 30  # a million messages span about a year
SENDERS = 1000
CHUNK = 100_000

# Message n (from 1) of the mailbox: the marker words and the sender follow from n alone, so
# the bench knows how many messages each query matches.
_SQLITE_FILL = """
WITH RECURSIVE seq(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM seq WHERE n < {last})
INSERT INTO message (agent_id, direction, sender, to_addresses, subject, body_text,
                     message_id, thread_key, created_at)
SELECT {agent}, CASE WHEN n % 3 = 0 THEN 'outbound' ELSE 'inbound' END,
       'sender' || (n % {senders}) || '@example.com', '["bench@agents.example"]',
       'Order ' || (n % 5000) || ' question',
       'Hello, about order w' || (n * 7919 % 5000) || ' and w' || (n * 104729 % 5000)
           || ' shipped on day ' || (n % 365) || '. '
           || CASE WHEN n % 100000 = 7 THEN 'rarezebra ' ELSE '' END
           || CASE WHEN n % 100 = 3 THEN 'onepercent ' ELSE '' END
           || CASE WHEN n % 10 = 5 THEN 'tenpercent ' ELSE '' END
           || 'Thanks, the shop',
       '<' || n || '@bench.example>', '<' || n || '@bench.example>',
       strftime('%Y-%m-%d %H:%M:%f', '{start}', '+' || (n * {spacing}) || ' seconds')
FROM seq
"""
_POSTGRES_FILL = """
INSERT INTO message (agent_id, direction, sender, to_addresses, subject, body_text,
                     message_id, thread_key, created_at)
SELECT {agent}, CASE WHEN n %% 3 = 0 THEN 'outbound' ELSE 'inbound' END,
       'sender' || (n %% {senders}) || '@example.com', '["bench@agents.example"]',
       'Order ' || (n %% 5000) || ' question',
       'Hello, about order w' || (n * 7919 %% 5000) || ' and w' || (n * 104729 %% 5000)
           || ' shipped on day ' || (n %% 365) || '. '
           || CASE WHEN n %% 100000 = 7 THEN 'rarezebra ' ELSE '' END
           || CASE WHEN n %% 100 = 3 THEN 'onepercent ' ELSE '' END
           || CASE WHEN n %% 10 = 5 THEN 'tenpercent ' ELSE '' END
           || 'Thanks, the shop',
       '<' || n || '@bench.example>', '<' || n || '@bench.example>',
       TIMESTAMP '{start}' + n * INTERVAL '{spacing} seconds'
FROM generate_series({first}::bigint, {last}::bigint) AS n
"""
_SQLITE_OTHERS = """
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {count})
INSERT INTO message (agent_id, direction, sender, subject, body_text, message_id,
                     thread_key, created_at)
SELECT {agent}, 'inbound', 'other' || (n % 100) || '@example.org', 'Elsewhere',
       'Notes from elsewhere, number ' || n, '<o' || n || '@bench.example>',
       '<o' || n || '@bench.example>',
       strftime('%Y-%m-%d %H:%M:%f', '{start}', '+' || n || ' seconds')
FROM seq
"""
_POSTGRES_OTHERS = """
INSERT INTO message (agent_id, direction, sender, subject, body_text, message_id,
                     thread_key, created_at)
SELECT {agent}, 'inbound', 'other' || (n %% 100) || '@example.org', 'Elsewhere',
       'Notes from elsewhere, number ' || n, '<o' || n || '@bench.example>',
       '<o' || n || '@bench.example>', TIMESTAMP '{start}' + n * INTERVAL '1 second'
FROM generate_series(1, {count}) AS n
"""


def fill_others(agent: Agent, messages: int, after: datetime.datetime) -> None:
    """Insert ``messages`` messages for another agent, dated from ``after`` on, each with
    the word "elsewhere" (which the bench agent's mail never has)."""
    postgres = isinstance(db.database.obj, peewee.PostgresqlDatabase)
    template = _POSTGRES_OTHERS if postgres else _SQLITE_OTHERS
    sql = template.format(agent=agent.id, count=messages, start=after.isoformat(sep=" "))
    with db.database.atomic():
        db.database.execute_sql(sql)
    if postgres:
        db.database.execute_sql("ANALYZE message")


def fill(agent: Agent, messages: int) -> float:
    """Insert ``messages`` messages for ``agent`` in chunks; the seconds it took."""
    postgres = isinstance(db.database.obj, peewee.PostgresqlDatabase)
    template = _POSTGRES_FILL if postgres else _SQLITE_FILL
    began = time.perf_counter()
    for first in range(1, messages + 1, CHUNK):
        last = min(first + CHUNK - 1, messages)
        sql = template.format(
            first=first,
            last=last,
            agent=agent.id,
            senders=SENDERS,
            start=START.isoformat(sep=" "),
            spacing=SPACING_SECONDS,
        )
        # psycopg2 reads % as a parameter marker, so the PostgreSQL template doubles them
        with db.database.atomic():
            db.database.execute_sql(sql)
        print(f"  filled {last:,} messages ({time.perf_counter() - began:.0f} s)", flush=True)
    # Who took part in each: its sender (the bench's recipient is the agent itself).
    with db.database.atomic():
        db.database.execute_sql(
            "INSERT INTO message_participant (message_id, address) "
            f"SELECT id, sender FROM message WHERE agent_id = {db.database.param}",
            (agent.id,),
        )
    if postgres:  # as autovacuum would after a bulk load
        db.database.execute_sql("ANALYZE message")
        db.database.execute_sql("ANALYZE message_participant")
    return time.perf_counter() - began


def queries(messages: int) -> dict[str, dict[str, Any]]:
    """Each kind of query, as ``search`` arguments."""
    middle = START + datetime.timedelta(seconds=messages * SPACING_SECONDS // 2)
    day = {"after": middle, "before": middle + datetime.timedelta(days=1)}
    one_sender = MailScope(participant="sender421@example.com")
    return {
        "rare word (10 per million)": {"query": "rarezebra"},
        "word in 1%": {"query": "onepercent"},
        "word in 10%": {"query": "tenpercent"},
        "sender filter (0.1%)": {"sender": "sender421@example.com"},
        "date range (one day)": day,
        "date range + word in 10%": {"query": "tenpercent", **day},
        "one sender's mail (0.1%)": {"scope": one_sender},
        "word in 10%, one sender's mail": {"query": "tenpercent", "scope": one_sender},
        "word only in others' mail": {"query": "elsewhere"},
    }


def percentiles(call: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """p50 and p95 of ``repeat`` timed calls (after one to warm up), in seconds."""
    result = call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    cuts = statistics.quantiles(times, n=20)
    return statistics.median(times), cuts[18], result


def bench(name: str, url: str | None, messages: int, others: int, repeat: int) -> list[str]:
    """Fill a fresh database and time every query kind on it; the report's lines."""
    print(f"{name}: filling {messages:,} messages", flush=True)
    with tempfile.TemporaryDirectory() as tmp, fresh_database(Path(tmp), url):
        agent = Agent.create(name="Bench", address="bench@agents.example")
        seconds = fill(agent, messages)
        other = Agent.create(name="Other", address="other@agents.example")
        end = START + datetime.timedelta(seconds=(messages + 1) * SPACING_SECONDS)
        fill_others(other, others, end)
        lines = [
            f"{name}, {messages:,} messages (filled in {seconds:.0f} s) and {others:,} of "
            "another agent, limit 10:"
        ]
        for kind, arguments in queries(messages).items():
            p50, p95, found = percentiles(lambda a=arguments: search(agent, **a), repeat)
            count = len(found)  # type: ignore[arg-type]
            lines.append(
                f"  {kind:28s} p50 {p50 * 1000:7.2f} ms  p95 {p95 * 1000:7.2f} ms  ({count} found)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--others", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES)
    args = parser.parse_args()
    report = []
    if args.database in ("sqlite", "both"):
        report += bench("SQLite", None, args.messages, args.others, args.repeat)
        print("\n".join(report), flush=True)
    if args.database in ("postgresql", "both"):
        report += bench("PostgreSQL", args.postgres_url, args.messages, args.others, args.repeat)
    print("\n".join(report))
    print("target: p95 <= 50 ms for each of the first six kinds at 1,000,000 messages")


if __name__ == "__main__":
    main()
