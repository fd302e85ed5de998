"""What the harness costs per turn, against the raw openai client doing the same by hand.

One turn: a user message, a tool call, the tool's result, a final answer: two Chat
Completions requests, to the same local fake server (a separate process, so its work is not
counted). The harness also stores the message, the run and every event (SQLite in a temp
folder), resolves the agent's tools and checks the call's arguments. Prints client-side CPU
milliseconds per turn for both and their ratio (target: at most 1.5x).

Also prints the wall time of `protege --help` against `python -c 'import click'`.

    .venv/bin/python bench/harness.py [--turns 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

SERVER = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body["messages"][-1]["role"] == "tool":
                message = {"role": "assistant", "content": "SCP-1042 was delivered."}
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "lookup_order",
                                 "arguments": '{"order_number": "SCP-1042"}'}}]}
            data = json.dumps({
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    """
)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["order_number"],
    "properties": {"order_number": {"type": "string"}},
}
ORDERS = {"SCP-1042": {"status": "delivered", "total_cents": 2450}}


def lookup(order_number: str) -> dict:
    return {"ok": True, **ORDERS[order_number]}


def raw_turns(base_url: str, turns: int) -> float:
    """CPU per turn of the bare async client, on one event loop, as serve runs them."""
    import openai

    tools = [
        {
            "type": "function",
            "function": {"name": "lookup_order", "description": "Looks up.", "parameters": SCHEMA},
        }
    ]

    async def turns_on_one_loop() -> float:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        start = time.process_time()
        for _ in range(turns):
            messages = [
                {"role": "system", "content": "You are Sundae."},
                {"role": "user", "content": "Where is SCP-1042?"},
            ]
            first = await client.chat.completions.create(
                model="bench", messages=messages, tools=tools
            )
            call = first.choices[0].message.tool_calls[0]
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            result = lookup(**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
            await client.chat.completions.create(model="bench", messages=messages, tools=tools)
        spent = time.process_time() - start
        await client.close()
        return spent / turns

    return asyncio.run(turns_on_one_loop())


@contextlib.contextmanager
def harness(folder: Path) -> Iterator[Callable[[int], float]]:
    """A measure of CPU per turn through protege on one event loop, as serve runs them: the
    message stored, the run queued, claimed, carried out and its events persisted."""
    import attrs

    from protege import Tool
    from protege.config import Config
    from protege.harness import carry_out
    from protege.harness.runner import new_owner
    from protege.installation import open_installation
    from protege.mail import record_inbound
    from protege.models import Agent, Toolkit
    from protege.models.base import utcnow
    from protege.queue import claim_next, queue_reply
    from protege.registry import Manifest, Origin, ToolEntry
    from protege.testing import fresh_database

    class LookupOrderTool(Tool):
        description = "Looks up."
        input_schema = SCHEMA

        def use(self, context, order_number):
            return self.success(**ORDERS[order_number])

    manifest = Manifest(tools=(ToolEntry(LookupOrderTool, Origin.HOST, "bench"),))
    config = Config.defaults(folder)
    config = attrs.evolve(config, model=attrs.evolve(config.model, model="bench"))
    with fresh_database(folder):
        installation = open_installation(config, manifest=manifest, connect=False)
        agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
        agent.grant(Toolkit.create(name="Support", member_tool_ids=["lookup_order"]))

        async def carried(count: int) -> float:
            start = time.process_time()
            for _ in range(count):
                message = record_inbound(agent, sender="jane@acme.com", body="Where is SCP-1042?")
                queue_reply(message)
                run, claim = claim_next(new_owner(), utcnow(), 60)
                await carry_out(run, claim, installation)
                assert run.status == "done", run.error
            return (time.process_time() - start) / max(count, 1)

        def measure(turns: int) -> float:
            async def warm_then_measure() -> float:
                await carried(5)
                return await carried(turns)

            return asyncio.run(warm_then_measure())

        yield measure


def wall(command: list[str], rounds: int = 10) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        os.environ["OPENAI_BASE_URL"] = base_url
        os.environ["OPENAI_API_KEY"] = "bench"
        raw_turns(base_url, 10)  # warm up imports
        raws, harnesses = [], []
        with tempfile.TemporaryDirectory() as tmp, harness(Path(tmp)) as through_protege:
            for _ in range(args.rounds):  # interleaved, so the machine's drift hits both
                raws.append(raw_turns(base_url, args.turns))
                harnesses.append(through_protege(args.turns))
    finally:
        server.terminate()
        server.wait()
    raw, through = statistics.median(raws), statistics.median(harnesses)
    print(
        f"one tool-call turn (2 requests), {args.rounds} rounds of {args.turns} turns each, "
        "client-side CPU per turn (median of the rounds)"
    )
    print(f"raw openai client: {raw * 1000:7.2f} ms")
    print(f"protege harness:   {through * 1000:7.2f} ms (with message, run and events stored)")
    print(
        f"ratio harness/raw: {through / raw:7.2f}x (target <= 1.5x; rounds "
        + ", ".join(f"{h / r:.2f}" for r, h in zip(raws, harnesses, strict=True))
        + ")"
    )
    protege = str(Path(sys.executable).parent / "protege")
    help_time = wall([protege, "--help"])
    click_time = wall([sys.executable, "-c", "import click"])
    print(
        f"`protege --help`: {help_time * 1000:.0f} ms wall; `python -c 'import click'`: "
        f"{click_time * 1000:.0f} ms; ratio {help_time / click_time:.2f}x"
    )


if __name__ == "__main__":
    main()
