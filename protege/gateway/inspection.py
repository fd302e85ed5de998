"""Inspecting inbound mail before it may start a run: each ``inspect_inbound`` plugin may
flag a stored mail or hold it (stored, flagged, no run), and every decision goes to the
audit log under its plugin's name.

Decisions only accumulate. Each plugin is handed a mail of its own that shows what was
decided before it and collects only its own decisions: nothing one plugin does reaches
another's flags or holds, so no inspector can take back another's restriction. An
inspector that raises holds the mail (fail-closed): a check that could not finish must not
let through what it might have stopped.
"""

from __future__ import annotations

import email.utils
import logging
from typing import Any

import attrs

from protege import audit
from protege.authentication import Verdict
from protege.config import Config
from protege.hookcalls import each_plugin
from protege.models import Message
from protege.plugins import PluginHost, Selection, error_line

logger = logging.getLogger(__name__)

HOOK = "inspect_inbound"
FLAG, HOLD = "flag", "hold"
INSPECTION_FAILED = "inspection_failed"
HELD = "held"
MAX_TEXT = 500  # characters of one flag or hold reason; longer ones are cut


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
    flags: tuple[str, ...]  # the flags so far: the gateway's, then earlier inspectors'
    holds: tuple[str, ...]  # why earlier inspectors held it
    _decided: list[tuple[str, str]] = attrs.field(factory=list, repr=False, eq=False)

    @property
    def held(self) -> bool:
        """Whether an earlier inspector held the mail."""
        return bool(self.holds)

    def flag(self, text: str) -> None:
        """Add the flag ``text`` (one line) to the mail."""
        self._decided.append((FLAG, _one_line(text, "a flag")))

    def hold(self, reason: str) -> None:
        """Keep the mail from starting a run, for ``reason`` (one line); it stays stored."""
        self._decided.append((HOLD, _one_line(reason, "a hold reason")))


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


def inspect(app: Any, message: Message, agent: Any, verdict: Verdict) -> Inspection:
    """Ask each inspector of ``app`` about the stored ``message`` of ``agent``; record each
    decision in the audit log (in the caller's transaction) and return them all."""
    decisions: list[Decision] = []
    try:
        callers = each_plugin(app.plugins.manager, HOOK)
    except Exception as error:  # no inspector could be asked: none may be skipped
        logger.exception("inbound mail %s: the inspectors could not be called", message.id)
        callers = []
        decisions.append(_failed("protege", error_line(error)))
    loaded = _loaded_plugins(app)
    for caller in callers:
        mail = _mail_for(message, agent, verdict, decisions)
        plugin = loaded.get(caller.plugin)
        failures_before = _failures(plugin)
        try:
            caller.call(app=app, message=mail)
        except BaseException as error:  # even SystemExit: one inspector's fault
            failure: BaseException | str | None = error
        else:
            # An installed plugin's raise is recorded by its guard, not passed on: the
            # record is how a failed inspection is told from one that found nothing.
            failure = _new_failure(plugin, failures_before)
        decisions += _decided(caller.plugin, mail)
        if failure is not None:
            shown = failure if isinstance(failure, str) else error_line(failure)
            logger.error(
                "inspect_inbound of plugin %s failed on message %s: %s; the mail is held",
                caller.plugin,
                message.id,
                shown,
                exc_info=failure if isinstance(failure, BaseException) else None,
            )
            decisions.append(_failed(caller.plugin, shown))
    for decision in decisions:
        _audit(message, agent, decision)
    return Inspection(tuple(decisions))


def _mail_for(
    message: Message, agent: Any, verdict: Verdict, decisions: list[Decision]
) -> InboundMail:
    earlier = Inspection(tuple(decisions))
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
        flags=(*(message.flags or ()), *earlier.flags),
        holds=tuple(d.text for d in earlier.holds),
    )


def _decided(plugin: str, mail: InboundMail) -> list[Decision]:
    # Read from the copy this plugin was handed, once its call returned: whatever it did to
    # that copy, it never saw (or could change) the list the decisions are kept in.
    return [Decision(plugin, kind, text) for kind, text in list(mail._decided)]


def _loaded_plugins(app: Any) -> dict[str, Any]:
    """The loaded plugins of ``app`` by the name pluggy knows each by."""
    host = app.plugins
    found: dict[str, Any] = {}
    for plugin in [*getattr(host, "internal", ()), *getattr(host, "plugins", ())]:
        found[plugin.source.entry_point] = plugin  # an internal plugin: its module's name
        found[f"{plugin.source.distribution}:{plugin.source.entry_point}"] = plugin
    return found


def _failures(plugin: Any) -> tuple[int, int] | None:
    failure = None if plugin is None else getattr(plugin, "failures", {}).get(HOOK)
    return None if failure is None else (id(failure), failure.count)


def _new_failure(plugin: Any, before: tuple[int, int] | None) -> str | None:
    if _failures(plugin) == before:
        return None
    return plugin.failures[HOOK].error  # the first error; later ones are only counted


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
