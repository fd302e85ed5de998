"""A run's audit trail: one class per kind of event, each owning its payload, its JSON
form and its one readable line; and the log that appends them as ``Event`` rows.

The harness writes these classes; ``protege runs show`` (text and ``--json``) reads them
back with ``read``. Reading is lenient: rows written by older versions (or by hand) may
lack keys or hold odd values, and showing a run must never fail because of them.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from protege.models import Event

MODEL_REQUEST = "model_request"
MODEL_RESPONSE = "model_response"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
TOOL_REFUSED = "tool_refused"
BUDGET_EXHAUSTED = "budget_exhausted"
DELIVERY = "delivery"
ERROR = "error"
RESUMED = "resumed"
CANCELLED = "cancelled"
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_ANSWERED = "approval_answered"
APPROVAL_EXPIRED = "approval_expired"
WAITING = "waiting"
LIMIT_REACHED = "limit_reached"
MODEL_UNAVAILABLE = "model_unavailable"

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
EXCERPT = 160  # characters of free text (model output, arguments, results) shown per line


@attrs.frozen(kw_only=True)
class RunEvent:
    """One step of a run. Subclasses name their ``kind`` and declare their payload.

    The declared types are what the harness writes. Rows read back are taken as they are
    (no conversion, no validation), so every ``line()`` reads its fields defensively.
    """

    kind: ClassVar[str] = ""

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RunEvent:
        """The event a stored payload describes; keys this version does not know are left
        out, keys it lacks take their defaults."""
        names = {field.name for field in attrs.fields(cls)}
        return cls(**{key: value for key, value in payload.items() if key in names})

    def as_json(self) -> dict[str, Any]:
        """The payload as stored and as ``runs show --json`` prints it."""
        return attrs.asdict(self, recurse=False)

    def line(self) -> str:
        """One readable line for operators (control characters not yet escaped)."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class ModelRequest(RunEvent):
    """A call to the model: which turn, how many messages, which tools were offered, and
    which prompt sections its system prompt carried (name, trust, origin, length, whether
    it was cut) or left out (name, source, reason)."""

    kind: ClassVar[str] = MODEL_REQUEST
    turn: int | None = None
    model: str | None = None
    messages: int | None = None
    tools: list[str] = attrs.Factory(list)
    sections: list[dict[str, Any]] = attrs.Factory(list)
    sections_left_out: list[dict[str, Any]] = attrs.Factory(list)

    def line(self) -> str:
        tools = ", ".join(_listed(self.tools)) or "none"
        turn, messages = _shown(self.turn), _shown(self.messages)
        line = f"model request, turn {turn}: {messages} messages; tools: {tools}"
        included = [_section_name(s) for s in _items(self.sections)]
        if included:
            line += f"; sections: {', '.join(included)}"
        left_out = [_section_name(s) for s in _items(self.sections_left_out)]
        if left_out:
            line += f"; left out: {', '.join(left_out)}"
        return line


@attrs.frozen(kw_only=True)
class ModelResponse(RunEvent):
    """The model's answer: its text (never sent to anyone) and the tool calls it asks for."""

    kind: ClassVar[str] = MODEL_RESPONSE
    turn: int | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] = attrs.Factory(list)
    usage: dict[str, Any] = attrs.Factory(dict)
    latency_ms: float | None = None
    model: str | None = None

    def line(self) -> str:
        tokens = self.usage.get("total_tokens") if isinstance(self.usage, Mapping) else None
        calls = self.tool_calls if isinstance(self.tool_calls, list) else []
        names = [_call_name(call) for call in calls]
        said = f" says {excerpt(self.content)}" if self.content else ""
        asks = f" calls {', '.join(names)}" if names else ""
        latency = _shown(self.latency_ms)
        return f"model{said}{asks} ({'?' if tokens is None else tokens} tokens, {latency} ms)"


@attrs.frozen(kw_only=True)
class ToolCall(RunEvent):
    """A tool call the model made, with its arguments as the model wrote them."""

    kind: ClassVar[str] = TOOL_CALL
    call_id: str | None = None
    tool: str | None = None
    arguments: str | None = None

    def line(self) -> str:
        return f"  call {_shown(self.tool)} {excerpt(self.arguments)}"


@attrs.frozen(kw_only=True)
class ToolRefused(RunEvent):
    """A call dispatch refused: a tool the run was not granted, or past a per-turn cap."""

    kind: ClassVar[str] = TOOL_REFUSED
    call_id: str | None = None
    tool: str | None = None
    reason: str | None = None

    def line(self) -> str:
        return f"  REFUSED {_shown(self.tool)}: {_shown(self.reason, 'no reason recorded')}"


@attrs.frozen(kw_only=True)
class ToolResult(RunEvent):
    """What a call gave back, as the model was shown it (``declined``: not run, not a
    failure of the tool; ``parts``: the files it gave back to be shown as themselves, by
    name, type and size, never their bytes)."""

    kind: ClassVar[str] = TOOL_RESULT
    call_id: str | None = None
    tool: str | None = None
    ok: bool | None = None
    trust: str | None = None
    content: str | None = None
    details: dict[str, Any] = attrs.Factory(dict)
    declined: bool = False
    parts: list[dict[str, Any]] = attrs.Factory(list)  # the files it showed, described
    # Not run yet: the call waits for approval (the model is told so).
    awaiting_approval: bool = False
    # The call's outcome once its approval was answered: run after a yes, or refused.
    after_approval: bool = False

    @property
    def failed(self) -> bool:
        """Whether this counts against the run's ``max_tool_failures``."""
        return self.ok is not True and not self.declined and not self.awaiting_approval

    def line(self) -> str:
        if self.awaiting_approval:
            return f"  waiting for approval: {excerpt(self.content)}"
        state = "ok" if self.ok is True else "failed" if self.ok is False else "unknown outcome"
        state = f"after approval, {state}" if self.after_approval else state
        fenced = " (untrusted)" if self.trust == "untrusted" else ""
        files = ""
        if isinstance(self.parts, list) and self.parts:
            names = [
                str(p.get("filename") or p.get("kind")) for p in self.parts if isinstance(p, dict)
            ]
            files = f" [files: {', '.join(names)}]"
        return f"  {state}{fenced}{files}: {excerpt(self.content)}"


@attrs.frozen(kw_only=True)
class BudgetExhausted(RunEvent):
    """The run stopped at one of its budgets."""

    kind: ClassVar[str] = BUDGET_EXHAUSTED
    budget: str | None = None
    limit: int | None = None

    def line(self) -> str:
        return f"budget exhausted: {_shown(self.budget)} ({_shown(self.limit)})"


@attrs.frozen(kw_only=True)
class Delivery(RunEvent):
    """Mail a tool queued through the run's ``queue_mail``, and what became of it: queued,
    then what the transport made of it."""

    kind: ClassVar[str] = DELIVERY
    status: str | None = None
    message_id: str | None = None
    to: list[str] = attrs.Factory(list)
    cc: list[str] = attrs.Factory(list)
    bcc: list[str] = attrs.Factory(list)
    subject: str | None = None
    error: str | None = None
    refused: list[dict[str, Any]] = attrs.Factory(list)
    repeated: bool = False

    def line(self) -> str:
        line = f"  delivery {_shown(self.status, '(status unknown)')}"
        for label, addresses in (("to", self.to), ("cc", self.cc), ("bcc", self.bcc)):
            if _listed(addresses):
                line += f" {label} {', '.join(_listed(addresses))}"
        if self.subject:
            line += f", subject {excerpt(self.subject)}"
        if self.message_id:
            line += f" {self.message_id}"
        if self.repeated:
            line += " (sent earlier by this call, not again)"
        if self.refused:
            line += f", refused by the relay: {excerpt(_refused(self.refused))}"
        if self.error:
            line += f": {excerpt(self.error)}"
        return line


@attrs.frozen(kw_only=True)
class RunFailed(RunEvent):
    """The run failed for a reason outside any tool (the model, the database, a bug)."""

    kind: ClassVar[str] = ERROR
    error: str | None = None

    def line(self) -> str:
        return f"error: {_shown(self.error, 'no reason recorded')}"


@attrs.frozen(kw_only=True)
class RunResumed(RunEvent):
    """The run was taken up again: by another worker after its own stopped renewing the
    lease, or after it was handed back, retried or left waiting."""

    kind: ClassVar[str] = RESUMED
    attempt: int = 0
    reason: str = ""

    def line(self) -> str:
        return f"resumed (attempt {self.attempt}): {_shown(self.reason, 'no reason recorded')}"


@attrs.frozen(kw_only=True)
class RunCancelled(RunEvent):
    """The run stopped because an operator cancelled it."""

    kind: ClassVar[str] = CANCELLED
    reason: str = ""

    def line(self) -> str:
        return f"cancelled: {_shown(self.reason, 'no reason recorded')}"


@attrs.frozen(kw_only=True)
class ApprovalRequested(RunEvent):
    """A call waits for approval: which call, who may approve, who was asked, until when
    (the secret token that matches the answer is never recorded here)."""

    kind: ClassVar[str] = APPROVAL_REQUESTED
    approval: int | None = None
    call_id: str | None = None
    tool: str | None = None
    approvers: list[str] = attrs.Factory(list)
    notified: list[str] = attrs.Factory(list)
    requested_by: str | None = None
    expires_at: str | None = None

    def line(self) -> str:
        asked = ", ".join(_listed(self.notified)) or "nobody"
        return (
            f"  approval {_shown(self.approval)} requested for {_shown(self.tool)} from "
            f"{', '.join(_listed(self.approvers)) or '?'} (mailed to {asked}), on behalf of "
            f"{_shown(self.requested_by, 'a scheduled run')}, until {_shown(self.expires_at)}"
        )


@attrs.frozen(kw_only=True)
class ApprovalAnswered(RunEvent):
    """An approver (or an operator, or the run's own sender) approved or denied a call."""

    kind: ClassVar[str] = APPROVAL_ANSWERED
    approval: int | None = None
    call_id: str | None = None
    tool: str | None = None
    decision: str | None = None
    by: str | None = None
    reason: str | None = None
    answered_at: str | None = None

    def line(self) -> str:
        why = f": {excerpt(self.reason)}" if self.reason else ""
        return (
            f"approval {_shown(self.approval)} for {_shown(self.tool)} "
            f"{_shown(self.decision, 'answered')} by {_shown(self.by)}{why}"
        )


@attrs.frozen(kw_only=True)
class ApprovalExpired(RunEvent):
    """Nobody answered an approval in time: the call does not run."""

    kind: ClassVar[str] = APPROVAL_EXPIRED
    approval: int | None = None
    call_id: str | None = None
    tool: str | None = None
    expired_at: str | None = None

    def line(self) -> str:
        return (
            f"approval {_shown(self.approval)} for {_shown(self.tool)} expired unanswered "
            f"at {_shown(self.expired_at)}"
        )


@attrs.frozen(kw_only=True)
class RunWaiting(RunEvent):
    """The run stopped for now: tool calls wait for approval; an answer resumes it."""

    kind: ClassVar[str] = WAITING
    approvals: list[int] = attrs.Factory(list)

    def line(self) -> str:
        waiting = ", ".join(_listed(self.approvals)) or "?"
        return f"waiting for approval ({waiting})"


@attrs.frozen(kw_only=True)
class LimitReached(RunEvent):
    """The run stopped before a model call: a spending limit (``limit``) was reached. It is
    held until ``until`` (naive UTC, ISO) and resumes from its events once released."""

    kind: ClassVar[str] = LIMIT_REACHED
    limit: str | None = None
    allowed: float | None = None
    used: float | None = None
    subject: str | None = None
    window_start: str | None = None
    until: str | None = None
    reason: str | None = None

    def line(self) -> str:
        why = self.reason or f"{_shown(self.limit)} ({_shown(self.used)} of {_shown(self.allowed)})"
        return f"limit reached, the run is held: {why}"


@attrs.frozen(kw_only=True)
class ModelUnavailable(RunEvent):
    """The model endpoint failed on its side: the run went back to the queue, its attempt
    given back, to go on once the endpoint answers again (the circuit breaker decides
    when). ``retry_after`` is the wait the endpoint asked for, in seconds, if it did;
    ``circuit`` the breaker's state after this failure; ``alone`` whether the endpoint
    answered the call made just before it (then the failure began no outage)."""

    kind: ClassVar[str] = MODEL_UNAVAILABLE
    error: str | None = None
    retry_after: float | None = None
    circuit: str | None = None
    # The endpoint had answered the call before this one: the failure may be this run's
    # own doing (a request too large, an answer too long), not an outage.
    alone: bool = False

    def line(self) -> str:
        line = f"model endpoint unavailable, back to the queue: {_shown(self.error, '?')}"
        if self.retry_after is not None:
            line += f" (it asked for {_shown(self.retry_after)} s)"
        if self.circuit is not None:
            line += f"; circuit {_shown(self.circuit)}"
        return line


@attrs.frozen
class UnknownEvent:
    """A stored event of a kind this version does not know, shown as it is."""

    kind: str
    payload: Any

    def as_json(self) -> Any:
        """The payload as stored."""
        return self.payload

    def line(self) -> str:
        """Its kind and its raw payload, on one line."""
        return f"{self.kind}: {excerpt(json.dumps(self.payload, default=str, ensure_ascii=False))}"


CLASSES: dict[str, type[RunEvent]] = {
    cls.kind: cls
    for cls in (
        ModelRequest,
        ModelResponse,
        ToolCall,
        ToolRefused,
        ToolResult,
        BudgetExhausted,
        Delivery,
        RunFailed,
        RunResumed,
        RunCancelled,
        ApprovalRequested,
        ApprovalAnswered,
        ApprovalExpired,
        RunWaiting,
        LimitReached,
        ModelUnavailable,
    )
}
KINDS = tuple(CLASSES)


def read(kind: str, payload: Any) -> RunEvent | UnknownEvent:
    """The typed event a stored row holds; ``UnknownEvent`` for kinds (or payloads) this
    version cannot read."""
    cls = CLASSES.get(kind)
    if cls is None:
        return UnknownEvent(kind, payload)
    try:
        return cls.from_payload(payload if isinstance(payload, Mapping) else {})
    except (TypeError, ValueError):
        return UnknownEvent(kind, payload)


def render(kind: str, payload: Any) -> str:
    """One readable line for a stored event; never raises, whatever ``payload`` holds.

    Control characters (line breaks, terminal escape sequences) are shown escaped, so text
    a model or a tool wrote can neither forge lines of the trail nor drive the terminal.
    """
    event = read(kind, payload)
    try:
        line = event.line()
    except Exception:  # a payload shape no rendering foresaw: show it raw rather than fail
        line = UnknownEvent(kind, payload).line()
    return printable(line)


@attrs.frozen
class CommittedEvent:
    """One event as it was committed to a run's trail, for listeners (``on_event``): its
    run, number, kind and time, and its payload kept as the JSON text written, so that each
    read gives a fresh copy nobody else holds."""

    run_id: int
    seq: int
    kind: str
    payload_json: str
    created_at: datetime.datetime

    @property
    def payload(self) -> Any:
        """The event's data, read afresh (a dict for every kind protege writes)."""
        return json.loads(self.payload_json)

    @property
    def typed(self) -> RunEvent | UnknownEvent:
        """The event as the harness's own class for its kind (``ModelResponse``...), read
        afresh."""
        return read(self.kind, self.payload)


class EventLog:
    """The events of one run attempt: numbered as they are recorded, kept, and written to
    the run's trail in batches, so that a turn costs one statement, not one per event.

    ``record`` may be called from tool threads as well as the run's own; ``write`` appends
    what was kept inside the caller's transaction, so an event lands together with what it
    describes (a pending delivery, the run's end).
    """

    def __init__(self, run_id: int, last_seq: int = 0) -> None:
        self.run_id = run_id
        self.seq = last_seq
        self._kept: list[tuple[int, str, str]] = []
        # Work to do in the transaction that writes the event numbered so (spending).
        self._alongside: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def record(self, event: RunEvent, *, alongside: Callable[[], None] | None = None) -> None:
        """Number ``event`` and keep it for the next ``write``; ``alongside`` is done in
        the transaction that writes it (the ledger of what an answer spent), and only then."""
        payload = to_json(event.as_json())
        with self._lock:
            self.seq += 1
            self._kept.append((self.seq, event.kind, payload))
            if alongside is not None:
                self._alongside[self.seq] = alongside

    @property
    def kept(self) -> bool:
        """Whether events wait for the next ``write``."""
        return bool(self._kept)

    def write(self) -> list[CommittedEvent]:
        """Append the kept events to the trail (one statement), in the caller's transaction;
        returns them, to be handed to listeners once that transaction is committed."""
        with self._lock:
            kept, self._kept = self._kept, []
            alongside = {
                seq: self._alongside.pop(seq) for seq, _, _ in kept if seq in self._alongside
            }
        if not kept:
            return []
        try:
            at = Event.append(self.run_id, kept)
            for work in alongside.values():
                work()
        except BaseException:
            with self._lock:  # not written: kept for the next try, in order
                self._kept[:0] = kept
                self._alongside.update(alongside)
            raise
        return [CommittedEvent(self.run_id, seq, kind, payload, at) for seq, kind, payload in kept]

    def write_now(self, event: RunEvent) -> list[CommittedEvent]:
        """Number ``event`` and append it at once, in the caller's transaction (a delivery
        lands with the pending mail it describes); on failure its number is skipped.
        Returns it as ``write`` does."""
        payload = to_json(event.as_json())
        with self._lock:
            self.seq += 1
            at = Event.append(self.run_id, [(self.seq, event.kind, payload)])
            return [CommittedEvent(self.run_id, self.seq, event.kind, payload, at)]


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


def excerpt(text: Any) -> str:
    """``text`` on one line, cut to ``EXCERPT`` characters."""
    text = " ".join(("" if text is None else str(text)).split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def _shown(value: Any, missing: str = "?") -> str:
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


def _refused(refused: Any) -> str:
    if not isinstance(refused, list):
        return str(refused)
    return ", ".join(
        f"{item.get('address')} ({item.get('code')})" if isinstance(item, Mapping) else str(item)
        for item in refused
    )


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _section_name(section: Any) -> str:
    """A recorded prompt section as a model request's line names it: its name, and whether
    it was untrusted or cut (or, for one left out, why)."""
    if not isinstance(section, Mapping):
        return str(section)
    notes = []
    if section.get("trust") == "untrusted":
        notes.append("untrusted")
    if section.get("truncated"):
        notes.append("cut")
    if section.get("reason"):
        notes.append(excerpt(str(section["reason"])))
    name = _shown(section.get("name"))
    return f"{name} ({', '.join(notes)})" if notes else name
