"""A run's audit trail: the kinds of event, writing each step as an append-only ``Event``
row, and one readable line per kind for operators.

Every kind has exactly one rendering here, next to its name. Renderings read payloads
defensively: rows written by older versions (or by hand) may lack keys or hold odd values,
and showing a run must never fail because of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from protege.models import Event, Run

MODEL_REQUEST = "model_request"
MODEL_RESPONSE = "model_response"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
TOOL_REFUSED = "tool_refused"
BUDGET_EXHAUSTED = "budget_exhausted"
DELIVERY = "delivery"
ERROR = "error"

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
EXCERPT = 160  # characters of free text (model output, arguments, results) shown per line


class EventLog:
    """Appends events to one run, numbering them as they come."""

    def __init__(self, run: Run) -> None:
        self.run_id = run.id
        self.seq = 0
        if run.attempts > 1:  # a retried run continues its trail
            last = (
                Event.select(Event.seq).where(Event.run == run).order_by(Event.seq.desc()).first()
            )
            self.seq = 0 if last is None else last.seq

    def record(self, kind: str, **payload: Any) -> None:
        """Append one event of ``kind`` with ``payload`` (plain JSON data)."""
        self.seq += 1
        Event.append(self.run_id, self.seq, kind, to_json(payload))


def render(kind: str, payload: Any) -> str:
    """One readable line for an event of ``kind``; never raises, whatever ``payload`` holds.

    Control characters (line breaks, terminal escape sequences) are shown escaped, so text
    a model or a tool wrote can neither forge lines of the trail nor drive the terminal.
    """
    fields: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {"payload": payload}
    renderer = RENDERERS.get(kind)
    if renderer is not None:
        try:
            return printable(renderer(fields))
        except Exception:  # a payload shape no renderer foresaw: show it raw rather than fail
            pass
    return printable(render_unknown(kind, payload))


def printable(text: str) -> str:
    """``text`` with every control character, line break and bidirectional override shown
    as an escape (``\\x1b``, ``\\n``), for a terminal to print as it is."""
    return _UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


def to_json(payload: Any) -> str:
    """``payload`` as JSON text any database column takes: values JSON cannot hold are
    written as their text, and lone surrogates replaced."""
    try:
        text = json.dumps(payload, default=as_text, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # keys that are not text, circles, depth
        if isinstance(payload, Mapping):
            text = json.dumps({str(k): _json_or_text(v) for k, v in payload.items()})
        else:
            text = json.dumps(as_text(payload))
    return text.encode("utf-8", "replace").decode("utf-8")


def _json_or_text(value: Any) -> Any:
    try:
        json.dumps(value, default=as_text)
        return value
    except (TypeError, ValueError, RecursionError):
        return as_text(value)


def as_text(value: Any) -> str:
    """``str(value)``, or a placeholder when even that raises."""
    try:
        return str(value)
    except BaseException:  # a hostile __str__ (SystemExit, say) must not end the run
        return f"<{type(value).__name__} that cannot be shown>"


def render_unknown(kind: str, payload: Any) -> str:
    """The line for a kind this version does not know: its name and its raw payload."""
    return f"{kind}: {excerpt(json.dumps(payload, default=str, ensure_ascii=False))}"


def excerpt(text: Any) -> str:
    """``text`` on one line, cut to ``EXCERPT`` characters."""
    text = " ".join(("" if text is None else str(text)).split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def _value(fields: Mapping[str, Any], key: str, missing: str = "?") -> str:
    value = fields.get(key)
    return missing if value is None else str(value)


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return [str(value)]


def _call_name(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return "?" if name is None else str(name)


def _render_model_request(fields: Mapping[str, Any]) -> str:
    tools = ", ".join(_listed(fields.get("tools"))) or "none"
    return (
        f"model request, turn {_value(fields, 'turn')}: "
        f"{_value(fields, 'messages')} messages; tools: {tools}"
    )


def _render_model_response(fields: Mapping[str, Any]) -> str:
    usage = fields.get("usage")
    tokens = usage.get("total_tokens") if isinstance(usage, Mapping) else None
    calls = fields.get("tool_calls")
    names = [_call_name(call) for call in calls] if isinstance(calls, list) else []
    said = f" says {excerpt(fields['content'])}" if fields.get("content") else ""
    asks = f" calls {', '.join(names)}" if names else ""
    latency = _value(fields, "latency_ms")
    return f"model{said}{asks} ({'?' if tokens is None else tokens} tokens, {latency} ms)"


def _render_tool_call(fields: Mapping[str, Any]) -> str:
    return f"  call {_value(fields, 'tool')} {excerpt(fields.get('arguments'))}"


def _render_tool_refused(fields: Mapping[str, Any]) -> str:
    return f"  REFUSED {_value(fields, 'tool')}: {_value(fields, 'reason', 'no reason recorded')}"


def _render_tool_result(fields: Mapping[str, Any]) -> str:
    ok = fields.get("ok")
    state = "ok" if ok is True else "failed" if ok is False else "unknown outcome"
    fenced = " (untrusted)" if fields.get("trust") == "untrusted" else ""
    return f"  {state}{fenced}: {excerpt(fields.get('content'))}"


def _render_budget_exhausted(fields: Mapping[str, Any]) -> str:
    return f"budget exhausted: {_value(fields, 'budget')} ({_value(fields, 'limit')})"


def _render_delivery(fields: Mapping[str, Any]) -> str:
    line = f"  delivery {_value(fields, 'status', '(status unknown)')}"
    for label in ("to", "cc", "bcc"):
        addresses = _listed(fields.get(label))
        if addresses:
            line += f" {label} {', '.join(addresses)}"
    if fields.get("subject"):
        line += f", subject {excerpt(fields['subject'])}"
    if fields.get("message_id"):
        line += f" {fields['message_id']}"
    if fields.get("repeated"):
        line += " (sent earlier by this call, not again)"
    if fields.get("error"):
        line += f": {excerpt(fields['error'])}"
    return line


def _render_error(fields: Mapping[str, Any]) -> str:
    return f"error: {_value(fields, 'error', 'no reason recorded')}"


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    MODEL_REQUEST: _render_model_request,
    MODEL_RESPONSE: _render_model_response,
    TOOL_CALL: _render_tool_call,
    TOOL_REFUSED: _render_tool_refused,
    TOOL_RESULT: _render_tool_result,
    BUDGET_EXHAUSTED: _render_budget_exhausted,
    DELIVERY: _render_delivery,
    ERROR: _render_error,
}
KINDS = tuple(RENDERERS)
