"""How fast mail is taken from an IMAP mailbox, against storing the same mail handed over
in memory, in the same run.

A private Dovecot (``tests/mailservers.py``, the test suite's) gets ``--messages`` mails
in its INBOX; a mailbox reader with ``backfill = "all"`` takes them all in one pass, in
batches of ``--batch``: each fetched, stored with its run queued, the checkpoint moved in
the same transaction, then marked seen. The baseline stores the same bytes with
``ingest`` directly, as the SMTP gateway does once it has a mail's bytes, into a database
of its own. Both use SQLite in a temporary folder unless ``--database-url`` names a
PostgreSQL database (its tables are emptied first). Each side runs twice, alternating,
and the better run of each counts. Prints messages per second for each and their ratio:
what reading a mailbox costs on top of storing mail.

    .venv/bin/python bench/imap.py [--messages 2000] [--batch 200] [--database-url URL]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from email import policy
from email.message import EmailMessage
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protege import db  # noqa: E402
from protege.config import load_config  # noqa: E402
from protege.gateway import checkpoints  # noqa: E402
from protege.gateway.imap import connect, log_out  # noqa: E402
from protege.gateway.inbound import ingest  # noqa: E402
from protege.gateway.mailbox import MailboxReader  # noqa: E402
from protege.installation import open_installation  # noqa: E402
from protege.mailbox_settings import MailboxSettings  # noqa: E402
from protege.models import Agent, Message  # noqa: E402
from tests.mailservers import AGENT, Dovecot  # noqa: E402


def mail(number: int, prefix: str, to: str) -> bytes:
    message = EmailMessage()
    message["From"] = f"Customer {number} <customer{number}@acme.example>"
    message["To"] = to
    message["Subject"] = f"Order {number}: where is it?"
    message["Message-ID"] = f"<{prefix}-{number}@acme.example>"
    message.set_content(f"Hello,\n\norder {number} has not arrived yet. Where is it?\n\nJane\n")
    return message.as_bytes(policy=policy.SMTP)


def fresh_database(url: str | None, folder: Path, name: str, address: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    if url is None:
        url = f"sqlite:///{folder / name}"
    else:
        db.connect(url)
        for table in reversed(db.database.get_tables()):
            db.database.execute_sql(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    db.connect(url)
    db.migrate()
    logging.getLogger("protege.models.agents").setLevel(logging.ERROR)  # no toolkits: fine
    Agent.create(name="Support", address=address)
    return url


def from_imap(server: Dovecot, count: int, batch: int, url: str | None, folder: Path) -> float:
    user = server.add_user(f"agent-{folder.name}@example.test", AGENT.password)  # a new INBOX
    fresh_database(url, folder, "imap.db", user.address)
    server.append_many(user.address, [mail(n, "imap", user.address) for n in range(count)])
    os.environ["PROTEGE_DATA_DIR"] = str(folder / "imap-data")
    config = load_config(folder, environ={"PROTEGE_DNS_OFFLINE": "1"})
    box = MailboxSettings(
        agent=user.address,
        host=server.host,
        port=server.imaps_port,
        ca_file=str(server.ca_file),
        username=user.address,
        password_env="UNUSED",
        password=AGENT.password,
        backfill="all",
        batch=batch,
    )
    config = attrs.evolve(
        config, data_dir=folder / "imap-data", mail=attrs.evolve(config.mail, imap={"box": box})
    )
    app = open_installation(config, connect=False)
    reader = MailboxReader("box", app)
    checkpoints.ensure("box", reader.source)
    checkpoints.take_lease("box", reader.holder, 600)
    client = connect("box", box, folder)
    started = time.perf_counter()
    taken = reader.take_new(client)
    elapsed = time.perf_counter() - started
    log_out(client)
    app.close()
    assert taken.stored == count, taken
    assert Message.select().count() == count
    return count / elapsed


def from_memory(count: int, url: str | None, folder: Path) -> float:
    fresh_database(url, folder, "memory.db", AGENT.address)
    config = load_config(folder, environ={"PROTEGE_DNS_OFFLINE": "1"})
    config = attrs.evolve(config, data_dir=folder / "memory-data")
    raws = [mail(n, "memory", AGENT.address) for n in range(count)]
    resolver = config.mail.authentication.resolver()  # kept, as the gateway and reader do
    app = open_installation(config, connect=False)  # its inspectors, as the gateway's
    started = time.perf_counter()
    for raw in raws:
        ingest(raw, config=config, recipients=[AGENT.address], resolver=resolver, app=app)
    elapsed = time.perf_counter() - started
    app.close()
    assert Message.select().count() == count
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    options = parser.parse_args()
    server = Dovecot()
    try:
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            from_memory(100, options.database_url, folder / "warm-up")  # imports, caches
            # Each side twice, alternating, the better of each kept: neither gains from
            # going second (a warmer disk cache, a freer CPU).
            baselines, imaps = [], []
            for round_ in range(2):
                where = folder / f"round-{round_}"
                baselines.append(from_memory(options.messages, options.database_url, where))
                imaps.append(
                    from_imap(server, options.messages, options.batch, options.database_url, where)
                )
            baseline, imap = max(baselines), max(imaps)
    finally:
        server.close()
    where = "PostgreSQL" if options.database_url else "SQLite"
    print(f"{options.messages} messages into {where}, batches of {options.batch}:")
    print(f"  stored from memory (ingest):       {baseline:8.1f} messages/s")
    print(f"  taken from IMAP (fetch, store, mark): {imap:8.1f} messages/s")
    print(f"  IMAP / memory: {imap / baseline:.2f}")


if __name__ == "__main__":
    main()
