"""Dispatch: running one tool call the model asked for, or refusing it, never crashing.

The backstop reads the same per-run resolution as the catalogue, so a tool the run was not
granted is refused here even if the model names it. Everything a call can do wrong (bad
JSON, arguments the schema rejects, an exception, a wrong return value, running too long)
becomes a failure result the model sees. That includes the ``BaseException``s a tool may
raise (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``, a ``CancelledError`` of its
own making): they are caught in the tool's own thread or coroutine frame, before asyncio sees
them, since asyncio would carry them out of the event loop and stop the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import attrs

from protege.context import CallBook, RunContext
from protege.db import put_down_connection, take_up_connection
from protege.harness import events
from protege.harness.arguments import ArgumentsUncheckable, schema_problems
from protege.harness.events import EventLog
from protege.harness.fence import Fence
from protege.plugins import error_line
from protege.registry import ToolEntry
from protege.result import Part, Result, Trust, failure
from protege.schema import MAX_ARGUMENT_DEPTH, nested_deeper_than
from protege.tool import Tool

# Deeper arguments are refused: no tool needs them, and validating them recurses.


class _Escaped(Exception):
    """Carries a ``BaseException`` a tool raised out of the tool's frame as an ordinary
    exception, so that asyncio never sees the original."""

    def __init__(self, original: BaseException, trace: str) -> None:
        super().__init__(error_line(original))
        self.original = original
        self.trace = trace


@attrs.frozen
class Outcome:
    """What became of one tool call: its result, the text the model is shown, and the files
    (images, PDFs) it gave back to show the model as themselves."""

    call_id: str
    tool_id: str
    result: Result
    content: str
    refused: bool = False
    declined: bool = False
    # The events that tell what became of the call, for the run's trail in the model's order.
    trail: tuple[events.RunEvent, ...] = ()

    @property
    def parts(self) -> tuple[Part, ...]:
        """The files the result carries to be shown as themselves."""
        return self.result.parts


class Dispatcher:
    """Runs the tool calls of one run against the tools that run was granted."""

    def __init__(
        self,
        granted: list[ToolEntry],
        context: RunContext,
        fence: Fence,
        max_result_bytes: int,
        tool_threads: int = 64,
        calls: CallBook | None = None,
    ) -> None:
        self.granted = {entry.id: entry for entry in granted}
        self.context = context
        self.fence = fence
        self.max_result_bytes = max_result_bytes
        self.logger = context.logger
        self.tool_threads = tool_threads
        # Where the calls this dispatcher runs are issued: the run's queue takes their mail.
        self.calls = calls if calls is not None else CallBook()

    @staticmethod
    def announce(call: dict[str, Any], log: EventLog) -> None:
        """Put the model's call on the run's record, before it is run or refused."""
        log.record(
            events.ToolCall(
                call_id=call["id"],
                tool=call["function"]["name"],
                arguments=call["function"].get("arguments") or "{}",
            )
        )

    async def dispatch(self, call: dict[str, Any]) -> Outcome:
        """Run (or refuse) one tool call from the model; the outcome carries the events
        that tell what happened."""
        call_id = call["id"]
        tool_id = call["function"]["name"]
        raw_arguments = call["function"].get("arguments") or "{}"
        entry = self.granted.get(tool_id)
        if entry is None:
            reason = f"the tool {tool_id!r} is not available in this run"
            refusal = events.ToolRefused(call_id=call_id, tool=tool_id, reason=reason)
            return self._finish(
                call_id, tool_id, failure(reason), Trust.TRUSTED, refused=True, before=(refusal,)
            )
        # Each call is handed a context of its own, naming it: mail the tool queues through
        # it is tied to this call, and refused once the call has returned or timed out.
        running = self.calls.issue(call_id, tool_id)
        try:
            result = await self._run(entry, raw_arguments, attrs.evolve(self.context, call=running))
        finally:
            running.end()
        return self._finish(call_id, tool_id, result, entry.tool_class.trust)

    def decline(self, call: dict[str, Any], reason: str) -> Outcome:
        """Answer a tool call with a failure without running it; the outcome says why."""
        call_id = call["id"]
        tool_id = call["function"]["name"]
        refusal = events.ToolRefused(call_id=call_id, tool=tool_id, reason=reason)
        return self._finish(
            call_id,
            tool_id,
            failure(reason),
            Trust.TRUSTED,
            refused=True,
            declined=True,
            before=(refusal,),
        )

    def unrun(
        self, call: dict[str, Any], result: Result, *, awaiting_approval: bool = False
    ) -> Outcome:
        """Answer a tool call with ``result`` without running it: it waits for approval, or
        its approval was refused. Not a failure of the tool."""
        return self._finish(
            call["id"],
            call["function"]["name"],
            result,
            result.trust,
            declined=True,
            awaiting_approval=awaiting_approval,
        )

    def problem(self, call: dict[str, Any]) -> str | None:
        """Why dispatch would refuse ``call`` before running it (a tool not granted,
        arguments that do not parse or fit the schema), or None."""
        entry = self.granted.get(call["function"]["name"])
        if entry is None:
            return "the tool is not available in this run"
        checked = _arguments(entry, call["function"].get("arguments") or "{}")
        return checked.reason if isinstance(checked, Result) else None

    async def _run(self, entry: ToolEntry, raw_arguments: str, context: RunContext) -> Result:
        arguments = _arguments(entry, raw_arguments)
        if isinstance(arguments, Result):
            return arguments
        try:
            outcome = await asyncio.wait_for(
                self._call(entry, arguments, context), timeout=entry.tool_class.timeout
            )
        except TimeoutError:
            return failure(f"the tool did not finish within {entry.tool_class.timeout:g} s")
        except _Escaped as escaped:
            self.logger.error("tool %s raised %s", entry.id, escaped.trace)
            return failure(escaped.original).with_details(traceback=escaped.trace)
        except Exception as error:
            trace = traceback.format_exc()
            self.logger.error("tool %s raised %s", entry.id, trace)
            return failure(error).with_details(traceback=trace)
        if not isinstance(outcome, Result):
            return failure(
                f"the tool returned {type(outcome).__name__}, not a Result "
                "(a bug in the tool: it must return success(...) or failure(...))"
            )
        return outcome

    async def _call(self, entry: ToolEntry, arguments: dict[str, Any], context: RunContext) -> Any:
        """Run the tool in a thread of its own, an async tool on an event loop of its own,
        so that a tool that blocks holds up nothing but itself."""
        slots = _slots(self.tool_threads)
        await slots.acquire()  # waiting for a free thread counts against the call's timeout
        held = [True]

        def release() -> None:  # once: when the tool ends, or when its call is over
            if held.pop() if held else False:
                slots.release()

        apart = None
        if inspect.iscoroutinefunction(entry.tool_class.use):
            apart = _Apart()
            work = functools.partial(_use_apart, entry.tool_class, context, arguments, apart)
            watch = asyncio.create_task(_watch(apart, entry, self.logger))
        else:
            work = functools.partial(_use, entry.tool_class, context, arguments)
        try:
            return await _in_daemon_thread(work, release)
        except asyncio.CancelledError:
            # The timeout: the call is over for the run, and its slot goes to the next one.
            # An async tool stops at its next await; a sync one runs on in its thread.
            release()
            if apart is not None:
                apart.cancel()
            else:
                self.logger.warning(
                    "tool %s is still running past its timeout of %g s; its thread is left "
                    "to finish (it can no longer queue mail)",
                    entry.id,
                    entry.tool_class.timeout,
                )
            raise
        finally:
            if apart is not None:
                watch.cancel()

    def _finish(
        self,
        call_id: str,
        tool_id: str,
        result: Result,
        trust: Trust,
        *,
        refused: bool = False,
        declined: bool = False,
        before: tuple[events.RunEvent, ...] = (),
        awaiting_approval: bool = False,
    ) -> Outcome:
        trust = Trust.UNTRUSTED if Trust.UNTRUSTED in (trust, result.trust) else Trust.TRUSTED
        try:
            content = json.dumps(result.for_model(), default=events.as_text, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):  # non-text keys, circles, depth
            result = failure(
                "the tool's result cannot be written as JSON (keys that are not text, "
                "circular or too deeply nested data)"
            )
            content = json.dumps(result.for_model(), ensure_ascii=False)
        content = content.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
        content = self._capped(content)
        recorded = events.ToolResult(
            call_id=call_id,
            tool=tool_id,
            ok=result.ok,
            trust=str(trust),
            content=content,
            details=result.details,
            declined=declined,  # not run, so not a failure of the tool
            parts=[part.describe() for part in result.parts],
            awaiting_approval=awaiting_approval,
        )
        shown = (
            self.fence.wrap(content, source=f"tool {tool_id}")
            if trust is Trust.UNTRUSTED
            else content
        )
        return Outcome(
            call_id,
            tool_id,
            attrs.evolve(result, trust=trust),
            shown,
            refused,
            declined,
            (*before, recorded),
        )

    def _capped(self, text: str) -> str:
        encoded = text.encode("utf-8")
        if len(encoded) <= self.max_result_bytes:
            return text
        kept = encoded[: self.max_result_bytes].decode("utf-8", errors="ignore")
        return (
            f"{kept}\n[protege: this result was cut to {self.max_result_bytes} of "
            f"{len(encoded)} bytes]"
        )


def _arguments(entry: ToolEntry, raw_arguments: str) -> dict[str, Any] | Result:
    """The call's arguments, parsed and checked against the tool's schema, or the failure
    that says why they cannot be used."""
    too_deep = f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    try:
        arguments = json.loads(raw_arguments)
    except json.JSONDecodeError as error:
        return failure(f"the arguments are not valid JSON ({error.msg} at {error.pos})")
    except RecursionError:
        return failure(too_deep)
    except ValueError as error:  # a number of more digits than Python converts
        return failure(f"the arguments cannot be read: {error}")
    if not isinstance(arguments, dict):
        return failure("the arguments must be a JSON object")
    if nested_deeper_than(arguments, MAX_ARGUMENT_DEPTH):
        return failure(too_deep)
    try:
        problems = schema_problems(entry.tool_class, arguments)
    except ArgumentsUncheckable as error:
        return failure(f"the arguments could not be checked: {error}")
    if problems:
        return failure("the arguments do not fit the input schema: " + "; ".join(problems))
    return arguments


def _use(tool_class: type[Tool], context: RunContext, arguments: dict[str, Any]) -> Any:
    return tool_class().use(context=context, **arguments)


async def _guarded(tool_class: type[Tool], context: RunContext, arguments: dict[str, Any]) -> Any:
    """Await an async tool, turning any ``BaseException`` it raises into ``_Escaped``.

    A ``CancelledError`` while this task is really being cancelled (the timeout, or the
    run's own task) is the cancellation itself, and goes on.
    """
    try:
        return await _use(tool_class, context, arguments)
    except Exception:
        raise
    except asyncio.CancelledError as error:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise _Escaped(error, traceback.format_exc()) from None
    except BaseException as error:
        raise _Escaped(error, traceback.format_exc()) from None


def _in_daemon_thread(call: Any, done: Callable[[], None]) -> asyncio.Future:
    """Run a tool in a thread of its own that the run does not wait for; ``done`` is called
    on the event loop when the thread ends (however late).

    A sync tool past its timeout cannot be stopped; a daemon thread lets the run (and the
    process) end without it instead of waiting, as a pool's workers would.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Any, error: BaseException | None) -> None:
        done()
        if future.done():
            return
        if error is None:
            future.set_result(outcome)
        else:
            future.set_exception(error)

    def work() -> None:
        try:
            outcome, error = context.run(call), None
        except Exception as raised:  # handed to the run, which reports it
            outcome, error = None, raised
        except BaseException as raised:  # asyncio would re-raise these out of the event loop
            outcome, error = None, _Escaped(raised, traceback.format_exc())
        with contextlib.suppress(RuntimeError):  # the run already ended: nobody is waiting
            loop.call_soon_threadsafe(settle, outcome, error)

    _TOOL_THREADS.submit(work)
    return future


def _connected(work: Callable[[], None]) -> None:
    take_up_connection()
    try:
        work()
    finally:
        # The next call on this thread starts clean, and an idle thread holds no
        # connection of its own (PostgreSQL counts them) and no lock (SQLite's write
        # lock blocks everyone): a transaction the call left open is rolled back.
        put_down_connection()


class _DaemonThreads:
    """Threads for tools, kept between calls (starting a thread costs more than most tool
    calls), and daemons, so that a tool stuck past its timeout never holds the process
    open at exit as a ``ThreadPoolExecutor``'s worker would. How many run at once is
    bounded by the caller (``_slots``): a stuck tool keeps its thread, and a new one is
    started when none is idle."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        # The call works where its run does (the application's database, say).
        self._work.put(functools.partial(contextvars.copy_context().run, _connected, work))
        if start:
            threading.Thread(target=self._serve, name="protege-tool", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._work.get()()
            with self._lock:
                self._idle += 1


_TOOL_THREADS = _DaemonThreads()


# How long an async tool's own loop may go without turning before the tool is reported
# as blocking it (a blocking call, such as time.sleep, inside ``async def use``).
BLOCKING_AFTER = 0.5
_PULSE = 0.05


class _Apart:
    """The event loop an async tool runs on, apart from the runs' loop: when it last turned,
    and how to cancel the tool."""

    def __init__(self) -> None:
        self.last_turn = time.monotonic()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.cancelled = False

    async def pulse(self) -> None:
        while True:
            self.last_turn = time.monotonic()
            await asyncio.sleep(_PULSE)

    def cancel(self) -> None:
        self.cancelled = True
        if self.loop is not None and self.task is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: it ended already
                self.loop.call_soon_threadsafe(self.task.cancel)


def _use_apart(
    tool_class: type[Tool], context: RunContext, arguments: dict[str, Any], apart: _Apart
) -> Any:
    """Run an async tool to its end on a new event loop in this thread."""

    async def main() -> Any:
        apart.loop, apart.task = asyncio.get_running_loop(), asyncio.current_task()
        if apart.cancelled:
            raise asyncio.CancelledError
        pulse = asyncio.create_task(apart.pulse())
        try:
            return await _guarded(tool_class, context, arguments)
        finally:
            pulse.cancel()

    return asyncio.run(main())


async def _watch(apart: _Apart, entry: ToolEntry, logger: Any) -> None:
    """Report, once, an async tool whose loop stopped turning: it is blocking it."""
    while True:
        await asyncio.sleep(BLOCKING_AFTER / 2)
        stalled = time.monotonic() - apart.last_turn
        if stalled > BLOCKING_AFTER:
            logger.warning(
                "async tool %s is blocking its event loop (%.1f s without a turn): it makes a "
                "blocking call (time.sleep, a sync client) inside async def use; it runs apart, "
                "so no other run waits for it, and it is cut off after its timeout of %g s",
                entry.id,
                stalled,
                entry.tool_class.timeout,
            )
            return


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots(count: int) -> asyncio.Semaphore:
    """The running loop's bound on tool threads alive at once (stuck ones included)."""
    loop = asyncio.get_running_loop()
    found = _SLOTS.get(loop)
    if found is None:
        found = _SLOTS[loop] = asyncio.Semaphore(count)
    return found
