"""Telling people about holds: the held sender (``notify_held``) and the operators
(``alert_to``), each at most once per window; both off unless configured.

"Once" is a ``limit_notice`` row, unique per audience, agent, subject and window, inserted
in a savepoint with the notice's mail: when another mail (perhaps in another process) got
there first, the insert fails and nobody is told again; when the mail cannot be queued,
neither is kept, and the next held mail tries again.

A notice is automatic mail (RFC 3834): it says ``Auto-Submitted``, carries the loop count
of the mail it answers plus one (``X-Protege-Loop``, as agents' replies do), and is never
sent for mail that is automatic itself or came through a mailing list: another agent or an
auto-responder would answer it, and be told again, once per window for ever.

A sender is told only when the mail proved who sent it (its domain authenticated): a
notice to a forged From would be backscatter, mail to someone who never wrote. Never to
one of the installation's own agents, whatever the mail says. The sender's notice is
kept under the time the hold ends, not when its window began: a later mail of the same
sender, held behind the first (``held_mail``), names the same time and tells nobody again.

Both run in the transaction that stores the mail, and never stop it from being stored:
a notice that fails is logged and left out.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Callable
from typing import Any

import peewee

from protege import blobs
from protege.addresses import canonical_address, routing_key
from protege.config import Config
from protege.db import database
from protege.limits.admission import BEHIND_HELD, Hold
from protege.limits.windows import HOUR, naive_utc, window
from protege.mail import reply_headers
from protege.models import Agent, Message
from protege.models.limits import OPERATORS, SENDER, LimitNotice
from protege.models.messages import FROM_AN_AGENT

logger = logging.getLogger(__name__)

_REPLY_PREFIX = re.compile(r"^\s*(re\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_LIST_HEADERS = ("List-Id", "List-Post")
_BULK = {"list", "bulk", "junk"}
# The flags the gateway gives automatic mail (protege.gateway.parse): no answer to them.
_AUTOMATIC_FLAGS = ("auto-submitted: ", "precedence: ", "null return path", "report: ")


def tell_of_hold(
    app: Any, agent: Agent, message: Message, hold: Hold, now: datetime.datetime, config: Config
) -> None:
    """Tell the sender of ``message`` and the operators that its run is held, where the
    configuration asks for it and nobody was told for this window yet. ``app`` (the
    installation, or protege's own inspectors) queues the mail (``queue_mail``)."""
    settings = config.limits
    if not (settings.notify_held or settings.alert_to):
        return
    queue_mail = getattr(app, "queue_mail", None)
    if queue_mail is None:
        logger.warning("run of message %s held; no mail queue to tell anyone with", message.id)
        return
    now = naive_utc(now)
    if settings.alert_to and hold.limit != BEHIND_HELD:  # held behind: alerted when reached
        _best_effort(
            "alert the operators",
            lambda: alert_operators(queue_mail, agent, hold, now, settings.alert_to or ""),
        )
    if settings.notify_held:
        _best_effort(
            "tell the sender",
            lambda: tell_sender(queue_mail, agent, message, hold, now, config),
        )


def alert_of_hold(
    queue_mail: Callable[..., Any], agent: Agent, hold: Hold, now: datetime.datetime, config: Config
) -> None:
    """Alert the operators (``[limits] alert_to``, if set) that ``agent`` reached the limit
    of ``hold``: for runs held without a mail to answer, a scheduled run's or one a
    spending limit stopped part way. Never raises."""
    alert_to = config.limits.alert_to
    if alert_to and hold.limit != BEHIND_HELD:
        _best_effort(
            "alert the operators",
            lambda: alert_operators(queue_mail, agent, hold, naive_utc(now), alert_to),
        )


def _best_effort(what: str, notice: Callable[[], bool]) -> None:
    try:
        notice()
    except Exception:  # the mail is stored and held whatever becomes of its notice
        logger.exception("could not %s of a held run", what)


def tell_sender(
    queue_mail: Callable[..., Any],
    agent: Agent,
    message: Message,
    hold: Hold,
    now: datetime.datetime,
    config: Config,
) -> bool:
    """Reply to ``message``, in its thread, that it is kept and will be answered after
    the hold ends, unless its sender is unproven, is one of the agents, the mail is
    automatic or a list's (``automatic``), or the sender was told in this window already.
    Returns whether the notice was queued."""
    address = canonical_address(message.sender)
    key = routing_key(message.sender)
    if (
        address is None
        or key is None
        or not message.sender_authenticated
        or FROM_AN_AGENT in (message.flags or ())
        or key in _agent_keys()
        or automatic(message, config)
    ):
        return False
    # A sender behind held mail whose time has come (the scheduler's pass is late) is
    # told once for the hour under way.
    until = hold.until if hold.until > now else window(HOUR, now)[1]
    when = f"{until:%Y-%m-%d %H:%M} UTC"
    mail = {
        "to": [address],
        "subject": "Re: " + _REPLY_PREFIX.sub("", message.subject or "").strip(),
        "body": (
            f"Your message{_quoted(message.subject)} reached {agent.name} and is kept.\n\n"
            f"{agent.name} cannot take more mail for the moment; it will answer yours after "
            f"{when}. There is no need to send it again.\n\n"
            "This notice is sent once: more mail you send before then is kept as well, "
            "and answered in its turn.\n"
        ),
        **reply_headers(message),
        "loop": loop_count(message),
    }
    return _once(
        SENDER,
        agent,
        key,
        until,
        now,
        lambda: queue_mail(agent=agent, run=None, mail=mail, auto_submitted="auto-replied"),
    )


def alert_operators(
    queue_mail: Callable[..., Any],
    agent: Agent,
    hold: Hold,
    now: datetime.datetime,
    alert_to: str,
) -> bool:
    """Mail ``alert_to`` that ``agent`` reached the limit of ``hold``, once per agent,
    limit and window, with the commands to see and release the held runs. Returns
    whether the alert was queued."""
    if routing_key(alert_to) in _agent_keys():  # an agent would answer it: a loop
        logger.warning("[limits] alert_to %s is an agent's address: no alert sent", alert_to)
        return False
    mail = {
        "to": [alert_to],
        "subject": f"Limit reached: {hold.limit} ({agent.name})",
        "body": (
            f"{agent.name} reached the limit {hold.limit} at {now:%Y-%m-%d %H:%M} UTC:\n"
            f"  {hold.reason}\n\n"
            f"Used {_amount(hold.limit, hold.used)} of {_amount(hold.limit, hold.allowed)} "
            f"(by {hold.subject}) in the window from {hold.window_start:%Y-%m-%d %H:%M} UTC. "
            "Mail over it is stored and its runs are held until "
            f"{hold.until:%Y-%m-%d %H:%M} UTC, when the window reopens: nothing is dropped.\n\n"
            f"See the held runs:  protege runs list --held --agent '{agent.name}'\n"
            f"Release them now:   protege runs release --agent '{agent.name}'\n"
            "                    (or --sender ADDRESS, or run ids)\n"
            "Status and limits:  protege status\n\n"
            "This alert is sent once per agent, limit and window.\n"
        ),
    }
    return _once(
        OPERATORS,
        agent,
        hold.limit,
        hold.window_start,
        now,
        lambda: queue_mail(agent=agent, run=None, mail=mail, auto_submitted="auto-generated"),
    )


def automatic(message: Message, config: Config) -> bool:
    """Whether ``message`` is mail no automatic notice may answer (RFC 3834): a bounce or
    report, ``Auto-Submitted`` (other than ``no``), ``Precedence`` list, bulk or junk, or
    sent through a mailing list (``List-Id``, ``List-Post``). Read from the gateway's flags
    and the mail's own headers; mail whose headers cannot be read counts as automatic."""
    if any(flag.startswith(_AUTOMATIC_FLAGS) for flag in message.flags or ()):
        return True
    if message.raw_blob_id is None:
        return False  # stored by protege itself (record_inbound), not received
    # Here, not at the top: protege's commands that never tell anyone load no email parser.
    from email import policy
    from email.parser import BytesParser

    try:
        raw = blobs.read(message.raw_blob, config)
    except OSError:
        logger.warning("message %s: its headers cannot be read; no notice sent", message.id)
        return True
    head = BytesParser(policy=policy.compat32).parsebytes(raw, headersonly=True)
    if any(name in head for name in _LIST_HEADERS):
        return True
    auto = str(head.get("Auto-Submitted", "")).split(";")[0].strip().lower()
    precedence = str(head.get("Precedence", "")).strip().lower()
    return (bool(auto) and auto != "no") or precedence in _BULK


def loop_count(message: Message) -> int:
    """How many times ``message`` went between agents, as the gateway read its
    ``X-Protege-Loop`` (its ``loop: N`` flag); 0 for mail without one."""
    for flag in message.flags or ():
        count = flag.removeprefix("loop: ")
        if count != flag and count.isascii() and count.isdigit():
            return int(count)
    return 0


def _once(
    audience: str,
    agent: Agent,
    subject: str,
    window_start: datetime.datetime,
    now: datetime.datetime,
    send: Callable[[], Any],
) -> bool:
    """Record the notice and send it, both or neither; False when it was sent before."""
    with database.atomic():  # the notice's row and its mail together
        try:
            with database.atomic():
                LimitNotice.create(
                    audience=audience,
                    agent=agent,
                    subject=subject[:320],
                    window_start=window_start,
                    created_at=now,
                )
        except peewee.IntegrityError:
            return False  # told already, for this window
        send()
    return True


def _agent_keys() -> set[str]:
    keys = (routing_key(agent.address) for agent in Agent.select(Agent.address))
    return {key for key in keys if key is not None}


def _quoted(subject: str | None) -> str:
    text = " ".join((subject or "").split())
    return f' "{text[:200]}"' if text else ""


def _amount(limit: str, value: float) -> str:
    return f"{value:.4f}" if "cost" in limit else f"{int(value):,}"
