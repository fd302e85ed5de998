"""One run, start to finish: context, tools, model turns, dispatch, budgets, audit trail."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from protege.config import Config, RunSettings
from protege.context import RunContext
from protege.errors import ProtegeError
from protege.harness import events
from protege.harness.dispatch import CallOver, Dispatcher, LiveCalls, Outcome
from protege.harness.events import EventLog
from protege.harness.fence import Fence
from protege.harness.model import ModelClient
from protege.harness.parts import PartBudget, Shown, fenced_parts
from protege.harness.prompt import build_messages, replay
from protege.models import Agent, Blob, Run
from protege.models.base import utcnow
from protege.models.runs import DONE, FAILED, QUEUED, RUNNING
from protege.plugins import error_line
from protege.registry import Manifest


class SendMail(Protocol):
    """Sends mail as an agent, for a run (or none), and says what became of it."""

    def __call__(
        self,
        *,
        agent: Agent,
        run: Run | None,
        mail: dict[str, Any],
        attachments: Sequence[Blob | int] = (),
    ) -> dict[str, Any]: ...


class RunResources(Protocol):
    """What a run is handed by whoever carries it out (``protege.installation`` builds the
    real one): the configuration, the tools on offer, and the means to send mail."""

    @property
    def config(self) -> Config: ...

    @property
    def manifest(self) -> Manifest: ...

    @property
    def deliver(self) -> SendMail: ...


logger = logging.getLogger("protege.run")


class _CorrelatedLogger(logging.LoggerAdapter):
    def __init__(self, logger: logging.Logger, correlation_id: str) -> None:
        super().__init__(logger, {"correlation_id": correlation_id})
        self.correlation_id = correlation_id

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.correlation_id}] {msg}", kwargs


def execute(run: Run, installation: RunResources, *, model: ModelClient | None = None) -> Run:
    """Carry out ``run`` to the end and return it, done or failed; nothing the run does
    raises out of here (in the main thread, an operator's Ctrl-C still stops the process
    after the run is marked failed).

    A run that is still queued is claimed first. The model's plain text is stored as an
    event and never delivered: mail goes out only through tools, by the installation's
    ``deliver``.
    """
    if run.status == QUEUED:
        started = utcnow()
        if not Run.claim(run.id, started):
            raise ProtegeError(f"run {run.id} was claimed by another worker")
        run.status, run.attempts, run.started_at = RUNNING, run.attempts + 1, started
    log = EventLog(run)
    try:
        model = ModelClient(installation.config.model) if model is None else model
        asyncio.run(_turns(run, installation, model, log))
    except ProtegeError as error:
        _fail(run, log, str(error))
    except Exception as error:  # a bug in protege itself: the run fails, the worker lives
        logger.exception("run %s failed unexpectedly", run.id)
        _fail(run, log, f"internal error: {type(error).__name__}: {error}")
    except BaseException as error:  # nothing a run does may stop the thread carrying it out
        logger.exception("run %s was interrupted", run.id)
        _fail(run, log, f"interrupted: {error_line(error)}")
        if isinstance(error, KeyboardInterrupt | SystemExit) and _in_main_thread():
            raise  # the operator stopping the process (Ctrl-C), not something a run did
    return run


def abandon(run: Run, reason: str) -> None:
    """Mark ``run`` failed with ``reason`` if it is still running (its worker gave up on it)."""
    if run.status == RUNNING:
        _fail(run, EventLog(run), reason)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


async def _turns(run: Run, installation: RunResources, model: ModelClient, log: EventLog) -> None:
    config = installation.config
    live = LiveCalls()
    context = _context(run, installation, log, live)
    granted = run.agent.resolve_for(context, installation.manifest).tools  # catalogue, backstop
    tools = [
        {
            "type": "function",
            "function": {
                "name": entry.id,
                "description": entry.description,
                "parameters": entry.tool_class.input_schema,
            },
        }
        for entry in granted
    ]
    fence = Fence()
    budget = PartBudget(config.model, config.files)  # files shown as themselves, per run
    messages = build_messages(run, fence, config, budget)
    dispatcher = Dispatcher(granted, context, fence, log, config.runs.max_result_bytes, live)
    limits = config.runs
    failures = first_turn = 0
    if log.seq:  # a retried run resumes from its own trail: nothing done is done again
        timeline = run.timeline()
        replayed, pending = replay(timeline, fence)
        messages += replayed
        # Turns the model answered: a request whose call failed (the reason for the retry)
        # got no response and is not held against the budget.
        trail = [events.read(e.kind, e.payload) for e in timeline]
        first_turn = sum(1 for e in trail if isinstance(e, events.ModelResponse))
        failures = sum(1 for e in trail if isinstance(e, events.ToolResult) and e.failed)
        turn_calls: list[dict[str, Any]] = next(
            (m["tool_calls"] for m in reversed(replayed) if m.get("tool_calls")), []
        )
        failures = await _answer(
            dispatcher, pending, turn_calls, limits, failures, messages, budget
        )
        last = replayed[-1] if replayed else {}
        if last.get("role") == "assistant" and not last.get("tool_calls"):
            _finish(run, DONE)  # it had given its final answer before it stopped
            return
    for turn in range(first_turn + 1, limits.max_model_turns + 1):
        log.record(
            events.ModelRequest(
                turn=turn,
                model=config.model.model,
                messages=len(messages),
                tools=[entry.id for entry in granted],
            )
        )
        reply = model.complete(messages, tools)
        log.record(
            events.ModelResponse(
                turn=turn,
                content=reply.content,
                tool_calls=reply.tool_calls,
                usage=reply.usage,
                latency_ms=round(reply.latency_ms, 1),
                model=reply.model,
            )
        )
        messages.append(reply.as_message())
        if not reply.tool_calls:
            _finish(run, DONE)
            return
        calls = reply.tool_calls
        failures = await _answer(dispatcher, calls, calls, limits, failures, messages, budget)
        if failures > limits.max_tool_failures:
            _exhausted(run, log, "max_tool_failures", limits.max_tool_failures)
            return
    _exhausted(run, log, "max_model_turns", limits.max_model_turns)


async def _answer(
    dispatcher: Dispatcher,
    calls: list[dict[str, Any]],
    turn_calls: list[dict[str, Any]],
    limits: RunSettings,
    failures: int,
    messages: list[dict[str, Any]],
    budget: PartBudget,
) -> int:
    """Answer ``calls`` (all or the rest of ``turn_calls``, one turn's calls in the model's
    order), each with a tool message; returns the run's tool failures so far. Files the
    results carry (images, PDFs) follow in one user message, since a tool message cannot
    hold them.

    Calls past ``max_tool_calls_per_turn`` in their turn are declined, not run, and do not
    count as failures: the model may ask for them again.
    """
    cap = limits.max_tool_calls_per_turn
    position = {call["id"]: index for index, call in enumerate(turn_calls)}
    files: list[tuple[str, Outcome]] = []
    for call in calls:
        if failures > limits.max_tool_failures:
            content = '{"ok": false, "reason": "not run: the run is out of budget"}'
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            continue
        if position.get(call["id"], 0) >= cap:
            outcome = dispatcher.decline(
                call,
                f"not run: at most {cap} tool calls are run per turn and this turn asked for "
                f"{len(turn_calls)}; call it again in your next turn if you still need it",
            )
        else:
            outcome = await dispatcher.dispatch(call)
            failures += 0 if outcome.result.ok else 1
        messages.append(
            {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.content}
        )
        files += [(outcome.call_id, outcome)] if outcome.parts else []
    if files:
        messages.append(_files_message(files, budget, dispatcher.fence))
    return failures


_A = {"image": "an image", "pdf": "a PDF"}


def _files_message(
    files: list[tuple[str, Outcome]], budget: PartBudget, fence: Fence
) -> dict[str, Any]:
    """The user message showing the files that tool results of one turn gave back."""
    labelled = [
        Shown(
            label=f"{part.filename or part.kind} from {outcome.tool_id} (call {call_id}):",
            ours=f"{_A[part.kind]} from {outcome.tool_id} (call {call_id})",
            part=part,
        )
        for call_id, outcome in files
        for part in outcome.parts
    ]
    parts, left_out = fenced_parts(labelled, budget, fence, "tool results")
    intro = "The files your tool calls gave back" + (" follow." if parts else ":")
    notes = [f"(protege: {line})" for line in left_out]
    text = "\n".join([intro, *notes])
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def _context(run: Run, installation: RunResources, log: EventLog, live: LiveCalls) -> RunContext:
    agent: Agent = run.agent
    run_logger = _CorrelatedLogger(logger, run.correlation_id)

    def deliver(mail: Any, attachments: Any = ()) -> dict[str, Any]:
        try:
            live.check()
        except CallOver:
            run_logger.warning(
                "run %s: a tool call that is over tried to send mail (to %s); refused",
                run.id,
                _recipients(mail),
            )
            raise

        outcome = installation.deliver(
            agent=agent, run=run, mail=dict(mail), attachments=attachments
        )
        log.record(events.Delivery.from_payload(outcome))
        return outcome

    return RunContext(
        agent=agent,
        message=run.message if run.message_id is not None else None,
        responsibility=run.responsibility if run.responsibility_id is not None else None,
        deliver=deliver,
        config=installation.config,
        logger=run_logger,
        correlation_id=run.correlation_id,
    )


def _recipients(mail: Any) -> str:
    try:
        fields = dict(mail)
    except (TypeError, ValueError):
        return "?"
    found = []
    for key in ("to", "cc", "bcc"):
        value = fields.get(key) or []
        found += [value] if isinstance(value, str) else [str(a) for a in value]
    return ", ".join(found) or "nobody"


def _exhausted(run: Run, log: EventLog, budget: str, limit: int) -> None:
    log.record(events.BudgetExhausted(budget=budget, limit=limit))
    _finish(run, FAILED, f"budget exhausted: {budget} ({limit})")


def _fail(run: Run, log: EventLog, error: str) -> None:
    log.record(events.RunFailed(error=error))
    _finish(run, FAILED, error)


def _finish(run: Run, status: str, error: str | None = None) -> None:
    run.finish(status, error)
