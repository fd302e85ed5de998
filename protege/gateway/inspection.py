"""Inspecting inbound mail before it may start a run: each ``inspect_inbound`` plugin may
flag a stored mail or hold it (stored, flagged, no run), and every decision goes to the
audit log under its plugin's name.

The hook is one pluggy call (``tryfirst``, ``trylast`` and wrappers hold). Decisions only
accumulate: ``flag`` and ``hold`` add one, attributed to the plugin protege is calling, to a
record the mail does not hold, and the mail shows what was decided so far; nothing an
inspector does to the mail takes back another's restriction. An inspector that raises holds
the mail (fail-closed): a check that could not finish must not let through what it might
have stopped.
"""

from __future__ import annotations

import contextvars
import email.utils
import logging
from typing import Any

import attrs

from protege import audit
from protege.authentication import Verdict
from protege.config import Config
from protege.db import database
from protege.gateway.outbound import queue_mail
from protege.models import Message
from protege.plugins import (
    INTERNAL_DISTRIBUTION,
    LoadedPlugin,
    PluginHost,
    Selection,
    current_plugin,
    error_line,
    normalize,
    observing,
)

logger = logging.getLogger(__name__)

HOOK = "inspect_inbound"
FLAG, HOLD = "flag", "hold"
INSPECTION_FAILED = "inspection_failed"
HELD = "held"
MAX_TEXT = 500  # characters of one flag or hold reason; longer ones are cut
SLOW_SECONDS = 1.0  # an inspector taking longer over one mail is logged
# The decisions taken on the mail being inspected (by message id), while the hook runs.
_decisions: contextvars.ContextVar[tuple[int, list[Decision]] | None] = contextvars.ContextVar(
    "protege_inspection", default=None
)


@attrs.frozen
class Decision:
    """One inspector's decision on one mail: a flag, or a hold, with its text."""

    plugin: str
    kind: str  # FLAG or HOLD
    text: str


@attrs.frozen
class InboundMail:
    """The mail an inspector is asked about (``inspect_inbound``'s ``message``): a copy of
    the stored message, the sender verdict, what earlier inspectors decided, and the two
    things an inspector may do, ``flag`` and ``hold``."""

    id: int
    agent: str
    agent_address: str
    sender: str  # the From as written (a name and an address)
    sender_address: str  # its address alone, as written ("" when there is none)
    to: tuple[str, ...]
    cc: tuple[str, ...]
    subject: str
    body: str
    message_id: str
    status: str  # accepted, or refused/ignored when it starts no run anyway
    verdict: Verdict
    gateway_flags: tuple[str, ...]  # the flags the gateway gave it, before any inspector

    @property
    def flags(self) -> tuple[str, ...]:
        """The flags so far: the gateway's, then the inspectors' (a hold shows as one)."""
        return (*self.gateway_flags, *Inspection(tuple(self._decided())).flags)

    @property
    def holds(self) -> tuple[str, ...]:
        """Why inspectors held it so far."""
        return tuple(d.text for d in self._decided() if d.kind == HOLD)

    @property
    def held(self) -> bool:
        """Whether an inspector held the mail so far."""
        return bool(self.holds)

    def flag(self, text: str) -> None:
        """Add the flag ``text`` (one line) to the mail."""
        self._decide(FLAG, _one_line(text, "a flag"))

    def hold(self, reason: str) -> None:
        """Keep the mail from starting a run, for ``reason`` (one line); it stays stored."""
        self._decide(HOLD, _one_line(reason, "a hold reason"))

    def _decided(self) -> list[Decision]:
        current = _decisions.get()
        return list(current[1]) if current is not None and current[0] == self.id else []

    def _decide(self, kind: str, text: str) -> None:
        current = _decisions.get()
        if current is None or current[0] != self.id:
            raise RuntimeError("a mail is flagged or held while its inspection runs")
        current[1].append(Decision(_label(current_plugin()), kind, text))


def _one_line(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be text, not {type(text).__name__}")
    line = " ".join(text.split())
    if not line:
        raise ValueError(f"{what} must say something")
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 1] + "…"


@attrs.frozen
class Inspection:
    """What the inspectors decided on one mail, in the order they decided it."""

    decisions: tuple[Decision, ...] = ()

    @property
    def holds(self) -> tuple[Decision, ...]:
        """The decisions that hold the mail."""
        return tuple(d for d in self.decisions if d.kind == HOLD)

    @property
    def held(self) -> bool:
        """Whether any inspector held the mail."""
        return any(d.kind == HOLD for d in self.decisions)

    @property
    def reason(self) -> str:
        """Why the mail is held, in the inspectors' words."""
        return "; ".join(d.text for d in self.holds)

    @property
    def flags(self) -> list[str]:
        """The flags to add to the message: each inspector's flags, and one per hold."""
        return [d.text if d.kind == FLAG else f"{HELD}: {d.text}" for d in self.decisions]


@attrs.frozen
class OwnInspectors:
    """The application mail is inspected with when the caller gave none: protege's own
    inspectors only (no installed plugin is loaded behind the caller's back)."""

    config: Config
    plugins: PluginHost

    @classmethod
    def of(cls, config: Config) -> OwnInspectors:
        """protege's own inspectors, with ``config``."""
        return cls(config, PluginHost(sources=(), selection=Selection()))

    def queue_mail(self, **fields: Any) -> dict[str, Any]:
        """Queue protege's own mail (a held sender's notice, an operators' alert) as an
        installation's ``queue_mail`` does, with ``config``."""
        return queue_mail(config=self.config, **fields)


def inspect(app: Any, message: Message, agent: Any, verdict: Verdict) -> Inspection:
    """Ask the inspectors of ``app`` about the stored ``message`` of ``agent``; record each
    decision in the audit log (in the caller's transaction) and return them all."""
    decisions: list[Decision] = []
    failures: list[Decision] = []

    def observe(plugin: LoadedPlugin, took: float, error: BaseException | None) -> None:
        if took > SLOW_SECONDS:  # the mail's transaction (and on SQLite every writer) waited
            logger.warning(
                "inspect_inbound of plugin %s took %.1f s over message %s (more than %s s)",
                _label(plugin),
                took,
                message.id,
                SLOW_SECONDS,
            )
        if error is not None:
            label = _label(plugin)
            logger.error(
                "inspect_inbound of plugin %s failed on message %s: %s; the mail is held",
                label,
                message.id,
                error_line(error),
                exc_info=error,
            )
            failures.append(_failed(label, error_line(error)))

    mail = _mail_for(message, agent, verdict)
    token = _decisions.set((message.id, decisions))
    try:
        # In a savepoint of the storing transaction: an inspector's failed statement (which
        # on PostgreSQL spoils the transaction, even when the inspector catches it) is
        # rolled back to here, and the mail is held rather than lost.
        with database.atomic(), observing(observe):
            app.plugins.hook.inspect_inbound(app=app, message=mail)
    except BaseException as error:  # a wrapper that raised past the guard: none may be skipped
        logger.exception("inbound mail %s: the inspectors could not all be asked", message.id)
        failures.append(_failed("protege", error_line(error)))
    finally:
        _decisions.reset(token)
    decisions += failures
    for decision in decisions:
        _audit(message, agent, decision)
    return Inspection(tuple(decisions))


def _mail_for(message: Message, agent: Any, verdict: Verdict) -> InboundMail:
    return InboundMail(
        id=message.id,
        agent=agent.name,
        agent_address=agent.address,
        sender=message.sender,
        sender_address=email.utils.parseaddr(message.sender or "")[1],
        to=tuple(message.to_addresses or ()),
        cc=tuple(message.cc_addresses or ()),
        subject=message.subject,
        body=message.body_text,
        message_id=message.message_id,
        status=message.status,
        verdict=verdict,
        gateway_flags=tuple(message.flags or ()),
    )


def _label(plugin: LoadedPlugin | None) -> str:
    """How the audit log names an inspector: protege's own by module, others by
    distribution."""
    if plugin is None:
        return "unknown"
    if plugin.source.distribution == INTERNAL_DISTRIBUTION:
        return plugin.source.entry_point
    return normalize(plugin.source.distribution)  # never a module name: no dots


def _failed(plugin: str, error: str) -> Decision:
    return Decision(
        plugin, HOLD, f"{INSPECTION_FAILED}: the inspection by {plugin} failed ({error})"
    )


def _audit(message: Message, agent: Any, decision: Decision) -> None:
    audit.record(
        f"inspector:{decision.plugin}",
        "inbound mail held" if decision.kind == HOLD else "inbound mail flagged",
        "message",
        f"message {message.id} for {agent.name}",
        after={"message": message.id, decision.kind: decision.text},
    )
