"""Reading an existing mailbox over IMAP: each new mail stored once, then marked done.

One ``MailboxReader`` per ``[mail.imap.NAME]`` table runs in a thread of the serve process
holding that mailbox's lease (``protege.gateway.checkpoints``). A pass finds the mail above
the checkpoint (UIDVALIDITY and the last UID stored), fetches it ``batch`` at a time, and
stores each mail (``protege.gateway.inbound.ingest``) in the same transaction that moves the
checkpoint past it; only then is it marked ``\\Seen`` or moved. So:

- a crash before the commit leaves the mail above the checkpoint: it is fetched again;
- a crash after it leaves the mail stored and the checkpoint past it: it is not taken
  again, and the marking still owed (``marked_uid`` to ``last_uid``) is done first thing;
- a dropped connection or a restarted server is a failed pass, tried again with backoff;
- a new UIDVALIDITY (the folder was rebuilt: every UID means another mail now) has the
  folder's mail since the last one stored looked at again, each taken unless the very same
  bytes are stored already.

Between passes the reader waits in IDLE where the server offers it, else polls.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from protege import failpoints
from protege.config import Config
from protege.db import database, put_down_connection
from protege.gateway import checkpoints
from protege.gateway.checkpoints import LeaseLost
from protege.gateway.imap import MailboxUnavailable, connect, describe, log_out
from protege.gateway.inbound import (
    TRANSIENT_ERRORS,
    Delivered,
    MailRejected,
    agent_for,
    ingest,
)
from protege.mailbox_settings import KEEP, MOVE, SEEN, MailboxSettings
from protege.models import Blob, Message
from protege.models.base import utcnow

logger = logging.getLogger(__name__)

# RFC 2177: a client in IDLE should re-issue it at least every 29 minutes.
IDLE_RESTART_SECONDS = 25 * 60
MAX_BACKOFF_SECONDS = 300.0
MIN_PASS_SECONDS = 0.5
# On a new UIDVALIDITY, mail since this long before the last one stored is looked at again.
RESCAN_MARGIN = datetime.timedelta(days=1)


@attrs.frozen
class Pass:
    """What one pass over a mailbox did."""

    found: int = 0
    stored: int = 0
    passed_over: int = 0
    delivered: tuple[Delivered, ...] = ()


class MailboxReader:
    """Reads mailbox ``name`` for the installation ``app`` (whose ``config`` it uses) while
    ``run`` runs; ``on_mail`` hears what each stored mail became (from the reader's thread).
    ``lease_seconds`` is how long its hold on the mailbox lasts unless renewed."""

    def __init__(
        self,
        name: str,
        app: Any,
        *,
        config: Config | None = None,
        on_mail: Callable[[list[Delivered]], None] | None = None,
        lease_seconds: float | None = None,
        holder: str | None = None,
    ) -> None:
        self.name = name
        self.app = app
        self.config = app.config if config is None else config
        self.settings: MailboxSettings = self.config.mail.imap[name]
        self.on_mail = on_mail
        self.lease_seconds = (
            self.config.runs.lease_seconds if lease_seconds is None else lease_seconds
        )
        self.holder = holder or checkpoints.holder_name()
        host, port = self.settings.address
        self.source = checkpoints.source_of(
            self.settings.username, host, port, self.settings.folder
        )
        self.resolver = self.config.mail.authentication.resolver()
        self._stop = threading.Event()
        self._client: Any = None
        self._client_lock = threading.Lock()
        self.holding = False
        """Whether this reader holds the mailbox's lease (it reads it)."""
        self._problem: str | None = None  # what went wrong in a pass that went on

    # -- the thread ---------------------------------------------------------------------

    def stop(self) -> None:
        """End ``run`` soon: a pass under way stops after the mail being stored; a wait in
        IDLE is cut short. Safe from any thread."""
        self._stop.set()
        with self._client_lock:
            client = self._client
        if client is not None:
            # Wakes a wait in IDLE; the pass sees the stop and logs out.
            with contextlib.suppress(Exception):  # closed already
                client.socket().shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        """Take the lease when it is free, then read until ``stop``; failures are logged,
        recorded for ``status``, and tried again with backoff."""
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    with self._activated():
                        self._hold_or_wait()
                        if not self.holding:
                            continue
                        self._serve_held()
                    failures = 0
                except LeaseLost as lost:
                    logger.warning("%s; this process stops reading it", lost)
                    self.holding = False
                except Exception as error:
                    if self._stop.is_set():
                        break  # stopping cut the connection: no failure to record
                    failures += 1
                    reason = error_line(error)
                    logger.warning("mailbox %s: %s", self.name, reason)
                    self._record_failure(reason)
                    self._wait(_backoff(failures))
        finally:
            self._let_go()

    def _activated(self) -> Any:
        activated = getattr(self.app, "activated", None)
        if activated is None:
            return contextlib.nullcontext()
        return activated()

    def _hold_or_wait(self) -> None:
        try:
            checkpoints.ensure(self.name, self.source)
            self.holding = checkpoints.take_lease(self.name, self.holder, self.lease_seconds)
        finally:
            put_down_connection()
        if not self.holding:
            # Another process reads it: look again about when its lease would run out
            # unrenewed (jittered, so that standbys do not wake together).
            self._wait(self.lease_seconds / 3 * random.uniform(0.8, 1.2))

    def _serve_held(self) -> None:
        client = connect(self.name, self.settings, self.config.root)
        with self._client_lock:
            self._client = client
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    found = self.take_new(client).found
                finally:
                    put_down_connection()  # between passes this thread holds none
                if self._stop.is_set():
                    break
                # Mail that came during a pass was announced in the answer to one of its
                # commands, not to IDLE: a pass that found some is followed by another.
                if not found:
                    self._wait_for_mail(client)
                # However often a server says there is mail, passes come at most so often.
                self._wait(MIN_PASS_SECONDS - (time.monotonic() - started))
        finally:
            with self._client_lock:
                self._client = None
            log_out(client)

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _record_failure(self, reason: str) -> None:
        try:
            with self._activated():
                checkpoints.failed(self.name, reason)
        except Exception:  # the database may be what failed
            logger.debug("could not record the failure of mailbox %s", self.name)
        finally:
            put_down_connection()

    def _let_go(self) -> None:
        if not self.holding:
            return
        self.holding = False
        try:
            with self._activated():
                checkpoints.release(self.name, self.holder)
        except Exception:  # the lease runs out on its own
            logger.debug("could not release mailbox %s", self.name)
        finally:
            put_down_connection()

    # -- waiting for mail ----------------------------------------------------------------

    def _renew(self) -> None:
        try:
            if not checkpoints.take_lease(self.name, self.holder, self.lease_seconds):
                raise LeaseLost(f"mailbox {self.name} is read by another process now")
        finally:
            put_down_connection()

    def _wait_for_mail(self, client: Any) -> None:
        """Until new mail may be there: IDLE's word, or the next poll; the lease is renewed
        meanwhile."""
        renew_every = self.lease_seconds / 3
        if self.settings.idle and client.has_capability("IDLE"):
            self._idle(client, renew_every)
            return
        deadline = time.monotonic() + self.settings.poll_seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wait(min(left, renew_every))
            self._renew()

    def _idle(self, client: Any, renew_every: float) -> None:
        client.idle()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                slice_started = time.monotonic()
                responses = client.idle_check(timeout=renew_every)
                if self._stop.is_set():
                    return
                if any(_announces_mail(r) for r in responses):
                    return
                if not responses and time.monotonic() - slice_started < renew_every / 2:
                    # Readable with nothing in it: the server closed the connection.
                    raise MailboxUnavailable(
                        f"mailbox {self.name}: the server closed the connection"
                    )
                self._renew()
                if time.monotonic() - started > IDLE_RESTART_SECONDS:
                    return  # IDLE again, as RFC 2177 asks; a pass on the way costs little
        finally:
            if not self._stop.is_set():
                client.idle_done()

    # -- a pass --------------------------------------------------------------------------

    def take_new(self, client: Any) -> Pass:
        """One pass: store the mail above the checkpoint, a batch at a time, and mark it
        done. Requires the lease (``LeaseLost`` once another process has it)."""
        settings = self.settings
        self._problem = None
        selected = client.select_folder(settings.folder)
        if not selected.get(b"UIDVALIDITY"):
            raise MailboxUnavailable(
                f"mailbox {self.name}: the server did not say the folder's UIDVALIDITY, "
                "without which no checkpoint can be kept"
            )
        validity = int(selected[b"UIDVALIDITY"])
        uidnext = int(selected.get(b"UIDNEXT") or 0)
        checkpoint = checkpoints.ensure(self.name, self.source)
        if agent_for(settings.agent) is None:
            raise MailboxUnavailable(
                f"mailbox {self.name} is for {settings.agent}, which is no agent's address"
            )
        if checkpoint.source != self.source or checkpoint.uidvalidity is None:
            if checkpoint.uidvalidity is not None:
                logger.warning(
                    "mailbox %s now reads %s (was %s): begun again from its newest mail",
                    self.name,
                    self.source,
                    checkpoint.source,
                )
            self._begin(client, validity, uidnext, fresh=checkpoint.uidvalidity is None)
            checkpoint = checkpoints.ensure(self.name, self.source)
        elif checkpoint.uidvalidity != validity:
            return self._after_new_validity(client, checkpoint, validity, uidnext)
        settled = self._mark_owed(client, checkpoint)
        # While marking owed from before is not done, marking this pass's mail must not
        # move marked_uid past it: the next pass marks the whole owed range.
        return self._take(client, _above(client, checkpoint.last_uid), dedupe=False, record=settled)

    def _begin(self, client: Any, validity: int, uidnext: int, *, fresh: bool) -> None:
        """Where a mailbox read for the first time begins: its next mail, or ``backfill``."""
        days = self.settings.backfill_days if fresh else None
        newest = uidnext - 1 if uidnext else max(_uids(client.search(["ALL"])) or [0])
        # When reading began, by the server's clock: the arrival of the newest mail not
        # taken (no bound when there is none). Only a new UIDVALIDITY needs it.
        start, begun_at = newest, _arrival(client, newest) if newest else None
        if days == 0:
            start, begun_at = 0, None
        elif days is not None:
            begun_at = utcnow() - datetime.timedelta(days=days)
            found = _uids(client.search(["SINCE", begun_at.date()]))
            start = min(found) - 1 if found else newest
        checkpoints.begin(
            self.name,
            self.holder,
            self.lease_seconds,
            source=self.source,
            uidvalidity=validity,
            last_uid=max(start, 0),
            first=True,
            begun_at=begun_at,
        )
        logger.info("mailbox %s: reading begins after UID %s", self.name, max(start, 0))

    def _after_new_validity(
        self, client: Any, checkpoint: Any, validity: int, uidnext: int
    ) -> Pass:
        """The folder's UIDs mean other mail now: look again at what arrived since a day
        before the last mail stored (never before reading began), taking what is not
        stored already, then go on after the newest UID seen before that look."""
        logger.warning(
            "mailbox %s: UIDVALIDITY changed from %s to %s; looking at its recent mail again",
            self.name,
            checkpoint.uidvalidity,
            validity,
        )
        bounds = [checkpoint.begun_at]
        if checkpoint.last_arrived_at is not None:
            bounds.append(checkpoint.last_arrived_at - RESCAN_MARGIN)
        since = max((b for b in bounds if b is not None), default=None)
        if since is None:
            uids = _uids(client.search(["ALL"]))
        else:
            # SINCE is a date by the server's own clock: a day early, then by arrival.
            found = _uids(client.search(["SINCE", (since - datetime.timedelta(days=1)).date()]))
            arrivals = client.fetch(found, ["INTERNALDATE"]) if found else {}
            uids = [
                u
                for u in found
                if (when := _utc((arrivals.get(u) or {}).get(b"INTERNALDATE"))) is None
                or when >= since
            ]
        done = self._take(client, uids, dedupe=True, moving=False)
        newest = max([*uids, uidnext - 1, 0])
        checkpoints.begin(
            self.name,
            self.holder,
            self.lease_seconds,
            source=self.source,
            uidvalidity=validity,
            last_uid=newest,
        )
        return done

    def _take(
        self,
        client: Any,
        uids: Sequence[int],
        *,
        dedupe: bool,
        moving: bool = True,
        record: bool = True,
    ) -> Pass:
        settings = self.settings
        limit = self.config.mail.max_message_bytes
        found = len(uids)
        oldest = _arrival(client, uids[0]) if uids else None
        checkpoints.looked(
            self.name, self.holder, self.lease_seconds, waiting=found, oldest_waiting_at=oldest
        )
        stored = passed = 0
        delivered: list[Delivered] = []
        for start in range(0, len(uids), settings.batch):
            if self._stop.is_set():
                break
            batch = list(uids[start : start + settings.batch])
            sizes = {u: _size(d) for u, d in client.fetch(batch, ["RFC822.SIZE"]).items()}
            if not sizes:
                # Mail can vanish between SEARCH and FETCH, not a whole batch of it: the
                # server's answer is broken. Nothing is passed over; the pass is tried again.
                raise MailboxUnavailable(
                    f"mailbox {self.name}: the server answered FETCH with none of the UIDs "
                    "asked for"
                )
            wanted = [u for u in batch if 0 <= sizes.get(u, -1) <= limit]
            bodies: dict[int, Any] = {}
            for part in _by_bytes(wanted, sizes):  # a batch's bytes in memory are bounded
                # At most one byte over the limit is asked for: a server whose size was
                # wrong cannot send a mail larger than that.
                bodies.update(client.fetch(part, [f"BODY.PEEK[]<0.{limit + 1}>", "INTERNALDATE"]))
            missing = [u for u in wanted if _body(bodies.get(u) or {}) is None]
            if missing:
                # The server said these are there and not too large: a missing body is its
                # failure, not the mail's. The pass is tried again; nothing is passed over.
                raise MailboxUnavailable(
                    f"mailbox {self.name}: the server sent no body for UID {missing[0]}"
                )
            failpoints.reached("imap.fetched")  # fetched, nothing of the batch stored
            done: list[int] = []
            last = None
            for uid in batch:
                if self._stop.is_set():
                    break
                data = bodies.get(uid) or {}
                raw = _body(data)
                if raw is not None and len(raw) > limit:
                    raw = None  # the size the server gave was not the mail's
                arrived = _utc(data.get(b"INTERNALDATE"))
                outcome = self._store_one(uid, raw, arrived, sizes.get(uid), dedupe=dedupe)
                failpoints.reached("imap.stored")  # committed, not marked done
                last = uid
                if outcome is None:
                    passed += 1
                    continue
                stored += 1
                done.append(uid)
                delivered += outcome
                if outcome and self.on_mail is not None:
                    try:
                        self.on_mail(list(outcome))
                    except Exception:
                        logger.exception("on_mail failed")
            if moving and last is not None and self._mark_done(client, done) and record:
                checkpoints.marked(self.name, self.holder, self.lease_seconds, last)
        checkpoints.looked(
            self.name,
            self.holder,
            self.lease_seconds,
            waiting=0,
            oldest_waiting_at=None,
            error=self._problem,
        )
        return Pass(found, stored, passed, tuple(delivered))

    def _store_one(
        self,
        uid: int,
        raw: bytes | None,
        arrived: datetime.datetime | None,
        size: Any,
        *,
        dedupe: bool,
    ) -> list[Delivered] | None:
        """Store mail ``uid`` and move the checkpoint past it, in one transaction; None when
        it was passed over (gone, too large, refused before storing: left in the mailbox)."""
        settings = self.settings
        with database.atomic():
            if raw is None:
                why = "gone from the folder" if size is None else "over max_message_bytes"
                self._pass_over(uid, arrived, why, dedupe=dedupe)
                return None
            if dedupe and _stored_already(raw, settings.agent):
                self._advance(uid, arrived, stored=False, dedupe=dedupe)
                return []
            try:
                # The verdict is ingest's to reach, after its limits: a header block
                # built to make checking signatures slow is refused before that.
                delivered = ingest(
                    raw,
                    config=self.config,
                    recipients=[settings.agent],
                    resolver=self.resolver,
                    app=self.app,
                    provider_authserv_ids=settings.trusted_authserv_ids,
                )
            except MailRejected as rejection:
                self._pass_over(uid, arrived, f"refused: {rejection}", dedupe=dedupe)
                return None
            self._advance(uid, arrived, stored=True, dedupe=dedupe)
            return delivered

    def _pass_over(
        self, uid: int, arrived: datetime.datetime | None, why: str, *, dedupe: bool
    ) -> None:
        """Move past mail ``uid`` without storing it; it stays in the mailbox, unmarked."""
        logger.warning(
            "mailbox %s: UID %s passed over (%s); left in the mailbox", self.name, uid, why
        )
        self._advance(uid, arrived, stored=False, dedupe=dedupe)

    def _advance(
        self, uid: int, arrived: datetime.datetime | None, *, stored: bool, dedupe: bool
    ) -> None:
        if dedupe:  # a rescan under the old UIDVALIDITY: only the lease is renewed
            self._renew_in_transaction()
            return
        checkpoints.advance(self.name, self.holder, self.lease_seconds, uid, arrived, stored=stored)

    def _renew_in_transaction(self) -> None:
        if not checkpoints.take_lease(self.name, self.holder, self.lease_seconds):
            raise LeaseLost(f"mailbox {self.name} is read by another process now")

    # -- marking done ----------------------------------------------------------------------

    def _mark_owed(self, client: Any, checkpoint: Any) -> bool:
        """Finish the marking a crash or a refusal left owed: mail stored above
        ``marked_uid`` (not the mail passed over there); whether none is owed now."""
        marked_uid, last_uid = checkpoint.marked_uid, checkpoint.last_uid
        if last_uid <= marked_uid:
            return True
        skipped = checkpoints.passed_over(checkpoint)
        owed = [
            u
            for u in _uids(client.search(["UID", f"{marked_uid + 1}:{last_uid}"]))
            if marked_uid < u <= last_uid and u not in skipped
        ]
        if not self._mark_done(client, owed):
            return False
        checkpoints.marked(self.name, self.holder, self.lease_seconds, last_uid)
        return True

    def _mark_done(self, client: Any, uids: list[int]) -> bool:
        """Mark stored mail done as ``done`` says; whether it was. The server refusing
        (a ``move_to`` folder deleted, say) is logged and recorded, and tried again next
        pass: it never keeps new mail from being taken."""
        import imapclient.exceptions

        settings = self.settings
        if not uids or settings.done == KEEP:
            return True
        try:
            if settings.done == SEEN:
                client.add_flags(uids, [b"\\Seen"], silent=True)
            elif settings.done == MOVE and settings.move_to:
                if client.has_capability("MOVE"):
                    client.move(uids, settings.move_to)
                elif client.has_capability("UIDPLUS"):
                    client.copy(uids, settings.move_to)
                    client.add_flags(uids, [b"\\Deleted"], silent=True)
                    client.uid_expunge(uids)
                else:
                    raise imapclient.exceptions.IMAPClientError(
                        'done = "move" needs a server offering MOVE or UIDPLUS'
                    )
        except imapclient.exceptions.IMAPClientAbortError:
            raise  # the connection is gone: a failed pass
        except imapclient.exceptions.IMAPClientError as error:
            reason = f"mailbox {self.name}: could not mark stored mail done: {describe(error)}"
            logger.warning("%s; tried again next pass", reason)
            self._problem = reason  # recorded with the pass, for status and doctor
            return False
        return True


def _announces_mail(response: Any) -> bool:
    return (
        isinstance(response, tuple) and len(response) >= 2 and response[1] in (b"EXISTS", b"RECENT")
    )


def _size(data: Any) -> int:
    """The size the server gave, or -1 when it gave none to believe."""
    try:
        size = int(data.get(b"RFC822.SIZE"))
    except (TypeError, ValueError, AttributeError):
        return -1
    return size if size >= 0 else -1


def _body(data: Any) -> bytes | None:
    """The mail's bytes in a FETCH answer, whether the server named the part whole or
    partial; None when it sent none."""
    for key in (b"BODY[]", b"BODY[]<0>"):
        value = data.get(key)
        if isinstance(value, bytes):
            return value
    return None


# A batch's bodies are fetched in parts of at most this many bytes (by the sizes the server
# gave), so that a batch of large mail holds a bounded amount in memory.
MAX_FETCH_BYTES = 64 * 1024 * 1024
MAX_UID = 2**32 - 1  # RFC 3501: a UID is a 32-bit number


def _by_bytes(uids: list[int], sizes: dict[int, int]) -> list[list[int]]:
    parts: list[list[int]] = []
    size = 0
    for uid in uids:
        if not parts or size + sizes[uid] > MAX_FETCH_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(uid)
        size += sizes[uid]
    return parts


def _uids(found: Any) -> list[int]:
    """UIDs a server answered, those that can be UIDs at all, in order."""
    return sorted(u for u in found if isinstance(u, int) and 0 < u <= MAX_UID)


def _above(client: Any, last_uid: int) -> list[int]:
    """The UIDs above ``last_uid`` (``n:*`` answers the highest UID even when it is below
    ``n``: that one is not above)."""
    return [u for u in _uids(client.search(["UID", f"{last_uid + 1}:*"])) if u > last_uid]


def _utc(value: Any) -> datetime.datetime | None:
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def _arrival(client: Any, uid: int) -> datetime.datetime | None:
    found = client.fetch([uid], ["INTERNALDATE"]).get(uid) or {}
    return _utc(found.get(b"INTERNALDATE"))


def _stored_already(raw: bytes, agent_address: str) -> bool:
    """Whether these very bytes are stored already as inbound mail for the agent."""
    agent = agent_for(agent_address)
    if agent is None:
        return False
    digest = hashlib.sha256(raw).hexdigest()
    return (
        Message.select(Message.id)
        .join(Blob, on=(Message.raw_blob == Blob.id))
        .where(
            (Message.agent == agent.id) & (Message.direction == "inbound") & (Blob.sha256 == digest)
        )
        .exists()
    )


def _backoff(failures: int) -> float:
    return min(MAX_BACKOFF_SECONDS, 2 ** min(failures - 1, 10)) * random.uniform(0.8, 1.2)


def error_line(error: BaseException) -> str:
    """``error`` as one line for the log and ``status``."""
    if isinstance(error, MailboxUnavailable):
        return str(error)
    if isinstance(error, TRANSIENT_ERRORS) and not isinstance(error, OSError):
        return f"the database failed: {error}"
    return describe(error)


def readers(
    app: Any, on_mail: Callable[[list[Delivered]], None] | None = None
) -> list[MailboxReader]:
    """A reader for each ``[mail.imap.NAME]`` mailbox of ``app`` (the installation)."""
    return [MailboxReader(name, app, on_mail=on_mail) for name in app.config.mail.imap]
