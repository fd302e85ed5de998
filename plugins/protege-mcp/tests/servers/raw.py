"""An MCP server written by hand over stdio (no SDK), to answer in ways the SDK's servers
never would. Its first argument chooses the listing: ``ping`` (one plain tool), ``nan``
(a schema holding NaN, which JSON cannot), ``garbled`` (not JSON-RPC at all), ``titled``
(a tool with a title and no description; the title is the second argument)."""

from __future__ import annotations

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "ping"
TITLE = sys.argv[2] if len(sys.argv) > 2 else "Weather lookup"


def answer(request_id: object, result: str) -> None:
    # Written by hand, so that a result JSON would refuse (NaN) still goes out.
    sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {result}}}\n')
    sys.stdout.flush()


def listing() -> str | None:
    if MODE == "nan":
        schema = '{"type": "object", "properties": {"x": {"type": "number", "maximum": NaN}}}'
        return f'{{"tools": [{{"name": "nanny", "description": "n", "inputSchema": {schema}}}]}}'
    if MODE == "garbled":
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        return None
    if MODE == "titled":
        tool = {"name": "titled", "title": TITLE, "inputSchema": {"type": "object"}}
        return json.dumps({"tools": [tool]})
    return json.dumps(
        {"tools": [{"name": "ping", "description": "Pings.", "inputSchema": {"type": "object"}}]}
    )


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message.get("method") == "initialize":
        version = message["params"]["protocolVersion"]
        info = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
        answer(message["id"], json.dumps(info))
    elif message.get("method") == "tools/list":
        found = listing()
        if found is not None:
            answer(message["id"], found)
    else:
        sys.stdout.write(
            json.dumps(
                {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}
            )
            + "\n"
        )
        sys.stdout.flush()
