"""The scheduler: one run queued per due time of each responsibility, and the retry and
notify policy for the scheduled runs that fail.

It only queues; workers (``protege serve``) carry the runs out. Several schedulers may share
one database: a run's due time is part of a unique key, so only one run can stand for it, and
each responsibility is looked at under a row lock, so two schedulers never start two runs of
it at once. Every decision takes the time from an injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import attrs
import peewee

from protege.cron import ScheduleError
from protege.db import database
from protege.dblock import exclusive_on
from protege.harness.runner import RunResources
from protege.limits.admission import spending_limit_reached
from protege.limits.holding import release_due
from protege.limits.notices import alert_of_hold
from protege.models import Agent, Approval, Responsibility, Run
from protege.models.runs import FAILED, HELD, QUEUED, RUNNING, SCHEDULED
from protege.queue import AlreadyQueued, queue_scheduled, retry_failed

logger = logging.getLogger(__name__)
UTC = datetime.UTC

Clock = Callable[[], datetime.datetime]
"""A clock: returns the current time as an aware datetime."""


def system_clock() -> datetime.datetime:
    """The machine's clock, in UTC."""
    return datetime.datetime.now(UTC)


@attrs.define
class Pass:
    """What one pass of the scheduler did."""

    queued: list[Run] = attrs.Factory(list)
    busy: list[Responsibility] = attrs.Factory(list)  # due, but its previous run still goes
    retried: list[Run] = attrs.Factory(list)
    failed: list[Run] = attrs.Factory(list)  # failed for good, settled (and mailed) now
    expired: list[int] = attrs.Factory(list)  # approvals nobody answered in time
    released: list[int] = attrs.Factory(list)  # held runs whose window reopened, queued now
    held: list[Run] = attrs.Factory(list)  # due, but held: a spending limit is reached


class Scheduler:
    """Queues the due runs of every enabled responsibility, and releases held runs whose
    window reopened, in passes.

    ``tick()`` makes one pass at the clock's time; ``start()`` makes one every
    ``[responsibilities] poll_seconds`` in a thread until ``stop()``, and ``await serve()``
    the same on the running event loop (each pass in a thread of its own) until ``stop()``
    or a cancel. ``on_line`` hears a line for each run it queues, retries or reports (on
    the thread making the pass).
    """

    def __init__(
        self,
        installation: RunResources,
        *,
        clock: Clock = system_clock,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.installation = installation
        self.settings = installation.config.responsibilities
        self.clock = clock
        self.on_line = on_line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="protege-scheduler", daemon=True)
        self._woken: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def tick(self) -> Pass:
        """Queue what is due now and apply the failure policy; returns what was done."""
        with self.installation.activated():  # from whichever thread makes the pass
            return self._tick()

    def _tick(self) -> Pass:
        now = self.clock()
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("the scheduler's clock must return an aware datetime")
        done = Pass()
        due = Responsibility.select(Responsibility.id).where(
            Responsibility.enabled & Responsibility.schedule.is_null(False)
        )
        for responsibility_id in [row.id for row in due]:
            self._queue_due(responsibility_id, now, done)
        self._settle_failures(now, done)
        done.expired = Approval.expire_due(now.astimezone(datetime.UTC).replace(tzinfo=None))
        for approval_id in done.expired:
            self._say(f"approval {approval_id} expired unanswered; its run resumes")
        released = release_due(now, self.installation.config.limits)
        done.released = released.queued
        if released.queued or released.held_on:
            self._say(
                f"{len(released.queued)} held run(s) released into the queue; "
                f"{released.held_on} still held"
            )
        return done

    def start(self) -> Scheduler:
        """Make a pass now and then every ``poll_seconds``, in a thread."""
        self._thread.start()
        return self

    async def serve(self) -> None:
        """Make a pass now and then every ``poll_seconds`` on the running event loop, each
        in a thread of the scheduler's own, until ``stop()`` or the task is cancelled (a
        pass under way then finishes in its thread, and ``serve`` returns once it did)."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        self._woken = (loop, woken)
        passes = ThreadPoolExecutor(1, thread_name_prefix="protege-scheduler")
        try:
            while not self._stop.is_set():
                try:
                    await loop.run_in_executor(passes, self.tick)
                except Exception:  # the database may be away for a while: try again later
                    logger.exception("scheduler pass failed; trying again")
                with contextlib.suppress(TimeoutError):  # asyncio.timeout never eats a cancel
                    async with asyncio.timeout(self.settings.poll_seconds):
                        await woken.wait()
        finally:
            self._woken = None
            passes.submit(self._close_connection)  # the connection of the passes' thread
            shutting = loop.run_in_executor(None, passes.shutdown)
            cancelled = False
            while not shutting.done():  # not left half done by a second cancel
                try:
                    await asyncio.wait({shutting})
                except asyncio.CancelledError:
                    cancelled = True
            if cancelled:
                raise asyncio.CancelledError

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the current pass (at once, when it is waiting)."""
        self._stop.set()
        woken = self._woken
        if woken is not None:
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                woken[0].call_soon_threadsafe(woken[1].set)
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the thread is still going."""
        return self._thread.is_alive()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.tick()
                except Exception:  # the database may be away for a while: try again later
                    logger.exception("scheduler pass failed; trying again")
                self._stop.wait(self.settings.poll_seconds)
        finally:
            self._close_connection()

    def _close_connection(self) -> None:
        """Close this thread's connection to the installation's database."""
        if self.installation.closed:  # and with it that database
            return
        with self.installation.activated():
            database.close()

    def _queue_due(self, responsibility_id: int, now: datetime.datetime, done: Pass) -> None:
        with _locked(responsibility_id):
            responsibility = (
                Responsibility.select(Responsibility, Agent)
                .join(Agent)
                .where(Responsibility.id == responsibility_id)
                .first()
            )
            if (
                responsibility is None
                or not responsibility.enabled
                or responsibility.agent.archived_at is not None
            ):
                return  # deleted, disabled or its agent archived since the pass began
            try:
                cron = responsibility.cron
            except ScheduleError as error:
                logger.warning("responsibility %s is skipped: %s", responsibility.name, error)
                return
            if cron is None:
                return
            last = (
                Run.select(Run.due_at)
                .where((Run.responsibility == responsibility.id) & Run.due_at.is_null(False))
                .order_by(Run.due_at.desc())
                .first()
            )
            since = _aware(responsibility.scheduled_from or responsibility.created_at)
            if last is not None:
                since = max(since, _aware(last.due_at))
            due_at = cron.latest_due(now, since)
            if due_at is None:
                return
            if (
                Run.select()
                .where(
                    (Run.responsibility == responsibility.id)
                    & Run.status.in_([QUEUED, RUNNING, HELD])
                )
                .exists()
            ):
                done.busy.append(responsibility)
                return
            # Run limits count mail; a scheduled run waits only for spending to be allowed.
            agent = responsibility.agent
            hold = spending_limit_reached(
                agent.id, now, self.installation.config.limits.for_agent(agent.name)
            )
            try:
                run = queue_scheduled(responsibility, due_at, hold=hold, now=now)
            except AlreadyQueued:
                return
        local = cron.local(due_at).isoformat(sep=" ", timespec="minutes")
        what = f"{responsibility.agent.name}'s {responsibility.name!r}, due {local}"
        if hold is not None:
            done.held.append(run)
            self._say(f"run {run.id} held: {what}; {hold.reason}")
            alert_of_hold(self.installation.queue_mail, agent, hold, now, self.installation.config)
            return
        done.queued.append(run)
        self._say(f"run {run.id} queued: {what}")

    def _settle_failures(self, now: datetime.datetime, done: Pass) -> None:
        retries, delay = self.settings.retries, self.settings.retry_delay_seconds
        stored_now = now.astimezone(UTC).replace(tzinfo=None)
        failed = (
            Run.select(Run, Agent, Responsibility)
            .join(Agent)
            .switch(Run)
            .join(Responsibility)
            .where(
                (Run.kind == SCHEDULED)
                & (Run.status == FAILED)
                & Run.due_at.is_null(False)
                & Run.settled_at.is_null()
            )
            .order_by(Run.id)
        )
        for run in failed:
            if run.attempts <= retries:
                finished = run.finished_at or stored_now
                if finished + datetime.timedelta(seconds=delay) <= stored_now and retry_failed(run):
                    done.retried.append(run)
                    self._say(f"run {run.id} failed ({run.error}); queued again")
                continue
            settled = (
                Run.update(settled_at=stored_now)
                .where((Run.id == run.id) & (Run.status == FAILED) & Run.settled_at.is_null())
                .execute()
            )
            if settled == 1:
                done.failed.append(run)
                self._say(f"run {run.id} failed for good: {run.error}")
                self._notify(run)

    def _notify(self, run: Run) -> None:
        address = self.settings.notify
        responsibility, agent = run.responsibility, run.agent
        if address is None or responsibility is None or run.due_at is None:
            return
        due = _aware(run.due_at).astimezone(_zone(responsibility))
        mail = {
            "to": [address],
            "subject": f"Scheduled run failed: {responsibility.name} ({agent.name})",
            "body": (
                f"{agent.name}'s responsibility {responsibility.name!r}, due "
                f"{due.isoformat(sep=' ', timespec='minutes')}, failed after "
                f"{run.attempts} attempt(s):\n\n{run.error}\n\n"
                f"It is run {run.id}: `protege runs show {run.id}` has its whole trail and "
                f"`protege runs retry {run.id}` runs it again.\n"
            ),
        }
        try:
            self.installation.queue_mail(agent=agent, run=run, mail=mail, attachments=())
        except Exception:  # the failure stays recorded on the run; the mail is best effort
            logger.exception("could not mail the failure of run %s to %s", run.id, address)

    def _say(self, line: str) -> None:
        logger.info("%s", line)
        if self.on_line is not None:
            self.on_line(line)


@contextlib.contextmanager
def _locked(responsibility_id: int) -> Iterator[None]:
    """A transaction in which no other scheduler looks at the same responsibility."""
    target = getattr(database, "obj", None) or database
    if isinstance(target, peewee.PostgresqlDatabase):
        with database.atomic():
            database.execute_sql(
                "SELECT id FROM responsibility WHERE id = %s FOR UPDATE", (responsibility_id,)
            )
            yield
    else:
        with exclusive_on(database):  # SQLite: the write lock, taken before reading
            yield


def _aware(stored: datetime.datetime) -> datetime.datetime:
    return stored.replace(tzinfo=UTC)


def _zone(responsibility: Responsibility) -> datetime.tzinfo:
    try:
        cron = responsibility.cron
    except ScheduleError:
        return UTC
    return UTC if cron is None else cron.zone
