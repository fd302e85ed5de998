"""One run, start to finish: context, tools, model turns, dispatch, budgets, audit trail.

A run is a coroutine: it spends its life waiting on the model, so one event loop carries
many at once. Database work goes to a thread pool (``io``), never onto the loop; a run's
events are kept in memory and written in batches, each batch in one transaction with the
renewal of the run's lease, so that a worker that lost its lease writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

import attrs
import peewee

from protege import dbroute, failpoints
from protege.config import Config, RunSettings
from protege.context import Call, CallBook, CallOver, RunContext
from protege.db import connection_broken, database, put_down_connection
from protege.errors import ProtegeError
from protege.harness import events
from protege.harness.approval import Desk
from protege.harness.approval import note as approval_note
from protege.harness.cancels import Cancellation, CancelWatch
from protege.harness.dispatch import Dispatcher, Outcome
from protege.harness.events import CommittedEvent, EventLog
from protege.harness.fence import Fence
from protege.harness.listeners import EventDispatcher, snapshot
from protege.harness.model import EndpointFailing, ModelClient, ModelReply, close_clients
from protege.harness.parts import PartBudget, Shown, fenced_parts
from protege.harness.prompt import build_messages, replay
from protege.harness.sections import RunSections, gather
from protege.limit_settings import SPENDING_LIMITS
from protege.limits import spending
from protege.limits.admission import Hold, spending_limit_reached
from protege.limits.circuit import Breaker, State, alert_mail
from protege.limits.fairness import last_turn
from protege.limits.holding import hold_running
from protege.limits.notices import alert_of_hold
from protege.limits.windows import naive_utc
from protege.models import Agent, Blob, Run
from protege.models.approvals import pending_of, unsettled, wake
from protege.models.base import utcnow
from protege.models.runs import CANCELLED, DONE, FAILED, HELD, QUEUED, WAITING, Claim
from protege.plugins import PluginHost, error_line
from protege.registry import Manifest
from protege.result import failure

T = TypeVar("T")


class QueueMail(Protocol):
    """Queues mail as an agent, for a run (or none) and the tool call in it that asked
    (``tool_call_id``: one call queues one mail), and says what became of it; protege's own
    automatic mail says so (``auto_submitted``). The delivery
    loop sends it, through the installation's transport."""

    def __call__(
        self,
        *,
        agent: Agent,
        run: Run | None,
        mail: dict[str, Any],
        attachments: Sequence[Blob | int] = (),
        message_id: str | None = None,
        reply_to: Sequence[str] = (),
        tool_call_id: str | None = None,
        auto_submitted: str | None = None,
    ) -> dict[str, Any]: ...


class RunResources(Protocol):
    """What a run is handed by whoever carries it out (``protege.installation`` builds the
    real one): the configuration, the tools on offer, the means to queue mail, and the
    plugins (whose hooks give the run's prompt sections)."""

    @property
    def config(self) -> Config: ...

    @property
    def manifest(self) -> Manifest: ...

    @property
    def queue_mail(self) -> QueueMail: ...

    @property
    def plugins(self) -> PluginHost: ...

    @property
    def closed(self) -> bool: ...

    @property
    def database(self) -> peewee.Database | None:
        """The database this installation opened for itself, or None (the proxy's)."""
        ...

    def activated(self) -> contextlib.AbstractContextManager[Any]:
        """Within the block, protege's records are this installation's."""
        ...


logger = logging.getLogger("protege.run")


# A step with nothing to write skips the database when the lease was renewed (and the
# operator's cancel looked for) less than this long ago.
FRESH_SECONDS = 1.0


class LeaseLost(ProtegeError):
    """Another worker took the run over (this one was presumed dead): stop, write nothing."""


class _Cancelled(ProtegeError):
    """An operator cancelled the run; it stops at this step."""


class _CorrelatedLogger(logging.LoggerAdapter):
    def __init__(self, logger: logging.Logger, correlation_id: str) -> None:
        super().__init__(logger, {"correlation_id": correlation_id})
        self.correlation_id = correlation_id

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.correlation_id}] {msg}", kwargs


def new_owner() -> str:
    """A name for one worker's hold on one run: the host, the process and a random part."""
    return f"{socket.gethostname()[:32]}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


def execute(
    run: Run,
    installation: RunResources,
    *,
    model: ModelClient | None = None,
    claim: Claim | None = None,
    listeners: EventDispatcher | None = None,
    clock: Callable[[], datetime.datetime] = utcnow,
    breaker: Breaker | None = None,
) -> Run:
    """Carry out ``run`` to the end in this thread and return it, done, failed or cancelled
    (or queued again, when the model endpoint was failing); nothing the run does raises out
    of here (in the main thread, an operator's Ctrl-C still stops the process after the run
    is marked failed).

    A queued run is claimed first; a run claimed already comes with its ``claim``. The
    model's plain text is stored as an event and never sent: mail goes out only through
    tools, queued by the installation's ``queue_mail`` and sent by the delivery loop (or
    ``protege.delivery.send_pending``).

    The run's events go to the ``on_event`` listeners through ``listeners``; without one, a
    dispatcher of its own is started and closed (the listeners heard the whole run) before
    this returns.

    ``clock`` tells the time leases and the model endpoint's circuit are measured in;
    ``breaker`` is that circuit as the caller keeps it (default: one of the run's own).
    """
    with installation.activated():  # the run's records are its installation's
        return _execute(
            run,
            installation,
            model=model,
            claim=claim,
            listeners=listeners,
            clock=clock,
            breaker=breaker,
        )


def _execute(
    run: Run,
    installation: RunResources,
    *,
    model: ModelClient | None = None,
    claim: Claim | None = None,
    listeners: EventDispatcher | None = None,
    clock: Callable[[], datetime.datetime] = utcnow,
    breaker: Breaker | None = None,
) -> Run:
    if claim is None:
        if run.status != QUEUED:
            raise ProtegeError(f"run {run.id} is {run.status}: only a queued run can be started")
        owner, started = new_owner(), utcnow()
        claim = Run.claim(run.id, owner, started, installation.config.runs.lease_seconds)
        if claim is None:
            raise ProtegeError(f"run {run.id} was claimed by another worker")
        run.status, run.attempts, run.started_at = "running", claim.attempts, started
        run.lease_owner = owner
    taken = claim
    own = EventDispatcher(installation).start() if listeners is None else None
    dispatcher = listeners if own is None else own

    async def carried_out() -> Run:
        try:
            return await carry_out(
                run,
                taken,
                installation,
                model=model,
                listeners=dispatcher,
                clock=clock,
                breaker=breaker,
            )
        finally:
            await close_clients()

    try:
        return asyncio.run(carried_out())
    except BaseException:  # carry_out recorded it; only the operator's Ctrl-C comes here
        if threading.current_thread() is threading.main_thread():
            raise
        return run
    finally:
        if own is not None:
            own.close()


async def carry_out(
    run: Run,
    claim: Claim,
    installation: RunResources,
    *,
    model: ModelClient | None = None,
    io: Executor | None = None,
    clock: Callable[[], datetime.datetime] = utcnow,
    stopping: asyncio.Event | None = None,
    cancels: CancelWatch | None = None,
    listeners: EventDispatcher | None = None,
    breaker: Breaker | None = None,
) -> Run:
    """Carry out the claimed ``run`` on the running event loop; returns it ended, or
    queued again when it was handed back.

    ``io`` runs database work (default: this thread, for a single run). ``clock`` tells the
    time the lease is measured in. When ``stopping`` is set and the task is cancelled, the
    run is handed back to the queue instead of failed: it resumes elsewhere from its events.
    ``cancels`` looks for operators' cancels of every run on this loop (default: one of the
    run's own). Each batch of events, once committed, is published to ``listeners`` (the
    application's ``on_event`` dispatcher), if any.

    When the model endpoint fails on its side (``EndpointFailing``), the failure goes to
    ``breaker`` (the endpoint's circuit; default: one of the run's own) and the run back to
    the queue, its attempt given back: a run is never failed, nor its attempts used up, by
    an endpoint that is down.
    """
    attempt = _Attempt(run, claim, installation, io, clock, listeners, breaker)
    limits = attempt.config.runs
    if cancels is None:
        cancels = CancelWatch(limits.cancel_check_seconds, io)
    cancels.watch(run.id, attempt.cancellation)
    keeper = asyncio.create_task(attempt.keep_lease(asyncio.current_task()))
    deadline = asyncio.timeout(limits.max_run_seconds)
    try:
        async with deadline:
            await attempt.turns(model)
    except TimeoutError as error:
        if not deadline.expired():  # not the run's own clock: a bug in protege itself
            logger.exception("run %s failed unexpectedly", run.id)
            await attempt.fail(f"internal error: {type(error).__name__}: {error}")
        else:
            await attempt._exhausted("max_run_seconds", limits.max_run_seconds)
    except LeaseLost as lost:
        logger.warning("run %s: %s; leaving it to that worker", run.id, lost)
    except _Cancelled as cancelled:
        await attempt.end(CANCELLED, str(cancelled), events.RunCancelled(reason=str(cancelled)))
    except EndpointFailing as failing:
        await attempt.unavailable(failing)
    except ProtegeError as error:
        await attempt.fail(str(error))
    except asyncio.CancelledError:
        if stopping is not None and stopping.is_set() and not attempt.lost:
            await attempt.db(Run.hand_back, run.id, claim.owner)
            run.status = QUEUED
            logger.info("run %s handed back to the queue (shutting down)", run.id)
        elif not attempt.lost:
            await attempt.fail("interrupted: the run was stopped")
        if not attempt.lost:
            raise
    except Exception as error:  # a bug in protege itself: the run fails, the worker lives
        logger.exception("run %s failed unexpectedly", run.id)
        await attempt.fail(f"internal error: {type(error).__name__}: {error}")
    except BaseException as error:  # nothing a run does may stop what carries it out
        logger.exception("run %s was interrupted", run.id)
        await attempt.fail(f"interrupted: {error_line(error)}")
    finally:
        keeper.cancel()
        cancels.forget(run.id, attempt.cancellation)
    return run


@attrs.define
class _Setup:
    context: RunContext
    tools: list[dict[str, Any]]
    dispatcher: Dispatcher
    messages: list[dict[str, Any]]
    budget: PartBudget
    desk: Desk
    sections: RunSections = attrs.Factory(RunSections)
    first_turn: int = 0
    failures: int = 0
    pending: list[dict[str, Any]] = attrs.Factory(list)
    turn_calls: list[dict[str, Any]] = attrs.Factory(list)
    finished: bool = False


class _Attempt:
    """One worker's attempt at one run: its events, its lease, its way to the database."""

    def __init__(
        self,
        run: Run,
        claim: Claim,
        installation: RunResources,
        io: Executor | None,
        clock: Callable[[], datetime.datetime],
        listeners: EventDispatcher | None = None,
        breaker: Breaker | None = None,
    ) -> None:
        self.run = run
        self.claim = claim
        self.installation = installation
        self.config = installation.config
        self.io = io
        self.clock = clock
        self.log = EventLog(run.id, claim.last_seq)
        self.cancellation = Cancellation(asyncio.get_running_loop())
        if claim.cancel_requested:  # cancelled while its last worker had it
            self.cancellation.set()
        self.lost = False
        self.renewed_at = -math.inf  # time.monotonic() of the last renewal
        self.logger = _CorrelatedLogger(logger, run.correlation_id)
        self.desk: Desk | None = None
        self.listeners = listeners if listeners is not None and listeners.listening else None
        self.order = _CommitOrder()
        # The tool calls of this attempt: its queue takes mail only for those.
        self.calls = CallBook()
        self._agent_name: str | None = None
        self._limits: Mapping[str, float] | None = None  # the agent's, read once
        self._past_limits = False  # an operator released it past the limit it was held at
        self._failed_alone = 0  # endpoint failures of this run's calls alone (its trail's)
        self.breaker = Breaker.of(self.config, clock=clock) if breaker is None else breaker

    async def db(self, work: Callable[..., T], *args: Any) -> T:
        """Run database ``work`` off the event loop (or here, with no pool)."""
        if self.io is None:
            return work(*args)
        loop = asyncio.get_running_loop()
        # Each pool thread may hold a connection the server ended; each is replaced at its
        # first failure, so a few tries reach a new one (a run need not wait for its lease
        # to run out and another worker to take it over).
        for attempt in range(1, RECONNECT_TRIES + 1):
            try:
                return await loop.run_in_executor(
                    self.io, functools.partial(_closing_on_error, work, *args)
                )
            except _ConnectionBroken as broken:
                if attempt == RECONNECT_TRIES:
                    raise broken.__cause__ or broken from None
                self.logger.warning(
                    "the database connection is gone (%s); trying again", error_line(broken)
                )
                # A restarting server refuses connections for a few seconds.
                await asyncio.sleep(min(2.0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    # -- the lease ------------------------------------------------------------------------

    def _renew(self) -> None:
        lease = Run.renew_lease(
            self.run.id, self.claim.owner, self.clock(), self.config.runs.lease_seconds
        )
        if not lease.held:
            self.lost = True
            raise LeaseLost(f"run {self.run.id} was taken over by another worker")
        if lease.cancel_requested:
            self.cancellation.set()
        self.renewed_at = time.monotonic()

    async def keep_lease(self, carrier: asyncio.Task | None) -> None:
        """Renew the lease while the run lives; cancel the run's task if it was lost."""
        interval = self.config.runs.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.db(self._renew)
            except LeaseLost:
                if carrier is not None:
                    carrier.cancel()
                return
            except Exception:  # the database may be down for a moment: try again
                self.logger.warning("run %s: could not renew its lease", self.run.id)

    def _commit(self) -> None:
        """Renew the lease and write the kept events, in one transaction: if the lease is
        lost, the events are not written. The lease comes first: its row lock keeps a
        worker taking the run over waiting, and a worker that took it over already may have
        written events under the same numbers."""
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():
                self._renew()
                turn.take()
                written = self.log.write()
            self.published(written)

    def _name_for_listeners(self) -> None:
        """Read the agent's name, which listeners are told, before a transaction needs it."""
        if self.listeners is not None and self._agent_name is None:
            try:
                self._agent_name = self.run.agent.name
            except Exception:
                self.logger.exception("run %s: its agent's name could not be read", self.run.id)
                self._agent_name = "?"

    def published(self, written: list[CommittedEvent]) -> None:
        """Hand events just committed to the listeners, with the run as it stands now (the
        caller holds its turn in ``order``). Never fails the run."""
        if self.listeners is None or not written:
            return
        try:
            self.listeners.publish(snapshot(self.run, self._agent_name or "?"), written)
        except Exception:
            self.logger.exception("run %s: could not hand events to listeners", self.run.id)

    async def step(self) -> None:
        """Between two steps: write what happened, and stop if the run was cancelled.

        With nothing to write and the lease renewed a moment ago (each tool call's answer
        is committed as it comes), what the database would say is known already."""
        if self.log.kept or time.monotonic() - self.renewed_at > FRESH_SECONDS:
            await self.db(self._commit)
        if self.cancellation.is_set():
            raise _Cancelled("cancelled by an operator")

    # -- the end --------------------------------------------------------------------------

    def _end(self, status: str, error: str | None) -> None:
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():  # the end first, for the same reason as in _commit
                if not self.run.finish(status, error, self.claim.owner):
                    self.lost = True
                    raise LeaseLost(f"run {self.run.id} was taken over by another worker")
                turn.take()
                written = self.log.write()
            self.published(written)

    async def end(self, status: str, error: str | None, event: events.RunEvent | None) -> None:
        """Record the run's end (with ``event``, if any) together with its last events."""
        if event is not None:
            self.log.record(event)
        try:
            await self.db(self._end, status, error)
        except LeaseLost as lost:
            self.logger.warning("run %s: %s", self.run.id, lost)

    async def fail(self, error: str) -> None:
        """End the run as failed with ``error`` (an event says why)."""
        await self.end(FAILED, error, events.RunFailed(error=error))

    # -- the model endpoint failing -------------------------------------------------------

    async def unavailable(self, failing: EndpointFailing) -> None:
        """The endpoint failed on its side: count it in the circuit, hand the run back to
        the queue with an event saying why, and, when this failure opened the circuit
        first, tell the operators."""
        opened: State | None = None
        try:
            opened = await self.db(self.breaker.failed, str(failing), failing.retry_after)
        except Exception:  # the run still goes back: the next failure counts again
            self.logger.exception("run %s: the endpoint's failure was not counted", self.run.id)
        seen = self.breaker.seen
        # The first failure after a success is this run's alone; a run whose calls keep
        # failing while the endpoint answers others is failing on its own account, and is
        # failed rather than tried for ever (as the circuit's probe, it would keep every
        # other run waiting).
        alone = seen is not None and seen.failures == 1 and opened is None
        self.log.record(
            events.ModelUnavailable(
                error=str(failing),
                retry_after=failing.retry_after,
                circuit=None if seen is None else seen.state,
                alone=alone,
            )
        )
        self._failed_alone += alone
        limit = self.config.runs.max_attempts
        if self._failed_alone >= limit:
            await self.fail(
                f"the model endpoint failed this run's call {self._failed_alone} times while "
                f"it answered other calls (at most {limit}, [runs] max_attempts): {failing}"
            )
            return
        try:
            await self.db(self._hand_back)
        except LeaseLost as lost:
            self.logger.warning("run %s: %s", self.run.id, lost)
            return
        self.logger.info("run %s handed back to the queue: %s", self.run.id, failing)
        if opened is not None and opened.opened == 1:  # once per outage, not per re-opening
            await self.db(self._alert, opened)

    def _hand_back(self) -> None:
        """Write the kept events and put the run back in the queue, its attempt given
        back, in one transaction: a worker that lost the run does neither."""
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():
                # At the back of the queue: the next try of the endpoint (the circuit's
                # probe) is another run's, if any waits.
                if not Run.hand_back(self.run.id, self.claim.owner, turn=last_turn() + 1):
                    self.lost = True
                    raise LeaseLost(f"run {self.run.id} was taken over by another worker")
                turn.take()
                written = self.log.write()
                self.run.status = QUEUED
            self.published(written)

    def _alert(self, opened: State) -> None:
        """Queue the alert that the circuit opened to ``alert_to``, as the run's agent."""
        address = self.config.limits.alert_to
        if address is None:
            return
        mail = alert_mail(address, self.breaker.endpoint, opened, self.config.limits)
        try:
            self.installation.queue_mail(agent=self.run.agent, run=self.run, mail=mail)
        except Exception:  # the circuit is open either way; the mail is best effort
            self.logger.exception("could not mail the opened circuit to %s", address)

    # -- the turns ------------------------------------------------------------------------

    async def turns(self, model: ModelClient | None) -> None:
        config = self.config
        limits = config.runs
        claim = self.claim
        if claim.taken_over:
            self.log.record(
                events.RunResumed(
                    attempt=claim.attempts,
                    reason="taken over: its worker stopped renewing the lease",
                )
            )
            if claim.attempts > limits.max_attempts:
                raise ProtegeError(
                    f"given up after {limits.max_attempts} attempts: its worker stopped each "
                    "time (lease expired)"
                )
        model = ModelClient(config.model) if model is None else model
        setup = await self.db(self._prepare)
        self.desk = setup.desk
        if setup.finished:
            return
        dispatcher, messages = setup.dispatcher, setup.messages
        failures = setup.failures
        if setup.pending:
            failures = await self._answer(
                dispatcher,
                setup.pending,
                setup.turn_calls,
                failures,
                messages,
                setup.budget,
                on_record=True,
            )
            if failures > limits.max_tool_failures:
                return await self._exhausted("max_tool_failures", limits.max_tool_failures)
        failures += await self._settle(setup, resumed=True) or 0
        included, left_out = setup.sections.records()
        for turn in range(setup.first_turn + 1, limits.max_model_turns + 1):
            if self.cancellation.is_set():
                raise _Cancelled("cancelled by an operator")
            reached = await self._spending_reached()
            if reached is not None:
                return await self.hold(reached)
            self.log.record(
                events.ModelRequest(
                    turn=turn,
                    model=config.model.model,
                    messages=len(messages),
                    tools=list(dispatcher.granted),
                    sections=included,
                    sections_left_out=left_out,
                )
            )
            reply = await self._ask(model, messages, setup.tools)
            self.log.record(
                events.ModelResponse(
                    turn=turn,
                    content=reply.content,
                    tool_calls=reply.tool_calls,
                    usage=reply.usage,
                    latency_ms=round(reply.latency_ms, 1),
                    model=reply.model,
                ),
                alongside=self._spending(reply),
            )
            messages.append(reply.as_message())
            if not reply.tool_calls:
                settled = await self._settle(setup)  # answered while the model went on
                if settled is None:
                    return await self._done_or_waiting()
                failures += settled
                continue
            calls = reply.tool_calls
            failures = await self._answer(
                dispatcher, calls, calls, failures, messages, setup.budget
            )
            if failures > limits.max_tool_failures:
                return await self._exhausted("max_tool_failures", limits.max_tool_failures)
        await self._exhausted("max_model_turns", limits.max_model_turns)

    # -- spending ---------------------------------------------------------------------------

    def _spending(self, reply: ModelReply) -> Callable[[], None]:
        """The ledger's entry for ``reply``, to be added in the transaction that writes its
        event: an attempt that loses its lease records neither."""
        price = spending.price_for(self.config.model, reply.model, self._spending_limits())
        spend = spending.spend_of(reply.model, reply.usage, price)
        agent_id, answered_at = self.run.agent_id, self.clock()
        return functools.partial(spending.record_spend, agent_id, answered_at, spend)

    def _spending_limits(self) -> Mapping[str, float]:
        if self._limits is None:  # the agent is loaded with the claimed run
            self._limits = self.config.limits.for_agent(self.run.agent.name)
        return self._limits

    async def _spending_reached(self) -> Hold | None:
        """The spending limit the agent or the installation has reached, if any: read
        before each model call, and not at all when no spending limit applies."""
        limits = self._spending_limits()
        if self._past_limits or not any(limits[name] for name in SPENDING_LIMITS):
            return None
        return await self.db(spending_limit_reached, self.run.agent_id, self.clock(), limits)

    async def hold(self, reached: Hold) -> None:
        """Stop the run before its next model call: it is held until ``reached``'s window
        ends (or an operator releases it), its lease given up, and resumes from its events."""
        self.log.record(
            events.LimitReached(
                limit=reached.limit,
                allowed=reached.allowed,
                used=reached.used,
                subject=reached.subject,
                window_start=reached.window_start.isoformat(),
                until=reached.until.isoformat(),
                reason=reached.reason,
            )
        )
        try:
            await self.db(self._hold, reached)
        except LeaseLost as lost:
            self.logger.warning("run %s: %s", self.run.id, lost)
            return
        self.logger.info("run %s held: %s", self.run.id, reached.reason)
        await self.db(
            alert_of_hold,
            self.installation.queue_mail,
            self.run.agent,
            reached,
            self.clock(),
            self.config,
        )

    def _hold(self, reached: Hold) -> None:
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():  # the hold first, for the same reason as in _commit
                if not hold_running(self.run.id, self.claim.owner, reached):
                    self.lost = True
                    raise LeaseLost(f"run {self.run.id} was taken over by another worker")
                turn.take()
                written = self.log.write()
            self.run.status, self.run.attempts = HELD, self.claim.attempts - 1
            self.run.held_until, self.run.held_reason = naive_utc(reached.until), reached.reason
            self.published(written)

    async def _ask(
        self, model: ModelClient, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> Any:
        """The model's answer, unless an operator cancels the run while it waits for it."""
        answer = asyncio.ensure_future(model.complete(messages, tools))
        stop = asyncio.ensure_future(self.cancellation.stopped.wait())
        try:
            await asyncio.wait({answer, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not answer.done():
                answer.cancel()
                await asyncio.wait({answer})
        if answer.cancelled() and self.cancellation.is_set():
            raise _Cancelled("cancelled by an operator")
        reply = answer.result()
        seen = self.breaker.seen
        if seen is None or not seen.healthy:  # else nothing to write: no thread hop
            try:
                await self.db(self.breaker.succeeded)
            except Exception:  # the answer stands; the next success closes the circuit
                self.logger.exception("run %s: the endpoint's answer was not counted", self.run.id)
        return reply

    def _prepare(self) -> _Setup:
        """Everything a run needs before its first model call (in the database's thread)."""
        run, config = self.run, self.config
        context = self._context()
        resolution = run.agent.resolve_for(context, self.installation.manifest)
        context = attrs.evolve(context, whole_archive=resolution.whole_archive)
        granted = resolution.tools
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
        budget = PartBudget(config.model, config.runs)  # files shown as themselves, per run
        # Once per attempt, before the first turn: each turn shows the same prompt, and a
        # resumed run (maybe days later, after an approval) is told the world as it is now.
        sections = gather(self.installation, context)
        messages = build_messages(run, fence, config, budget, sections.render(fence))
        dispatcher = Dispatcher(
            granted,
            context,
            fence,
            config.runs.max_result_bytes,
            config.runs.tool_threads,
            calls=self.calls,
        )
        desk = Desk(
            run,
            resolution.approvals,
            dispatcher,
            self.installation.queue_mail,
            self.clock,
            resumed=self.log.seq > 0,
            authenticated=context.message is not None
            and context.message.proves_sender(config.mail.authentication),
        )
        setup = _Setup(context, tools, dispatcher, messages, budget, desk, sections)
        if self.log.seq:  # a run resumed: nothing done is done again
            timeline = run.timeline()
            replayed, pending = replay(timeline, fence)
            messages += replayed
            # Turns the model answered: a request whose call failed (the reason for the
            # retry) got no response and is not held against the budget.
            trail = [events.read(e.kind, e.payload) for e in timeline]
            if trail and isinstance(trail[-1], events.LimitReached):
                by = run.released_by
                # An operator who releases a run a limit stopped lets it go past that limit.
                self._past_limits = by is not None
                released = f"released by {by}, past the limit" if by else "released"
                self.log.record(
                    events.RunResumed(
                        attempt=self.claim.attempts,
                        reason=f"{released} after it was held: {trail[-1].reason}",
                    )
                )
            setup.first_turn = sum(1 for e in trail if isinstance(e, events.ModelResponse))
            self._failed_alone = sum(
                1 for e in trail if isinstance(e, events.ModelUnavailable) and e.alone
            )
            setup.failures = sum(1 for e in trail if isinstance(e, events.ToolResult) and e.failed)
            setup.pending = pending
            setup.turn_calls = next(
                (m["tool_calls"] for m in reversed(replayed) if m.get("tool_calls")), []
            )
            last = replayed[-1] if replayed else {}
            final = last.get("role") == "assistant" and not last.get("tool_calls")
            if final and not unsettled(run.id):  # its final answer was given before it stopped
                waiting = [a.id for a in pending_of(run.id)]
                if waiting:
                    self._wait(waiting)
                else:
                    self._end(DONE, None)
                setup.finished = True
        return setup

    async def _answer(
        self,
        dispatcher: Dispatcher,
        calls: list[dict[str, Any]],
        turn_calls: list[dict[str, Any]],
        failures: int,
        messages: list[dict[str, Any]],
        budget: PartBudget,
        on_record: bool = False,
    ) -> int:
        """Answer ``calls`` (all or the rest of ``turn_calls``, one turn's calls in the
        model's order) with one tool message each; returns the run's tool failures so far.
        ``on_record`` says the calls are in the trail already (a resumed run's).

        The calls run concurrently; their results are recorded and answered in the model's
        order. Files the results carry (images, PDFs) follow in one user message, since a
        tool message cannot hold them. Calls past ``max_tool_calls_per_turn`` are declined,
        not run, and do not count as failures: the model may ask for them again.
        """
        limits: RunSettings = self.config.runs
        cap = limits.max_tool_calls_per_turn
        position = {call["id"]: index for index, call in enumerate(turn_calls)}
        if not on_record:
            for call in calls:
                dispatcher.announce(call, self.log)
        await self.step()  # the calls are on record before any of them runs
        out_of_budget = failures > limits.max_tool_failures
        answers: list[Outcome | None] = [None] * len(calls)
        for index, call in enumerate(calls):
            if out_of_budget or position.get(call["id"], 0) >= cap:
                declined = dispatcher.decline(
                    call,
                    "not run: the run is out of budget"
                    if out_of_budget
                    else f"not run: at most {cap} tool calls are run per turn and this turn "
                    f"asked for {len(turn_calls)}; call it again in your next turn if you "
                    "still need it",
                )
                for event in declined.trail:
                    self.log.record(event)
                answers[index] = declined

        async def answered(index: int) -> None:
            outcome = await self._dispatch(dispatcher, calls[index])
            for event in outcome.trail:
                self.log.record(event)
            answers[index] = outcome
            # Each answer is on record as soon as it comes, so a crash or a stop runs
            # again only the calls still under way.
            await self.db(self._commit)

        await asyncio.gather(*(answered(i) for i, found in enumerate(answers) if found is None))
        outcomes = [outcome for outcome in answers if outcome is not None]  # the model's order
        files: list[tuple[str, Outcome]] = []
        for outcome in outcomes:
            failures += 0 if (outcome.result.ok or outcome.declined) else 1
            messages.append(
                {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.content}
            )
            files += [(outcome.call_id, outcome)] if outcome.parts else []
        await self.step()  # what the tools answered is on record before the next turn
        failpoints.reached("run.tool_recorded")
        if files:
            messages.append(_files_message(files, budget, dispatcher.fence))
        return failures

    # -- approval ---------------------------------------------------------------------------

    async def _dispatch(self, dispatcher: Dispatcher, call: dict[str, Any]) -> Outcome:
        """Dispatch ``call``, unless its tool needs approval: then it waits (a request is
        mailed once) and the model is told so."""
        desk = self.desk
        policy = None if desk is None else desk.policy_for(call)
        if desk is None or policy is None:
            return await dispatcher.dispatch(call)
        approved = desk.self_approved(call, policy)
        if approved is not None:
            self.log.record(approved)  # on record before the call runs
            return await dispatcher.dispatch(call)
        try:
            approval, created = await self.db(desk.request, call, policy)
        except ProtegeError as error:  # the request mail was refused (an address, say)
            return dispatcher.unrun(call, failure(f"approval could not be requested: {error}"))
        if created:
            self.log.record(desk.requested(approval))
        return desk.waiting(call, approval)

    async def _settle(self, setup: _Setup, resumed: bool = False) -> int | None:
        """Take in the approvals answered since the calls waited: record each answer, run
        the approved calls once, tell the model what became of each. Returns the tool
        failures this added, or None when there was nothing to take in."""
        if not setup.desk.may_have_approvals:  # no thread hop for what cannot be there
            return None
        answered = await self.db(setup.desk.answered)
        if not answered:
            return None
        if resumed:
            self.log.record(
                events.RunResumed(
                    attempt=self.claim.attempts,
                    reason="approval answered: "
                    + ", ".join(f"{a.tool} {a.status}" for a, _ in answered),
                )
            )
        for _, answer in answered:
            self.log.record(answer)
        await self.step()  # the answers are on record before any approved call runs
        outcomes = await asyncio.gather(*(setup.desk.outcome(a) for a, _ in answered))
        failures = 0
        for (approval, answer), outcome in zip(answered, outcomes, strict=True):
            for event in outcome.trail:
                self.log.record(event)
            failures += 0 if (outcome.result.ok or outcome.declined) else 1
            setup.messages.append(
                approval_note(answer, approval.call_id, approval.tool, outcome.content)
            )
        await self.db(self._commit_settled, [a for a, _ in answered])
        if self.cancellation.is_set():
            raise _Cancelled("cancelled by an operator")
        return failures

    def _commit_settled(self, approvals: list[Any]) -> None:
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():
                written = self.log.write()
                Desk.mark_settled(approvals)
                self._renew()
                turn.take()
            self.published(written)

    async def _done_or_waiting(self) -> None:
        """The model gave its final answer: the run is done, or waits for approvals."""
        waiting: list[int] = []
        if self.desk is None or self.desk.may_have_approvals:
            waiting = await self.db(lambda: [a.id for a in pending_of(self.run.id)])
        if not waiting:
            return await self.end(DONE, None, None)
        try:
            await self.db(self._wait, waiting)
        except LeaseLost as lost:
            self.logger.warning("run %s: %s", self.run.id, lost)

    def _wait(self, approval_ids: list[int]) -> None:
        """End this attempt with the run waiting for ``approval_ids``; if one was answered
        meanwhile, the run goes back to the queue at once."""
        self.log.record(events.RunWaiting(approvals=approval_ids))
        self._name_for_listeners()
        with self.order.turn() as turn:
            with database.atomic():
                written = self.log.write()
                if not self.run.finish(WAITING, None, self.claim.owner):
                    self.lost = True
                    raise LeaseLost(f"run {self.run.id} was taken over by another worker")
                turn.take()
                if unsettled(self.run.id) and wake(self.run.id):
                    self.run.status = QUEUED
            self.published(written)

    async def _exhausted(self, budget: str, limit: int) -> None:
        await self.end(
            FAILED,
            f"budget exhausted: {budget} ({limit})",
            events.BudgetExhausted(budget=budget, limit=limit),
        )

    def _context(self) -> RunContext:
        run, installation, log, calls = self.run, self.installation, self.log, self.calls
        agent: Agent = run.agent
        run_logger = self.logger
        # A tool's own thread starts with no context, so no application of its own: with
        # several open, the proxy would refuse to guess. Mail is queued on the database of
        # the installation the run is of, whichever thread asks.
        own_database = installation.database

        def queue(mail: Any, attachments: Any = (), *, call: Call | None) -> dict[str, Any]:
            try:
                calls.running(call)  # refused at once, before any database work
                # The tool's objects are read here, not inside the transaction below.
                mail, attachments = dict(mail), list(attachments)
                with contextlib.ExitStack() as routed:
                    if own_database is not None:
                        routed.enter_context(dbroute.using(own_database))
                    return queue_now(mail, attachments, call)
            except CallOver as refusal:
                run_logger.warning(
                    "run %s: mail (to %s) refused: %s", run.id, _recipients(mail), refusal
                )
                raise

        def queue_now(mail: dict[str, Any], attachments: list[Any], call: Call | None) -> Any:
            # The pending mail and the event that asked for it land in one transaction, and
            # only while this worker still holds the run: one that lost it sends nothing.
            self._name_for_listeners()
            # A thread of the tool's own has no connection until this one, and nobody to put
            # it down after the call, as protege's tool threads do: it is put down here.
            opened_here = database.is_closed()
            try:
                with self.order.turn() as turn:
                    with database.atomic():
                        self._renew()
                        turn.take()
                        # Looked at again, and kept from ending, until the mail is written: a
                        # call that ended while this thread waited for the run queues nothing.
                        with calls.queueing(call) as asking:
                            outcome = installation.queue_mail(
                                agent=agent,
                                run=run,
                                mail=mail,
                                attachments=attachments,
                                tool_call_id=asking.id,
                            )
                            written = (
                                []
                                if outcome.get("repeated")
                                else log.write_now(events.Delivery.from_payload(outcome))
                            )
                    self.published(written)
            except peewee.IntegrityError:  # another worker wrote this run's next event
                self.lost = True
                raise LeaseLost(f"run {run.id} was taken over by another worker") from None
            finally:
                if opened_here:
                    put_down_connection()
            return outcome

        return RunContext(
            agent=agent,
            message=run.message if run.message_id is not None else None,
            responsibility=run.responsibility if run.responsibility_id is not None else None,
            mail_queue=queue,
            config=installation.config,
            logger=run_logger,
            correlation_id=run.correlation_id,
            cancellation=self.cancellation.flag,
        )


class _CommitOrder:
    """Keeps a run's batches reaching the listeners in the order they were committed,
    whichever thread committed them.

    A turn is taken inside the transaction, once it holds the run's row (the lease's update
    locks it; on SQLite, the first write takes the database), and given up after the
    batch is published: two transactions of one run cannot both be past that point, so
    turns come in commit order, and one thread waiting for a turn never holds what the
    thread whose turn it is needs.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def turn(self) -> Iterator[_Turn]:
        """A turn to take once the transaction holds the run; given up on leaving."""
        turn = _Turn(self._lock)
        try:
            yield turn
        finally:
            turn.give_up()


class _Turn:
    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._held = False

    def take(self) -> None:
        if not self._held:
            self._lock.acquire()
            self._held = True

    def give_up(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()


# More than a serve process's pool threads (``[serve] db_threads``), each of which may hold
# a connection the server ended; with the waits between them, about half a minute.
RECONNECT_TRIES = 20


class _ConnectionBroken(Exception):
    """Work failed because its connection had been ended by the server, or none could be
    made: nothing was done, and it may be tried again."""

    def __str__(self) -> str:
        return str(self.__cause__ or "connection lost")


def _closing_on_error(work: Callable[..., T], *args: Any) -> T:
    try:
        return work(*args)
    except BaseException as error:
        broken = isinstance(error, peewee.DatabaseError | peewee.InterfaceError) and (
            connection_broken() or database.is_closed()  # ended, or could not be opened
        )
        # A broken connection stays broken for this pool thread: the next call opens anew.
        if not database.in_transaction():
            database.close()
        if broken:
            raise _ConnectionBroken() from error
        raise


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
