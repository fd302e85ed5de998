"""Delivery: pending mail handed to the transport, apart from the run that queued it.

``send_email`` stores its mail as pending, with the exact bytes to send, in the same
transaction as the event that records it. Here those mails are claimed (with a lease, so a
delivery loop that dies lets another take them over), handed to the installation's transport
(``protege.delivery.transports``: the outbox, the SMTP relay, or a plugin's), and marked sent
only once the transport has them. Recipients a transport defers are tried again later with
backoff; the Message-ID and bytes never change between tries. A transport that raises fails
that attempt only: it is counted, and the mail is tried again.

The outbox delivers each mail exactly once: its file name is fixed by the mail, and a file
already there is never written again. SMTP delivers at least once: a crash between the
relay's answer and the commit sends the same mail (same Message-ID) again. A hand-off keeps
renewing its claim while the relay takes its time, so a slow relay is never handed the same
mail again by another loop that thought this one dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

import peewee

from protege import blobs, failpoints
from protege.config import Config
from protege.db import database, put_down_connection, take_up_connection
from protege.defaults.transports import BUILTIN_TRANSPORTS
from protege.delivery.outbox import write_eml
from protege.delivery.transports import Envelope, MailRefused, Transport, handover_of
from protege.errors import ConfigError, did_you_mean
from protege.gateway import relay
from protege.models import Blob, Message, Run
from protege.models.base import utcnow
from protege.models.messages import FAILED, PENDING, SENT

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]

_CLAIM_SQL = (
    "UPDATE message SET delivery_lease_expires_at = {p} WHERE id IN ("
    "SELECT id FROM message WHERE status = 'pending' AND next_attempt_at <= {p} "
    "AND (delivery_lease_expires_at IS NULL OR delivery_lease_expires_at < {p}){of_run} "
    "ORDER BY id LIMIT {p}{lock}) RETURNING id"
)


# Read first, so that an idle delivery loop's look only reads (see Run.claim_next).
_ANY_DUE = "SELECT 1 FROM message WHERE status = 'pending' AND next_attempt_at <= {p} LIMIT 1"


def lease_seconds(config: Config) -> float:
    """How long a delivery loop's claim on a mail lasts unless renewed: as long as a run's
    lease. A hand-off renews it every third of that for as long as the transport takes, so
    the claim runs out only when the loop holding it died."""
    return config.runs.lease_seconds


class _Renewal:
    """Keeps a delivery loop's claim on one mail alive, from a thread of its own, while the
    mail is handed off; ``held`` is the claim as this loop last set it (once another loop
    took the mail, presuming this one dead, it is renewed no more and records nothing)."""

    def __init__(
        self, message_id: int, held: datetime.datetime | None, config: Config, clock: Clock
    ) -> None:
        self.message_id = message_id
        self.held = held
        self.config = config
        self.clock = clock
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,  # the lease is in this work's database
            args=(self._renew,),
            name=f"protege-delivery-lease-{message_id}",
            daemon=True,
        )

    def __enter__(self) -> _Renewal:
        if self.held is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.ident is not None:  # started
            self._thread.join()

    def _renew(self) -> None:
        interval = lease_seconds(self.config) / 3
        limit = datetime.timedelta(seconds=self.config.mail.max_handoff_seconds)
        started = self.clock()
        try:
            while not self._done.wait(interval):
                if self.clock() - started > limit:
                    logger.warning(
                        "mail %s: the transport has held it longer than max_handoff_seconds "
                        "(%s s); its claim is let go, and it will be tried again",
                        self.message_id,
                        self.config.mail.max_handoff_seconds,
                    )
                    return
                take_up_connection()
                held = self.held
                until = self.clock() + datetime.timedelta(seconds=lease_seconds(self.config))
                try:
                    renewed = Message.update_where(
                        {"delivery_lease_expires_at": until},
                        "id = {p} AND delivery_lease_expires_at = {p}",
                        self.message_id,
                        Message.delivery_lease_expires_at.db_value(held),
                    )
                except Exception:  # the database may be down for a moment: try again
                    logger.warning("mail %s: could not renew its claim", self.message_id)
                    continue
                if not renewed:
                    return  # another loop has it: what this one sees is not recorded
                self.held = until
        finally:
            put_down_connection()


def claim_due(
    config: Config, now: datetime.datetime, limit: int, run_id: int | None = None
) -> list[int]:
    """Take up to ``limit`` pending mails whose time has come and that no live delivery
    loop holds (of run ``run_id`` only, if given); returns their ids. Several loops, in
    several processes, may share them."""
    p = database.param
    if not database.execute_sql(_ANY_DUE.format(p=p), (now,)).fetchall():
        return []
    lock = " FOR UPDATE SKIP LOCKED" if isinstance(database.obj, peewee.PostgresqlDatabase) else ""
    of_run = "" if run_id is None else f" AND run_id = {p}"
    until = now + datetime.timedelta(seconds=lease_seconds(config))
    sql = _CLAIM_SQL.format(p=p, lock=lock, of_run=of_run)
    params = (until, now, now, *(() if run_id is None else (run_id,)), limit)
    cursor = database.execute_sql(sql, params)
    return sorted(row[0] for row in cursor.fetchall())


def builtin_transport(config: Config) -> Transport:
    """protege's own transport that ``[mail] transport`` names, made from ``config``: for
    scripts and tests that hold a ``Config`` and no installation. A plugin's transport is
    found only by opening the installation (``installation.transport``)."""
    name = config.mail.transport
    transport = BUILTIN_TRANSPORTS.get(name)
    if transport is None:
        raise ConfigError(
            f"[mail] transport {name!r} is not one of protege's own "
            f"({', '.join(sorted(BUILTIN_TRANSPORTS))}){did_you_mean(name, BUILTIN_TRANSPORTS)}; "
            "a plugin's transport is used through the installation: pass "
            "transport=installation.transport"
        )
    return transport(config)


def hand_off(
    message_id: int,
    config: Config,
    now: datetime.datetime | None = None,
    *,
    clock: Clock = utcnow,
    transport: Transport | None = None,
) -> Message:
    """Send one claimed pending mail to its waiting recipients through ``transport`` (the
    installation's; by default protege's own that ``config`` names) and record the outcome;
    the claim is renewed (``clock`` tells the time) for as long as the hand-off takes. What
    the transport raises, other than ``MailRefused``, is raised here: nothing is recorded."""
    now = clock() if now is None else now
    transport = builtin_transport(config) if transport is None else transport
    message, sender = _with_its_bytes(message_id)
    if message.status != PENDING:
        return message
    held = message.delivery_lease_expires_at  # this loop's claim; recorded only while it holds
    raw = blobs.read(message.raw_blob, config)
    waiting = list(message.pending_recipients)
    envelope = Envelope(
        sender=sender,
        recipients=tuple(waiting),
        smtputf8=not all(a.isascii() for a in (sender, *waiting)),
        message_id=message.message_id,
        queued_at=message.created_at,
        attempt=message.delivery_attempts + 1,
    )
    failpoints.reached("delivery.handoff")  # claimed and committed, not handed over yet
    with _Renewal(message.id, held, config, clock) as renewal:
        try:
            outcome = handover_of(transport.send(raw, envelope), waiting, transport)
        except MailRefused as refused:
            outcome = relay.Handover(error=str(refused))
        except Exception:
            raise  # counted as a failed attempt by the caller
        except BaseException as error:  # SystemExit and the like: the plugin's, not the loop's
            raise RuntimeError(f"the transport raised {type(error).__name__}: {error}") from error
    _record(message, outcome, config, now, renewal.held)
    return message


def _with_its_bytes(message_id: int) -> tuple[Message, str]:
    """Message ``message_id`` with its raw blob loaded, and its agent's address (the
    envelope's sender), in the same query."""
    row = database.execute_sql(_with_bytes_sql(database.param), (message_id,)).fetchone()
    if row is None:
        raise peewee.DoesNotExist(f"no message {message_id}")
    fields = len(Message._meta.sorted_fields)
    message = Message.from_row(row[:fields])
    if row[fields] is not None:
        message.raw_blob = Blob.from_row(row[fields:-1])
        message._dirty.discard("raw_blob")  # as loaded
    return message, row[-1]


@functools.cache
def _with_bytes_sql(param: str) -> str:
    return (
        f"SELECT {Message.columns()}, {Blob.columns()}, agent.address FROM message "
        "LEFT JOIN blob ON blob.id = message.raw_blob_id "
        f"JOIN agent ON agent.id = message.agent_id WHERE message.id = {param}"
    )


def _record(
    message: Message,
    handover: relay.Handover,
    config: Config,
    now: datetime.datetime,
    held: datetime.datetime | None,
) -> None:
    attempts = message.delivery_attempts + 1
    refused = [*message.refused_recipients, *(r.as_dict() for r in handover.refused)]
    waiting = list(handover.deferred)
    error = handover.error
    if error is not None:  # the whole mail failed: nobody still waiting will get it
        taken = {*handover.delivered, *(r.address for r in handover.refused)}
        refused += [
            {"address": a, "code": 0, "reason": error}
            for a in message.pending_recipients
            if a not in taken
        ]
        waiting = []
    elif waiting and attempts > config.mail.smtp_retries:
        error = f"gave up after {attempts} attempts: {relay.reason(waiting[0])}"
        refused += [r.as_dict() for r in waiting]
        waiting = []
    everyone = set(message.to_addresses + message.cc_addresses + message.bcc_addresses)
    received = len(everyone) - len({r["address"] for r in refused}) - len(waiting)
    if waiting:
        status, next_attempt = PENDING, now + _backoff(config, attempts)
    elif received > 0:
        status, next_attempt = SENT, None
    else:
        status, next_attempt = FAILED, None
        error = error or "the relay refused every recipient: " + "; ".join(
            f"{r['address']} ({r['code']} {r['reason']})" for r in refused
        )
    message.status = status
    message.pending_recipients = [r.address for r in waiting]
    message.refused_recipients = refused
    message.delivery_attempts = attempts
    message.next_attempt_at = next_attempt
    if error is None and waiting:  # why they still wait, for `runs show` until the next try
        error = "deferred: " + "; ".join(f"{r.address} ({relay.reason(r)})" for r in waiting)
    message.delivery_error = error  # kept on sent mail too: "gave up" on some recipients
    message.delivery_lease_expires_at = None
    _save_if_held(message, held)


_DELIVERY_FIELDS = (
    "status",
    "pending_recipients",
    "refused_recipients",
    "delivery_attempts",
    "next_attempt_at",
    "delivery_error",
    "delivery_lease_expires_at",
)


def _save_if_held(message: Message, held: datetime.datetime | None) -> bool:
    """Store what became of ``message`` unless another delivery loop claimed it since
    (this one was too slow: the mail is that loop's now)."""
    changes = {name: getattr(message, name) for name in _DELIVERY_FIELDS}
    if held is None:
        saved = Message.update_where(
            changes, "id = {p} AND delivery_lease_expires_at IS NULL", message.id
        )
    else:
        saved = Message.update_where(
            changes,
            "id = {p} AND delivery_lease_expires_at = {p}",
            message.id,
            Message.delivery_lease_expires_at.db_value(held),
        )
    if not saved:
        logger.warning(
            "mail %s was claimed by another delivery loop while this one sent it; "
            "what this one saw is not recorded",
            message.message_id,
        )
    return bool(saved)


def _could_not_hand_off(
    message_id: int, config: Config, now: datetime.datetime, error: str
) -> None:
    """Count a hand-off that failed before the transport answered (its bytes unreadable,
    say): tried again after the backoff, failed for good past ``smtp_retries``."""
    message = Message.get_or_none(Message.id == message_id)
    if message is None or message.status != PENDING:
        return
    held = message.delivery_lease_expires_at
    message.delivery_attempts += 1
    message.delivery_lease_expires_at = None
    if message.delivery_attempts > config.mail.smtp_retries:
        message.status, message.next_attempt_at = FAILED, None
        message.delivery_error = f"gave up after {message.delivery_attempts} attempts: {error}"
        message.refused_recipients = [
            *message.refused_recipients,
            *({"address": a, "code": 0, "reason": error} for a in message.pending_recipients),
        ]
        message.pending_recipients = []
    else:
        message.next_attempt_at = now + _backoff(config, message.delivery_attempts)
        message.delivery_error = f"deferred: {error}"
    _save_if_held(message, held)


def _backoff(config: Config, attempts: int) -> datetime.timedelta:
    return datetime.timedelta(seconds=config.mail.smtp_backoff_seconds * 2 ** (attempts - 1))


def send_pending(
    config: Config,
    *,
    clock: Clock = utcnow,
    limit: int = 100,
    run: Run | None = None,
    transport: Transport | None = None,
) -> list[Message]:
    """Hand every pending mail whose time has come (of ``run`` only, if given) to
    ``transport`` (the installation's; by default protege's own that ``config`` names), in
    this thread; the mails it tried, as they are now. For the command line, scripts and
    tests; ``serve`` runs ``DeliveryLoop``."""
    transport = builtin_transport(config) if transport is None else transport
    tried: list[Message | None] = []
    run_id = None if run is None else run.id
    while ids := claim_due(config, clock(), limit, run_id):
        tried += [_safely(message_id, config, clock(), clock, transport) for message_id in ids]
    return [m for m in tried if m is not None]


def _safely(
    message_id: int,
    config: Config,
    now: datetime.datetime,
    clock: Clock,
    transport: Transport,
) -> Message | None:
    """``hand_off``, with a failure of protege's own side or of the transport counted as
    an attempt."""
    try:
        return hand_off(message_id, config, now, clock=clock, transport=transport)
    except Exception as error:
        logger.exception("mail %s could not be handed to the transport", message_id)
        try:
            _could_not_hand_off(message_id, config, now, f"{type(error).__name__}: {error}")
        except Exception:  # the database too: the lease runs out and it is tried again
            logger.exception("mail %s: the failure could not be recorded", message_id)
        return None


def write_to_outbox(raw: bytes, message: Message, outbox: Path) -> Path:
    """Put ``raw`` in the outbox under a name fixed by ``message``, once: a mail whose file
    is there already (written before a crash) is not written again."""
    return write_eml(raw, message.message_id, message.created_at, outbox)


class DeliveryLoop:
    """Hands pending mail to ``transport`` (the installation's; by default protege's own that
    ``config`` names) from a running event loop, a few at a time, looking again every
    ``poll_interval`` seconds or when ``wake`` is called."""

    def __init__(
        self,
        config: Config,
        io: Executor,
        *,
        clock: Clock = utcnow,
        poll_interval: float | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.config = config
        self.transport = builtin_transport(config) if transport is None else transport
        self.io = io
        self.clock = clock
        self.poll_interval = config.serve.poll_interval if poll_interval is None else poll_interval
        self.width = config.serve.max_concurrent_deliveries
        self._wake = asyncio.Event()
        self._stopping = False
        self.sent = 0
        self.waiting = False
        """Whether ``run`` is waiting for a wake or the next poll (nothing to send now)."""

    def wake(self) -> None:
        """Look for pending mail now (call on the loop's thread)."""
        self._wake.set()

    def stop(self) -> None:
        """Finish the mails being sent, then end ``run``."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Deliver until stopped; a last pass sends what was due when ``stop`` came.
        Cancelling the task running it ends it at once (a hand-off under way in ``io``
        finishes there; a mail claimed and not sent goes again once its claim expires)."""
        loop = asyncio.get_running_loop()
        last_pass = False
        while not last_pass:
            last_pass = self._stopping
            try:
                ids = await loop.run_in_executor(
                    self.io, claim_due, self.config, self.clock(), self.width
                )
            except Exception:
                logger.exception("could not look for pending mail")
                ids = []
            if ids:
                sent = await asyncio.gather(
                    *(
                        loop.run_in_executor(
                            self.io,
                            _safely,
                            i,
                            self.config,
                            self.clock(),
                            self.clock,
                            self.transport,
                        )
                        for i in ids
                    )
                )
                self.sent += sum(1 for m in sent if m is not None and m.status == SENT)
                last_pass = False  # there may be more
                continue
            if self._stopping:
                continue
            self._wake.clear()
            self.waiting = True
            try:
                await _woken(self._wake, self.poll_interval)
            finally:
                self.waiting = False


async def _woken(wake: asyncio.Event, seconds: float) -> None:
    """Wait until ``wake`` is set or ``seconds`` have passed. Not ``asyncio.wait_for``: on
    Python 3.11 it returns, and swallows the cancel, when a cancel lands in the same turn of
    the loop as the wake; a delivery loop cancelled just after a wake then ran on."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await wake.wait()
