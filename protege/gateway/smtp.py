"""The SMTP gateway (aiosmtpd): takes mail for known agents, answers only once it is stored."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

import attrs

from protege.config import Config
from protege.gateway.inbound import (
    TRANSIENT_ERRORS,
    Delivered,
    MailRejected,
    StorageUnavailable,
    agent_for,
    ingest,
)
from protege.models.messages import REFUSED

logger = logging.getLogger(__name__)

SMTP_OVERHEAD = 64 * 1024  # headers and encoding around the message itself
# Said to a sender the agent's access rules refused; the reason stays in the record and the
# log, so an outsider cannot probe the rules.
REFUSED_REPLY = "550 5.7.1 this address does not accept your message"
ATTEMPTS = 3  # tries of one SMTP step's database work before answering 451
STOP_GRACE_SECONDS = 30.0  # what a gateway stopping gives the mail it is taking by default
# Said for any failure a later try may get past: plain words, never an exception's name.
TRY_LATER = "451 4.3.0 the message could not be taken now; try again later"


@attrs.frozen
class RefusedMail:
    """Mail the gateway refused before storing anything: who sent it, to whom, and the
    SMTP answer they got (an unknown recipient, a message over a limit)."""

    sender: str | None
    recipients: tuple[str, ...]
    reply: str


class GatewayHandler:
    """aiosmtpd handler: 550 for unknown recipients and refused senders, 552 over limits,
    451 only when storage failed in a way a later attempt can get past.

    ``on_mail`` hears of each mail stored; ``on_refusal`` of each mail (or recipient)
    refused with nothing stored. ``app``, the installation, inspects what is stored
    (``inspect_inbound``); without it, only protege's own inspectors do."""

    def __init__(
        self,
        config: Config,
        on_mail: Callable[[list[Delivered]], None] | None = None,
        on_refusal: Callable[[RefusedMail], None] | None = None,
        app: Any = None,
    ) -> None:
        self.config = config
        self.app = app
        self.on_mail = on_mail
        self.on_refusal = on_refusal
        # One resolver for the gateway's life: its DNS cache serves every mail it takes.
        self.resolver = config.mail.authentication.resolver()
        # Set when the gateway stops: a session ends once it answered the mail in hand.
        self.stopping = False
        # The database work under way in threads: a session ended (its sender gone, the
        # gateway stopping) does not end it, and the gateway stops only once it has.
        self._working: set[asyncio.Future] = set()

    async def finished(self) -> bool:
        """Return once the database work started for the sessions has ended (a thread
        cannot be stopped: mail being stored is stored before the gateway says it stopped),
        cancels notwithstanding; whether one came."""
        return await _through_cancels(lambda: self._working)

    async def _in_thread(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``work`` in a thread; tried again (a few times) when the database failed in a way
        a new connection gets past: each thread replaces a connection the server ended at
        its next try, and the sending server need not wait minutes for its own retry."""
        for attempt in range(1, ATTEMPTS + 1):
            working = asyncio.ensure_future(asyncio.to_thread(self._for_app, work, *args, **kwargs))
            self._working.add(working)
            working.add_done_callback(self._worked)
            try:
                # Shielded: a session cancelled meanwhile leaves the work tracked to its end.
                return await asyncio.shield(working)
            except (*TRANSIENT_ERRORS, StorageUnavailable) as error:
                if attempt == ATTEMPTS:
                    raise
                logger.warning("database unavailable (%s); trying again", error)
        raise AssertionError("unreachable")

    def _worked(self, working: asyncio.Future) -> None:
        self._working.discard(working)
        if not working.cancelled():
            working.exception()  # heard by the session that waited, if it still did

    def _for_app(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``work`` on the database of the installation this gateway takes mail for."""
        activated = getattr(self.app, "activated", None)
        if activated is None:
            return work(*args, **kwargs)
        with activated():
            return work(*args, **kwargs)

    async def handle_RCPT(self, server, session, envelope, address: str, rcpt_options) -> str:
        try:
            agent = await self._in_thread(agent_for, address)
        except Exception:
            # A 5xx here would have the sending server bounce the mail for good; whatever
            # failed (the database, most likely) may work on the sender's next try.
            logger.exception("could not look up the recipient %r", address)
            return TRY_LATER
        if agent is None:
            reply = f"550 5.1.1 <{address}>: no agent has this address"
            self.refused(envelope.mail_from, [address], reply)
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    def refused(self, sender: str | None, recipients: list[str], reply: str) -> None:
        """Tell ``on_refusal`` of mail refused with nothing stored; never fails the session."""
        if self.on_refusal is None:
            return
        try:
            self.on_refusal(RefusedMail(sender or None, tuple(recipients), reply))
        except Exception:
            logger.exception("on_refusal failed")

    async def handle_DATA(self, server, session, envelope) -> str:
        raw = envelope.original_content or envelope.content
        peer = session.peer[0] if isinstance(session.peer, tuple) and session.peer else None
        try:
            delivered = await self._in_thread(
                ingest,
                raw,
                config=self.config,
                recipients=list(envelope.rcpt_tos),
                envelope_sender=envelope.mail_from,
                client_ip=peer,
                helo=session.host_name,
                resolver=self.resolver,
                app=self.app,
            )
        except MailRejected as rejection:
            reply = f"{rejection.code} 5.3.4 {rejection}"
            self.refused(envelope.mail_from, list(envelope.rcpt_tos), reply)
            return reply
        except StorageUnavailable as error:
            logger.error("could not store inbound mail for now: %s", error)
            return TRY_LATER
        except Exception:
            logger.exception("inbound mail could not be processed")
            return "554 5.3.0 the message could not be processed"
        if self.on_mail is not None:
            try:
                self.on_mail(delivered)
            except Exception:
                logger.exception("on_mail failed")
        if all(d.status == REFUSED for d in delivered):
            for refused in delivered:
                logger.info("refused mail %s: %s", refused.message.id, refused.reason)
            return REFUSED_REPLY
        return "250 OK stored"


def start_gateway(
    config: Config,
    host: str | None = None,
    port: int | None = None,
    on_mail: Callable[[list[Delivered]], None] | None = None,
    on_refusal: Callable[[RefusedMail], None] | None = None,
    app: Any = None,
) -> Any:
    """Start the SMTP gateway in a thread of its own; returns the running controller.
    ``on_mail`` hears of each mail stored (what became of it for each agent), and
    ``on_refusal`` of each mail refused with nothing stored (a recipient no agent has, a
    message over the size limit). ``app``, the installation, inspects the mail stored
    (``inspect_inbound``); without it, only protege's own inspectors do.

    SMTPUTF8 is on, so internationalised addresses arrive as they are; lines may be as
    long as the message may be, as Postfix accepts them. ``serve_gateway`` is the same
    on the caller's event loop.
    """
    # aiosmtpd (and asyncio's server) are loaded only by the commands that listen.
    from aiosmtpd.controller import Controller

    hostname = host or config.mail.listen_host
    port = config.mail.listen_port if port is None else port
    # Before the controller exists: it makes an event loop that a failure here would leave
    # to be closed at exit, where asyncio complains about it on stderr.
    _bind_or_fail(hostname, port)
    handler = GatewayHandler(config, on_mail, on_refusal, app)
    session = _session_class(handler)

    class GatewayController(Controller):
        def factory(self) -> Any:
            return session(self.handler, **self.SMTP_kwargs)

    controller = GatewayController(
        handler,
        hostname=hostname,
        port=port,
        **_session_settings(config),
    )
    controller.start()
    return controller


class Gateway:
    """The SMTP gateway taking mail on an event loop (what ``serve_gateway`` returns):
    ``hostname`` and ``port`` are where it listens (the port bound, when 0 was asked)."""

    def __init__(
        self,
        server: asyncio.Server,
        hostname: str,
        sessions: set[Any],
        handler: GatewayHandler,
    ) -> None:
        self.server = server
        self.hostname = hostname
        self.port: int = server.sockets[0].getsockname()[1]
        self.handler = handler
        self._sessions = sessions

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Take no more connections; end the sessions not sending mail now; give those
        sending one ``grace`` seconds to have it stored and answered (then they end, and
        their senders send again); return once every session ended and the database work
        they started is done, so that nothing lands after the gateway said it stopped.
        Cancelling it cuts the grace short; it still returns only once all ended, then
        raises the cancel."""
        self.server.close()  # new connections are refused from here on
        self.handler.stopping = True
        sessions = list(self._sessions)
        tasks = [s._handler_coroutine for s in sessions if s._handler_coroutine is not None]
        sending = [
            s._handler_coroutine
            for s in sessions
            if getattr(s, "sending", False) and s._handler_coroutine is not None
        ]
        for session in sessions:
            if not getattr(session, "sending", False):
                _abort(session)
        cancelled = False
        if sending:
            try:
                await asyncio.wait(sending, timeout=grace)
            except asyncio.CancelledError:
                cancelled = True
        for session in sessions:  # past the grace: its sender hears nothing and sends again
            _abort(session)
        cancelled = await _through_cancels(lambda: tasks) or cancelled
        cancelled = await self.handler.finished() or cancelled
        await self.server.wait_closed()
        if cancelled:
            raise asyncio.CancelledError


def _abort(session: Any) -> None:
    if session.transport is not None:
        session.transport.abort()  # its session's task is cancelled


async def _through_cancels(pending: Callable[[], Any]) -> bool:
    """Wait until the futures ``pending()`` names are all done, cancels notwithstanding;
    whether one came."""
    cancelled = False
    while waiting := [future for future in pending() if not future.done()]:
        try:
            await asyncio.wait(waiting)
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def serve_gateway(
    config: Config,
    host: str | None = None,
    port: int | None = None,
    on_mail: Callable[[list[Delivered]], None] | None = None,
    on_refusal: Callable[[RefusedMail], None] | None = None,
    app: Any = None,
) -> Gateway:
    """Start the SMTP gateway on the running event loop; returns it listening, ready for
    mail (``await gateway.stop()`` ends it). As ``start_gateway``, whose arguments it
    takes; ``port`` 0 listens on a free port. ``on_mail`` and ``on_refusal`` are called on
    the loop. Storing mail, and any DNS, happens in threads: the loop only talks SMTP."""
    hostname = host or config.mail.listen_host
    port = config.mail.listen_port if port is None else port
    loop = asyncio.get_running_loop()
    handler = GatewayHandler(config, on_mail, on_refusal, app)
    session = _session_class(handler)
    settings = _session_settings(config)
    # aiosmtpd would look the name up (DNS, blocking) for every connection.
    settings["hostname"] = await asyncio.to_thread(socket.getfqdn)
    sessions: set[Any] = set()

    class TrackedSession(session):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            sessions.add(self)
            super().connection_made(transport)

        def connection_lost(self, error: Exception | None) -> None:
            sessions.discard(self)
            super().connection_lost(error)

    server = await loop.create_server(
        lambda: TrackedSession(handler, loop=loop, **settings),
        host=hostname,
        port=port,
        reuse_address=True,
    )
    return Gateway(server, hostname, sessions, handler)


def _session_settings(config: Config) -> dict[str, Any]:
    return {
        "data_size_limit": config.mail.max_message_bytes + SMTP_OVERHEAD,
        "decode_data": False,
        "enable_SMTPUTF8": True,
    }


def _session_class(handler: GatewayHandler) -> type:
    """aiosmtpd's SMTP session as the gateway talks it (``handler`` hears its refusals)."""
    from aiosmtpd.smtp import SMTP

    class GatewaySMTP(SMTP):
        # aiosmtpd answers "500 Line too long" past 1,000 bytes; real servers accept them.
        line_length_limit = handler.config.mail.max_message_bytes + SMTP_OVERHEAD
        _mail_from: str | None = None
        sending = False  # in DATA: its mail coming in, being stored, or being answered

        async def smtp_MAIL(self, arg: str | None) -> None:
            # Kept for the refusal line: a SIZE over the limit is refused before aiosmtpd
            # records the sender in the envelope.
            self._mail_from = arg
            await super().smtp_MAIL(arg)

        async def smtp_DATA(self, arg: str) -> None:
            # A session sending its mail when the gateway stops is given the grace to have
            # it stored and answered; then it ends.
            self.sending = True
            try:
                await super().smtp_DATA(arg)
            finally:
                self.sending = False
            if handler.stopping and self.transport is not None:
                self.transport.close()  # after the answer, which close() still sends

        async def push(self, status: Any) -> None:
            # aiosmtpd refuses a declared SIZE, or data past the limit, itself (its own
            # words, "552 Error: ..."), without calling the handler: heard here.
            refusal = isinstance(status, str) and status.startswith("552 Error:")
            if refusal and self.envelope is not None:
                sender = self.envelope.mail_from or _address_of(self._mail_from)
                handler.refused(sender, list(self.envelope.rcpt_tos), status)
            await super().push(status)

    return GatewaySMTP


def _address_of(mail_from: str | None) -> str | None:
    """The address of a ``MAIL FROM:<address> PARAMS`` argument, for a line in the log."""
    if not mail_from:
        return None
    inside = mail_from.partition("<")[2].partition(">")[0]
    return inside or None


def _bind_or_fail(host: str, port: int) -> None:
    # aiosmtpd's Controller.start reports a port in use only after its ready_timeout (5 s);
    # binding first (with SO_REUSEADDR, as asyncio's server does) raises the OSError at once.
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for demos and tests)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
