"""What resolving a run's tools costs as an agent's toolkits grow.

Builds agents with 1, 10, 100 and 1,000 toolkits attached (21 gate rules each) and times
``agent.available_tools_for(context)`` for a reply run, counting the queries it makes.
Prints the time per resolution and the query count for each, the 100:1 time ratio and the
time at 1,000. Targets: the same query count for all; a 100:1 ratio of at most 3; at most
5 ms at 1,000 toolkits.

    .venv/bin/python bench/access.py [--repeat 200] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from protege import RunContext, db
from protege.models import Agent, AgentToolkit, AgentToolkitRule, Toolkit
from protege.registry import Manifest, Origin, ToolEntry
from protege.testing import fresh_database
from protege.tool import Tool

SIZES = (1, 10, 100, 1000)
RULES_PER_GRANT = 20  # plus one allow rule that matches


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class _Inbound:
    sender = "mara@thescoop.com"


def _manifest(tool_count: int) -> Manifest:
    def use(self, context):
        return self.success()

    entries = [
        ToolEntry(
            type(f"Bench{n:03d}Tool", (Tool,), {"description": "Bench.", "use": use}),
            Origin.HOST,
            "bench",
        )
        for n in range(tool_count)
    ]
    return Manifest(tools=tuple(sorted(entries, key=lambda e: e.id)))


def _agent(toolkits: int, manifest: Manifest) -> Agent:
    agent = Agent.create(name=f"Agent {toolkits}", address=f"agent{toolkits}@thescoop.example")
    ids = manifest.ids()
    with db.database.atomic():  # in bulk: a thousand toolkits one by one take a while
        for n in range(toolkits):
            members = [ids[(n + k) % len(ids)] for k in range(5)]
            toolkit = Toolkit.create(name=f"Toolkit {toolkits}-{n}", member_tool_ids=members)
            grant = AgentToolkit.create(agent=agent, toolkit=toolkit)
            # deny rules that never match, and allow rules of which only the last matches
            rules = [
                ("deny", f"blocked{r}@*") if r % 2 else ("allow", f"staff{r}@*")
                for r in range(RULES_PER_GRANT)
            ]
            rules.append(("allow", "*@thescoop.com"))
            AgentToolkitRule.insert_many(
                [{"grant": grant, "kind": kind, "pattern": pattern} for kind, pattern in rules]
            ).execute()
    return agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--database-url", help="a PostgreSQL URL (default: a SQLite file)")
    args = parser.parse_args()
    manifest = _manifest(120)
    peewee_log = logging.getLogger("peewee")
    counter = _Counter()
    with tempfile.TemporaryDirectory() as tmp, fresh_database(Path(tmp), args.database_url):
        results = {}
        agents = {size: _agent(size, manifest) for size in SIZES}
        # As autovacuum would after such a load: PostgreSQL plans by the tables' statistics.
        db.database.execute_sql("ANALYZE")
        for size in SIZES:
            agent = agents[size]
            context = RunContext(
                agent=agent,
                message=_Inbound(),
                mail_queue=lambda mail, attachments=(), *, call: None,
                config=None,
                logger=logging.getLogger("bench"),
            )
            agent.available_tools_for(context, manifest)  # warm
            peewee_log.addHandler(counter)
            peewee_log.setLevel(logging.DEBUG)
            counter.count = 0
            agent.available_tools_for(context, manifest)
            queries = counter.count
            peewee_log.removeHandler(counter)
            peewee_log.setLevel(logging.WARNING)
            start = time.perf_counter()
            for _ in range(args.repeat):
                agent.available_tools_for(context, manifest)
            results[size] = ((time.perf_counter() - start) / args.repeat, queries)
    database = "PostgreSQL" if args.database_url else "SQLite"
    print(f"{database}, {RULES_PER_GRANT + 1} rules per grant, {args.repeat} resolutions each")
    for size, (seconds, queries) in results.items():
        print(f"{size:4d} toolkits: {seconds * 1000:7.3f} ms per resolution, {queries} queries")
    ratio = results[100][0] / results[1][0]
    same = len({q for _, q in results.values()}) == 1
    print(f"100:1 time ratio: {ratio:.2f}x (target <= 3); query count identical: {same}")
    print(f"1000 toolkits: {results[1000][0] * 1000:.3f} ms (target <= 5 ms)")


if __name__ == "__main__":
    main()
