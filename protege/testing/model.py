"""A scripted model: a Chat Completions server on loopback that answers from a script.

The harness talks to it with the real ``openai`` client over real HTTP, so a test sees
exactly what a model would have been offered and shown::

    scripted_model.script(tool_call("lookup_order", order_number="SCP-1042"), say("Done."))
    ...run the agent...
    assert scripted_model.offered_tools(0) == ["check_flavor_stock", "lookup_order"]
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Step:
    """One scripted answer: a message, one or more tool calls, or an HTTP error."""

    content: str | None = None
    calls: tuple[tuple[str, str], ...] = ()
    status: int = 200
    error: str | None = None
    raw: bytes | None = None  # the whole body of a 200 answer, exactly
    headers: tuple[tuple[str, str], ...] = ()  # sent with the answer


def say(text: str) -> Step:
    """The model answers in plain text (ending the run)."""
    return Step(content=text)


def tool_call(name: str, **arguments: Any) -> Step:
    """The model calls one tool with ``arguments``."""
    return Step(calls=((name, json.dumps(arguments)),))


def raw_tool_call(name: str, arguments: str) -> Step:
    """The model calls one tool with ``arguments`` exactly as given (say, broken JSON)."""
    return Step(calls=((name, arguments),))


def tool_calls(calls: list[Step | tuple[str, dict[str, Any]]]) -> Step:
    """The model calls several tools in one turn, in this order."""
    flat: list[tuple[str, str]] = []
    for call in calls:
        if isinstance(call, Step):
            flat.extend(call.calls)
        else:
            name, arguments = call
            flat.append((name, json.dumps(arguments)))
    return Step(calls=tuple(flat))


def raw_answer(body: str | bytes | dict[str, Any] | list[Any]) -> Step:
    """The endpoint answers 200 with exactly ``body`` (JSON of it, unless it is text or
    bytes already): a broken or hostile answer, for tests of what protege makes of it."""
    if isinstance(body, dict | list):
        body = json.dumps(body)
    return Step(raw=body.encode() if isinstance(body, str) else body)


def http_error(
    status: int, message: str | None = None, *, retry_after: str | float | None = None
) -> Step:
    """The endpoint answers with an HTTP error (429 and 5xx are retried by the client),
    with a ``Retry-After`` header when ``retry_after`` is given (seconds, or an HTTP date);
    without one, 429 and 5xx answers ask for a millisecond (``retry-after-ms``), to keep
    the client's own retries quick."""
    headers = () if retry_after is None else (("Retry-After", str(retry_after)),)
    return Step(status=status, error=message or f"scripted error {status}", headers=headers)


class ScriptedModel:
    """The server. ``requests`` holds every request body it received, parsed, and
    ``authorizations`` the Authorization header of each."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.steps: list[Step] = []
        self.threads: dict[str, list[Step]] = {}
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL of this server."""
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}/v1"

    def start(self) -> ScriptedModel:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def script(self, *steps: Step) -> None:
        """Queue the answers to give, in order."""
        with self._lock:
            self.steps.extend(steps)

    def script_for(self, marker: str, *steps: Step) -> None:
        """Queue answers for the requests whose conversation contains ``marker`` (say, a
        word of the email a run answers), so that runs carried out at once each get their
        own script whatever order their requests come in."""
        with self._lock:
            self.threads.setdefault(marker, []).extend(steps)

    def offered_tools(self, request: int = -1) -> list[str]:
        """The tool names offered in one request (the last by default)."""
        tools = self.requests[request].get("tools", [])
        return [tool["function"]["name"] for tool in tools]

    def shown(self, request: int = -1) -> list[dict[str, Any]]:
        """The messages the model was shown in one request (the last by default)."""
        return self.requests[request]["messages"]

    def _answer(
        self, body: dict[str, Any], authorization: str | None = None
    ) -> tuple[int, dict[str, Any] | bytes, tuple[tuple[str, str], ...]]:
        with self._lock:
            self.requests.append(body)
            self.authorizations.append(authorization)
            steps = self._steps_for(body)
            if not steps:
                left = f"scripted model: no step left for request {len(self.requests)}"
                return 400, _error(left), ()
            step = steps.pop(0)
        return (*self._completion(step, body), step.headers)

    def _completion(self, step: Step, body: dict[str, Any]) -> tuple[int, dict[str, Any] | bytes]:
        """The HTTP status and body that answer ``body`` with ``step``."""
        if step.status != 200:
            return step.status, _error(step.error or "error")
        if step.raw is not None:
            return 200, step.raw
        n = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for i, (name, arguments) in enumerate(step.calls)
            ]
        prompt_tokens = len(json.dumps(body["messages"])) // 4
        return 200, {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if step.calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 10,
                "total_tokens": prompt_tokens + 10,
            },
        }

    def _steps_for(self, body: dict[str, Any]) -> list[Step]:
        if self.threads:
            text = json.dumps(body.get("messages", []), ensure_ascii=False)
            for marker, steps in self.threads.items():
                if marker in text:
                    return steps
        return self.steps

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body in two writes: no 40 ms stall

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                answer: dict[str, Any] | bytes
                headers: tuple[tuple[str, str], ...] = ()
                if not self.path.endswith("/chat/completions"):
                    status, answer = 404, _error(f"no route {self.path}")
                else:
                    authorization = self.headers.get("Authorization")
                    status, answer, headers = model._answer(body, authorization)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                if (status == 429 or status >= 500) and not headers:
                    self.send_header("retry-after-ms", "1")  # keep the client's retries quick
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "scripted_error", "code": None}}
