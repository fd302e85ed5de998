"""Answers to approval requests, as they arrive by mail.

A reply is an answer when it carries an approval's secret token: in its In-Reply-To or
References (the request's Message-ID holds the token) or in the address it was sent to
(the request's Reply-To, ``agent+approve-TOKEN@domain``). The subject is never read for
it. Such mail starts no run of its own: it decides the approval, or changes nothing.

Only a sender that passed the gateway's checks (one unambiguous mailbox, authenticated,
admitted by the agent's access rules, not an auto-reply) and matches the approval's
approver patterns may decide it; the first word of the reply decides. Anyone else is
ignored without a word back, so that a forger learns nothing. An approver whose reply
cannot be read gets a short mail saying how to answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import attrs

from protege.access import routing_key
from protege.config import Config
from protege.gateway.outbound import DeliveryRefused, queue_mail
from protege.gateway.parse import ParsedMail
from protege.harness.approval import reply_address
from protege.mail import APPROVE_TAG, MESSAGE_ID_PREFIX
from protege.models import Agent, Run
from protege.models.approvals import APPROVED, DENIED, EXPIRED, PENDING, Approval

logger = logging.getLogger(__name__)

_TOKEN = r"([0-9a-fA-F]{40})"
_IN_MESSAGE_ID = re.compile(rf"<{re.escape(MESSAGE_ID_PREFIX)}{_TOKEN}@", re.IGNORECASE)
_IN_ADDRESS = re.compile(rf"\+{re.escape(APPROVE_TAG)}{_TOKEN}@", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]+")
# Only words that cannot mean anything else: "no problem" or "yes, but" get the how-to mail.
APPROVING = {"approve", "approved"}
DENYING = {"deny", "denied", "reject", "rejected"}
MAX_REASON = 500

HOW_TO_ANSWER = """Your reply could not be read as an answer to the approval request.

Reply to the request with APPROVE or DENY as the very first word, optionally followed by a
reason, for example:

    approve
    deny: the photo shows no damage

Nothing was decided yet; the request still waits for an answer.
"""


@attrs.frozen
class Answer:
    """What an approval-shaped mail did: its decision recorded (``decided``), or why not;
    and the run it put back in the queue, if any."""

    decided: bool
    reason: str
    run: Run | None = None


def tokens_in(parsed: ParsedMail, recipients: Iterable[str]) -> set[str]:
    """The approval tokens a mail carries where an answer carries them (never the subject)."""
    found: set[str] = set()
    for ref in [parsed.in_reply_to or "", *parsed.references]:
        found.update(t.lower() for t in _IN_MESSAGE_ID.findall(ref))
    for address in [*recipients, *parsed.to, *parsed.cc]:
        found.update(t.lower() for t in _IN_ADDRESS.findall(address))
    return found


def decision_of(body: str) -> tuple[str | None, str | None]:
    """The decision the first word of ``body`` makes (approved, denied, or None when it is
    neither), and the reason that follows it on its paragraph."""
    lines = [line for line in body.splitlines() if not line.lstrip().startswith(">")]
    text = "\n".join(lines).strip()
    match = _WORD.match(text)
    if match is None:
        return None, None
    word = match.group().lower()
    decision = APPROVED if word in APPROVING else DENIED if word in DENYING else None
    if decision is None:
        return None, None
    rest = text[match.end() :].split("\n\n", 1)[0]
    reason = " ".join(rest.lstrip(" \t:-,.!").split())[:MAX_REASON] or None
    return decision, reason


def answer_by_mail(
    agent: Agent,
    parsed: ParsedMail,
    recipients: Iterable[str],
    config: Config,
    authenticated: bool = False,
) -> Answer | None:
    """Decide the approval this mail answers; None when the mail carries no token (it is
    ordinary mail). Only an ``authenticated`` sender (mail that proved its domain) may
    decide: a token alone, copied or guessed, changes nothing. Call it in the transaction
    that stores the mail."""
    tokens = tokens_in(parsed, recipients)
    if not tokens:
        return None
    if len(tokens) > 1:  # a real answer carries its request's token wherever it carries one
        logger.warning("approval answer for %s carries several tokens; ignored", agent.name)
        return Answer(False, "an answer carrying several approval tokens: nothing decided")
    found = {
        a.id: a
        for a in Approval.select(Approval, Run)
        .join(Run)
        .where((Approval.token.in_(sorted(tokens))) & (Run.agent == agent.id))
    }
    if len(found) != 1:
        why = "no approval request of this agent" if not found else "several approval requests"
        logger.warning("approval answer for %s refers to %s; ignored", agent.name, why)
        return Answer(False, f"an answer to {why}: nothing decided")
    (approval,) = found.values()
    sender = routing_key(parsed.sender) if parsed.sender else None
    if sender is not None and not authenticated:
        logger.warning("approval %s: the answer does not prove its sender; ignored", approval.id)
        return Answer(False, f"approval {approval.id}: the sender is not authenticated")
    if sender is None or not approval.may_answer(parsed.sender):
        logger.warning(
            "approval %s: %s may not answer it; ignored", approval.id, sender or "no sender"
        )
        return Answer(False, f"not an approver of approval {approval.id}: nothing decided")
    if approval.status != PENDING:
        return Answer(False, f"approval {approval.id} was {approval.status} already")
    decision, reason = decision_of(parsed.body)
    if decision is None:
        _explain(agent, parsed, approval, sender, config)
        return Answer(False, f"approval {approval.id}: the answer could not be read")
    if not Approval.answer(approval.id, decision, sender, reason):
        if Approval.get_by_id(approval.id).status != EXPIRED:
            return Answer(False, f"approval {approval.id} was answered already")
        run = Run.get_by_id(approval.run_id)  # expired on this late answer: the run resumes
        woken = run if run.status == "queued" else None
        return Answer(False, f"approval {approval.id} had expired: nothing decided", woken)
    run = Run.get_by_id(approval.run_id)
    woken = run if run.status == "queued" else None
    return Answer(True, f"approval {approval.id} {decision} by {sender}", woken)


def _explain(
    agent: Agent, parsed: ParsedMail, approval: Approval, sender: str, config: Config
) -> None:
    """Mail an approver whose reply could not be read how to answer."""
    threading = [*parsed.references, *([parsed.message_id] if parsed.message_id else [])]
    try:
        queue_mail(
            agent=agent,
            run=None,
            config=config,
            mail={
                "to": [sender],
                "subject": f"How to answer: {parsed.subject}",
                "body": HOW_TO_ANSWER,
                "in_reply_to": parsed.message_id,
                "references": threading,
            },
            reply_to=[reply_address(agent.address, approval.token)],
        )
    except DeliveryRefused as refused:
        logger.warning("approval %s: could not mail how to answer: %s", approval.id, refused)
