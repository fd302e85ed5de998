"""A fake OpenAI-compatible Chat Completions server on loopback, for benchmarks and crash tests.

It answers by what it is sent, not from a fixed script, so that many runs can interleave:
a conversation that has made ``k`` tool calls so far gets the ``k``-th call of ``--calls``
(``send_email`` replies; any other name is called with no arguments), and once they are all
made, a plain answer. Each answer waits ``--latency`` seconds (plus up to ``--jitter``
more, at random), as a real model would, without holding up the others: one asyncio loop,
HTTP/1.1 with keep-alive, nothing but the standard library.

    python bench/fake_model.py --latency 0.05 --calls send_email

prints the port it listens on, then serves until killed. ``start`` does that from Python.
``POST /hold`` makes it keep every answer until ``POST /release`` (a benchmark's way to have
runs wait while it measures something else).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path


def answer(body: dict, calls: list[str]) -> dict:
    """The completion for request ``body``: the next of ``calls``, or a plain answer."""
    made = sum(len(m.get("tool_calls") or []) for m in body["messages"] if m["role"] == "assistant")
    if made < len(calls):
        name = calls[made]
        arguments = (
            {"mode": "reply", "body": "Thank you, we are on it."} if name == "send_email" else {}
        )
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{made + 1}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
    else:
        message = {"role": "assistant", "content": "Answered."}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


async def _serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, options: argparse.Namespace
) -> None:
    calls = [c for c in options.calls.split(",") if c]
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith((b"POST /hold ", b"POST /release ")):
                if head.startswith(b"POST /hold "):
                    _RELEASED.clear()
                else:
                    _RELEASED.set()
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length)) if length else {}
            await _RELEASED.wait()
            await asyncio.sleep(options.latency + random.uniform(0, options.jitter))
            data = json.dumps(answer(body, calls)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


_RELEASED: asyncio.Event


async def _main(options: argparse.Namespace) -> None:
    global _RELEASED
    _RELEASED = asyncio.Event()
    _RELEASED.set()
    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, options), "127.0.0.1", options.port, backlog=1024
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def start(latency: float, calls: str, jitter: float = 0.0) -> tuple[subprocess.Popen, str]:
    """Start the server in a process of its own; returns it and its base URL (``/v1``)."""
    options = ["--latency", str(latency), "--jitter", str(jitter), "--calls", calls]
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__)), *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}/v1"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--calls", default="send_email")
    asyncio.run(_main(parser.parse_args()))
