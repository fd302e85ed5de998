"""Runs per second through ``protege serve``, against the bare ``openai`` client doing the same.

A run here: mail in over SMTP, a first model call asking for ``send_email``, the reply queued
and written to the outbox, a second model call answering in plain text. The fake model (a
process of its own, ``bench/fake_model.py``) takes ``--latency`` seconds (50 ms) per call.
For each number of serve processes and runs at once per process, the benchmark:

1. holds the model and sends a batch of mail over SMTP: the ingestion rate while no run
   executes (the runs taken wait on the model);
2. releases the model and at once sends a second batch: the ingestion rate while runs
   execute;
3. waits until every run is done and every reply is in the outbox: runs per second.

Printed against the ceiling (runs in flight / the two calls' latency: every run always
waiting on the model, nothing else taking time) and against the bare client: AsyncOpenAI
making the same calls, as many conversations at once, to the same fake model, measured in
the same run. The machine's other load counts in both: read the ratios, not the rates.
It also prints the CPU each costs: serve's per run (every serve process, from the release
to the end: the second batch taken in and every run carried out and its reply written),
against the bare client's per conversation. On a machine of C cores, serve can carry at
most C x 1000 / (cpu/run) runs a second however its work is spread, which bounds the
ratio to the bare client.

    .venv/bin/python bench/serve.py [--processes 1,2] [--concurrency 1,4,16,64,256]
        [--database-url postgresql://...] [--profile serve.prof]

SQLite in a temporary folder by default; ``--database-url`` names a PostgreSQL server (a
schema of its own, dropped afterwards). ``--profile`` profiles one serve process (one
configuration) with cProfile across all its threads, in CPU time (``time.thread_time``, so
waiting costs nothing), and prints the top costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import fake_model

AGENT = "bench@protege.example"
SENDER = "jane@acme.example"
SENDERS = 4  # SMTP connections sending at once
# Run by ``--profile`` in place of ``python -m protege``: profiles every thread of serve.
PROFILED = textwrap.dedent(
    """
    import cProfile, pstats, sys, threading, time
    profiles = []
    original = threading.Thread.run
    def run(self):
        profile = cProfile.Profile(time.thread_time)  # CPU time, not waits
        profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()
    threading.Thread.run = run
    sys.argv = ["protege", *sys.argv[2:]]
    from protege.cli import main
    try:
        main()
    except SystemExit:
        pass
    finally:
        stats = pstats.Stats(*profiles)
        stats.dump_stats(OUT)
    """
)


def _mail(number: int) -> bytes:
    mail = EmailMessage()
    mail["From"] = f"Jane <{SENDER}>"
    mail["To"] = AGENT
    mail["Subject"] = f"Question {number}"
    mail["Message-ID"] = f"<q-{number}@acme.example>"
    mail.set_content(f"Question number {number}: how are my ice creams?")
    return bytes(mail)


def _send(port: int, numbers: range) -> float:
    """Send mails ``numbers`` over ``SENDERS`` connections; the seconds it took."""
    chunks = [numbers[i::SENDERS] for i in range(SENDERS)]
    mails = [[_mail(n) for n in chunk] for chunk in chunks]

    def send(batch: list[bytes]) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=60) as client:
            for raw in batch:
                client.sendmail(SENDER, [AGENT], raw)

    threads = [threading.Thread(target=send, args=(batch,)) for batch in mails]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def _control(base_url: str, what: str) -> None:
    url = base_url.removesuffix("/v1") + "/" + what
    urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(condition, timeout: float, what: str, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(every)  # polling a condition with a deadline


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def _cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` and its children (serve's worker processes) have used so
    far, from /proc (Linux; NaN elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(process: int) -> float:
        fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime

    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return used(pid) + sum(used(int(child)) for child in children)
    except OSError:
        return float("nan")


def _finished(total: int) -> bool:
    """Every run ended and no reply waiting (a run whose reply failed counts: it ended)."""
    from protege.db import database

    ended, pending = database.execute_sql(
        "SELECT (SELECT COUNT(*) FROM run WHERE status IN ('done', 'failed')), "
        "(SELECT COUNT(*) FROM message WHERE status = 'pending')"
    ).fetchone()
    return ended >= total and pending == 0


def _unsent(total: int) -> int:
    """How many of ``total`` runs have no reply sent (their send_email failed)."""
    from protege.db import database

    (sent,) = database.execute_sql(
        "SELECT COUNT(*) FROM message WHERE direction = 'outbound' AND status = 'sent'"
    ).fetchone()
    return total - sent


def through_serve(
    database_url: str,
    folder: Path,
    base_url: str,
    processes: int,
    concurrency: int,
    batch: int,
    profile: Path | None = None,
) -> dict[str, float]:
    """One configuration through serve (the database bound here, migrated and empty)."""
    from protege.models import Agent, Toolkit

    agent = Agent.create(name="Bench", address=AGENT)
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    project = folder / "project"
    project.mkdir(exist_ok=True)
    # All the mail comes from one sender, far more than a sender's default share of runs an
    # hour: no run limits here, or most of it would be held.
    (project / "protege.toml").write_text(
        "[serve]\npoll_interval = 0.2\n\n"
        "[limits]\nsender_runs_per_hour = 0\nsender_runs_per_day = 0\nagent_runs_per_hour = 0\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "OPENAI_"))}
    env.update(
        PROTEGE_DATABASE_URL=database_url,
        PROTEGE_DATA_DIR=str(folder / "data"),
        PROTEGE_MAIL_TRANSPORT="outbox",
        PROTEGE_BLOB_STORE="local",
        PROTEGE_MODEL="fake",
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="fake-key",
    )
    port = _free_port()
    arguments = ["serve", "--port", str(port), "--concurrency", str(concurrency)]
    arguments += ["--processes", str(processes), "--no-scheduler"]
    if profile is None:
        command = [sys.executable, "-m", "protege", *arguments]
    else:
        script = f"OUT = {str(profile)!r}\n" + PROFILED
        command = [sys.executable, "-c", script, "protege", *arguments]
    server = subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for(lambda: _listening(port), 60, "serve to listen", 0.1)
        _control(base_url, "hold")
        idle = batch / _send(port, range(1, batch + 1))
        _control(base_url, "release")
        started, cpu_before = time.perf_counter(), _cpu_seconds(server.pid)
        busy = batch / _send(port, range(batch + 1, 2 * batch + 1))
        _wait_for(lambda: _finished(2 * batch), 600, "every run to end", 0.1)
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds(server.pid) - cpu_before
    finally:
        _control(base_url, "release")
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
    return {
        "cpu_ms": cpu * 1000 / (2 * batch),
        "runs_per_s": 2 * batch / seconds,
        "ingest_idle": idle,
        "ingest_busy": busy,
        "unsent": _unsent(2 * batch),
    }


async def _bare(base_url: str, conversations: int, width: int) -> tuple[float, float]:
    """Conversations per second by AsyncOpenAI alone, ``width`` at once: the same two calls
    a run makes (the reply asked for, then the answer), nothing stored; and the CPU
    milliseconds each cost."""
    import openai

    tools = [
        {
            "type": "function",
            "function": {
                "name": "send_email",
                "description": "Sends an email.",
                "parameters": {
                    "type": "object",
                    "properties": {"mode": {"type": "string"}, "body": {"type": "string"}},
                },
            },
        }
    ]
    client = openai.AsyncOpenAI(base_url=base_url, api_key="fake-key")
    gate = asyncio.Semaphore(width)

    async def conversation(number: int) -> None:
        async with gate:
            messages: list = [
                {"role": "system", "content": "You answer customers."},
                {"role": "user", "content": f"Question number {number}"},
            ]
            first = await client.chat.completions.create(
                model="fake", messages=messages, tools=tools
            )
            call = first.choices[0].message.tool_calls[0]
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"ok":true}'})
            await client.chat.completions.create(model="fake", messages=messages, tools=tools)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(conversation(n) for n in range(conversations)))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    await client.close()
    return conversations / seconds, cpu * 1000 / conversations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2", help="serve processes to try")
    parser.add_argument("--concurrency", default="1,4,16,64,256", help="runs at once each")
    parser.add_argument("--latency", type=float, default=0.05, help="the model's, in seconds")
    parser.add_argument("--batch", type=int, help="mails per batch (default: by concurrency)")
    parser.add_argument("--database-url", help="a PostgreSQL server (default: SQLite)")
    parser.add_argument("--profile", type=Path, help="profile serve into this file")
    options = parser.parse_args()
    from protege.testing.database import fresh_database

    model, base_url = fake_model.start(options.latency, "send_email")
    print(
        f"{'proc':>4} {'conc':>5} {'runs/s':>7} {'ceiling':>8} {'bare':>7} {'vs bare':>8} "
        f"{'in idle':>8} {'in busy':>8} {'cpu/run':>8} {'bare cpu':>8}"
    )
    print(
        "(in idle/busy: mail taken in, messages/s over SMTP; cpu/run: CPU ms serve spent per "
        "run while they executed, every process, mail taken in included; bare cpu: CPU ms "
        "per conversation of the bare client)"
    )
    try:
        for processes in (int(p) for p in options.processes.split(",")):
            for concurrency in (int(c) for c in options.concurrency.split(",")):
                width = processes * concurrency
                batch = options.batch or min(600, max(100, 4 * width))
                with (
                    tempfile.TemporaryDirectory() as folder,
                    fresh_database(Path(folder), options.database_url) as made,
                ):
                    serve = through_serve(
                        made.url,
                        Path(folder),
                        base_url,
                        processes,
                        concurrency,
                        batch,
                        options.profile,
                    )
                bare, bare_cpu = asyncio.run(_bare(base_url, 2 * batch, width))
                ceiling = width / (2 * options.latency)
                print(
                    f"{processes:>4} {concurrency:>5} {serve['runs_per_s']:>7.1f} "
                    f"{serve['runs_per_s'] / ceiling:>8.2f} {bare:>7.1f} "
                    f"{serve['runs_per_s'] / bare:>8.2f} {serve['ingest_idle']:>8.0f} "
                    f"{serve['ingest_busy']:>8.0f} {serve['cpu_ms']:>8.1f} {bare_cpu:>8.1f}"
                    + (f"   {serve['unsent']:.0f} replies not sent" if serve["unsent"] else ""),
                    flush=True,
                )
                if options.profile is not None:
                    _print_profile(options.profile)
                    return
    finally:
        model.kill()
        model.wait()


def _print_profile(path: Path) -> None:
    import pstats

    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
