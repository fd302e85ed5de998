"""Dispatch: running one tool call the model asked for, or refusing it, never crashing.

The backstop reads the same per-run resolution as the catalogue, so a tool the run was not
granted is refused here even if the model names it. Everything a call can do wrong (bad
JSON, arguments the schema rejects, an exception, a wrong return value, running too long)
becomes a failure result the model sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import threading
import traceback
from typing import Any

import attrs

from protege.context import RunContext
from protege.harness import events
from protege.harness.events import EventLog
from protege.harness.fence import Fence
from protege.registry import ToolEntry
from protege.result import Result, Trust, failure
from protege.tool import Tool

MAX_SCHEMA_ERRORS = 10

# The tool call being run, for what must happen at most once per call (sending mail).
current_tool_call: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "protege_tool_call", default=None
)


@attrs.frozen
class Outcome:
    """What became of one tool call: its result, and the text the model is shown."""

    call_id: str
    tool_id: str
    result: Result
    content: str
    refused: bool = False


class Dispatcher:
    """Runs the tool calls of one run against the tools that run was granted."""

    def __init__(
        self,
        granted: list[ToolEntry],
        context: RunContext,
        fence: Fence,
        log: EventLog | None,
        max_result_bytes: int,
    ) -> None:
        self.granted = {entry.id: entry for entry in granted}
        self.context = context
        self.fence = fence
        self.log = log
        self.max_result_bytes = max_result_bytes
        self.logger = context.logger

    def _record(self, kind: str, **payload: Any) -> None:
        if self.log is not None:  # tests may dispatch without a run to record on
            self.log.record(kind, **payload)

    async def dispatch(self, call: dict[str, Any]) -> Outcome:
        """Run (or refuse) one tool call from the model, recording what happened."""
        call_id = call["id"]
        tool_id = call["function"]["name"]
        raw_arguments = call["function"].get("arguments") or "{}"
        self._record(events.TOOL_CALL, call_id=call_id, tool=tool_id, arguments=raw_arguments)
        entry = self.granted.get(tool_id)
        if entry is None:
            reason = f"the tool {tool_id!r} is not available in this run"
            self._record(events.TOOL_REFUSED, call_id=call_id, tool=tool_id, reason=reason)
            return self._finish(call_id, tool_id, failure(reason), Trust.TRUSTED, refused=True)
        token = current_tool_call.set(call_id)
        try:
            result = await self._run(entry, raw_arguments)
        finally:
            current_tool_call.reset(token)
        return self._finish(call_id, tool_id, result, entry.tool_class.trust)

    async def _run(self, entry: ToolEntry, raw_arguments: str) -> Result:
        try:
            arguments = json.loads(raw_arguments)
        except json.JSONDecodeError as error:
            return failure(f"the arguments are not valid JSON ({error.msg} at {error.pos})")
        if not isinstance(arguments, dict):
            return failure("the arguments must be a JSON object")
        problems = schema_problems(entry.tool_class, arguments)
        if problems:
            return failure("the arguments do not fit the input schema: " + "; ".join(problems))
        try:
            tool = entry.tool_class()
            outcome = await asyncio.wait_for(
                self._call(tool, arguments), timeout=entry.tool_class.timeout
            )
        except TimeoutError:
            return failure(f"the tool did not finish within {entry.tool_class.timeout:g} s")
        except (Exception, SystemExit) as error:
            trace = traceback.format_exc()
            self.logger.error("tool %s raised %s", entry.id, trace)
            return failure(error).with_details(traceback=trace)
        if not isinstance(outcome, Result):
            return failure(
                f"the tool returned {type(outcome).__name__}, not a Result "
                "(a bug in the tool: it must return success(...) or failure(...))"
            )
        return outcome

    async def _call(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(tool.use):
            return await tool.use(context=self.context, **arguments)
        return await _in_daemon_thread(
            functools.partial(tool.use, context=self.context, **arguments)
        )

    def _finish(
        self, call_id: str, tool_id: str, result: Result, trust: Trust, *, refused: bool = False
    ) -> Outcome:
        trust = Trust.UNTRUSTED if Trust.UNTRUSTED in (trust, result.trust) else Trust.TRUSTED
        content = self._capped(json.dumps(result.for_model(), default=str, ensure_ascii=False))
        self._record(
            events.TOOL_RESULT,
            call_id=call_id,
            tool=tool_id,
            ok=result.ok,
            trust=str(trust),
            content=content,
            details=result.details,
        )
        shown = (
            self.fence.wrap(content, source=f"tool {tool_id}")
            if trust is Trust.UNTRUSTED
            else content
        )
        return Outcome(call_id, tool_id, attrs.evolve(result, trust=trust), shown, refused)

    def _capped(self, text: str) -> str:
        encoded = text.encode("utf-8")
        if len(encoded) <= self.max_result_bytes:
            return text
        kept = encoded[: self.max_result_bytes].decode("utf-8", errors="ignore")
        return (
            f"{kept}\n[protege: this result was cut to {self.max_result_bytes} of "
            f"{len(encoded)} bytes]"
        )


def _in_daemon_thread(call: Any) -> asyncio.Future:
    """Run a sync tool in a thread of its own that the run does not wait for.

    A sync tool past its timeout cannot be stopped; a daemon thread lets the run (and the
    process) end without it instead of waiting, as a pool's workers would.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(outcome)
        else:
            future.set_exception(error)

    def work() -> None:
        try:
            outcome, error = context.run(call), None
        except BaseException as raised:  # handed to the run, which reports it
            outcome, error = None, raised
        with contextlib.suppress(RuntimeError):  # the run already ended: nobody is waiting
            loop.call_soon_threadsafe(settle, outcome, error)

    threading.Thread(target=work, name="protege-tool", daemon=True).start()
    return future


def schema_problems(tool_class: type[Tool], arguments: dict[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` under the tool's input schema (empty if nothing)."""
    errors = sorted(_validator(tool_class).iter_errors(arguments), key=lambda e: list(e.path))
    problems = [
        f"{'/'.join(map(str, error.absolute_path)) or '(arguments)'}: {error.message}"
        for error in errors[:MAX_SCHEMA_ERRORS]
    ]
    if len(errors) > MAX_SCHEMA_ERRORS:
        problems.append(f"and {len(errors) - MAX_SCHEMA_ERRORS} more")
    return problems


@functools.cache
def _validator(tool_class: type[Tool]) -> Any:
    import jsonschema

    schema = tool_class.input_schema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)
