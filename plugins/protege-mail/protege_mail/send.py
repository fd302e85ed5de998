"""``send_email``: the only way an agent's words leave as mail."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from protege import Result, RunContext, Tool, Trust

if TYPE_CHECKING:
    from protege.models import Message

# protege.mail brings the database layer, so the functions below import it when called:
# building the manifest, which every protege command does, never loads it.

_REPLY_PREFIX = re.compile(r"^\s*(re\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)

ADDRESSES = {"type": "array", "items": {"type": "string", "minLength": 3}, "maxItems": 50}
# A file's token; a number names a file stored before files had tokens.
FILE_REFERENCE = {"type": ["string", "integer"], "minLength": 1, "maxLength": 64, "minimum": 1}


def reply_subject(subject: str) -> str:
    """``subject`` with exactly one ``Re: `` in front."""
    return "Re: " + _REPLY_PREFIX.sub("", subject or "").strip()


def reply_recipients(
    inbound: Message,
    agent_address: str,
    to: Sequence[str] = (),
    cc: Sequence[str] = (),
    bcc: Sequence[str] = (),
) -> tuple[list[str], list[str], list[str]]:
    """Reply-all: the sender (or every Reply-To address) and the other To recipients in To,
    the Cc kept in Cc, plus what the agent adds; the agent itself dropped; each person once.
    Carried-over addresses that are not plain mailboxes are left out; the agent's own
    additions are kept as given (the gateway refuses bad ones)."""
    from protege.mail import clean_address, routing_key

    answer_to = list(inbound.reply_to_addresses or []) or [inbound.sender]
    seen = {routing_key(agent_address)}
    lists: tuple[list[str], list[str], list[str]] = ([], [], [])
    wanted = (
        [*answer_to, *inbound.to_addresses, *to],
        [*inbound.cc_addresses, *cc],
        list(bcc),
    )
    for target, addresses in zip(lists, wanted, strict=True):
        for address in addresses:
            bare = clean_address(address)
            key = routing_key(bare)
            if bare is not None and key not in seen:
                seen.add(key)
                target.append(bare)
    return lists


class SendEmailTool(Tool):
    """Sends mail as the agent: a reply in the current conversation, or a new one."""

    description = (
        "Sends an email from you. This is the only way to write to anyone: your plain replies"
        ' are never sent. mode "reply" answers the message you are handling: it goes to the '
        "sender and everyone else on it (reply-all), keeps the subject and the thread; add "
        'people with to, cc or bcc. mode "new" starts a new conversation: give to and '
        "subject. body is the full text. attachments are blob ids of files you may use (files"
        " attached to the mail you may see, or files you created). One mail goes to a limited"
        " number of people. The result says the mail is queued: it goes out moments later, "
        "apart from your work, and what the mail server answered is kept with the run."
    )
    summary = "Send mail as the agent: reply-all in the thread, or a new message."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["mode", "body"],
        "properties": {
            "mode": {"enum": ["reply", "new"]},
            "to": ADDRESSES,
            "cc": ADDRESSES,
            "bcc": ADDRESSES,
            "subject": {"type": "string", "maxLength": 500},
            "body": {"type": "string", "minLength": 1},
            "attachments": {"type": "array", "items": FILE_REFERENCE, "maxItems": 10},
        },
    }
    trust = Trust.UNTRUSTED  # the result carries the inbound subject, addresses, relay answers

    def use(
        self,
        context: RunContext,
        mode: str,
        body: str,
        to: Sequence[str] = (),
        cc: Sequence[str] = (),
        bcc: Sequence[str] = (),
        subject: str | None = None,
        attachments: Sequence[str | int] = (),
    ) -> Result:
        from protege.mail import visible_blob

        agent = context.agent
        files = []
        scope = context.mail_scope(self.id)
        for blob_id in attachments:
            blob = visible_blob(agent, blob_id, scope)
            if blob is None:
                return self.failure(f"there is no file {blob_id} that you may attach")
            files.append(blob)
        if mode == "reply":
            mail = self._reply(context, to, cc, bcc)
            if isinstance(mail, str):
                return self.failure(mail)
        else:
            if not to or not (subject or "").strip():
                return self.failure('mode "new" needs to and subject')
            mail = {"to": list(to), "cc": list(cc), "bcc": list(bcc), "subject": subject}
            if context.message is not None:
                mail["loop"] = loop_count(context.message)
        too_many = _over_the_limit(mail, context.config.mail.max_recipients, mode)
        if too_many:
            return self.failure(too_many)
        mail["body"] = body
        try:
            outcome = context.queue_mail(mail, attachments=files)
        except Exception as error:  # a refusal from the gateway (bad address, limits)
            return self.failure(error)
        # "queued": stored, and sent by the delivery loop apart from this run ("sent" and
        # "recorded" come from test doubles and older hosts that send at once).
        if outcome.get("status") not in ("queued", "sent", "recorded"):
            return self.failure(f"the mail was not sent: {outcome.get('error')}", **outcome)
        return self.success(**outcome)

    def _reply(
        self, context: RunContext, to: Sequence[str], cc: Sequence[str], bcc: Sequence[str]
    ) -> dict[str, Any] | str:
        inbound = context.message
        if inbound is None:
            return 'a scheduled run has no message to reply to: use mode "new" with to and subject'
        from protege.mail import reply_headers

        to_list, cc_list, bcc_list = reply_recipients(inbound, context.agent.address, to, cc, bcc)
        if not (to_list or cc_list or bcc_list):
            return "nobody to reply to: the message's sender has no usable address"
        return {
            "to": to_list,
            "cc": cc_list,
            "bcc": bcc_list,
            "subject": reply_subject(inbound.subject),
            "loop": loop_count(inbound),
            **reply_headers(inbound),
        }


def _over_the_limit(mail: dict[str, Any], limit: int, mode: str) -> str | None:
    from protege.mail import clean_address

    people = {
        (clean_address(a) or a).lower()
        for field in ("to", "cc", "bcc")
        for a in mail.get(field) or []
    }
    if len(people) <= limit:
        return None
    if mode == "reply":
        return (
            f"a reply to everyone on this message would go to {len(people)} people; one mail "
            f'may go to at most {limit}: use mode "new" with at most {limit} recipients '
            "(to, cc and bcc together)"
        )
    return (
        f"this mail would go to {len(people)} people; one mail may go to at most {limit} "
        "(to, cc and bcc together): send it to fewer"
    )


def loop_count(message: Message) -> int:
    """How many times this message has gone between agents (its X-Protege-Loop)."""
    for flag in message.flags or []:
        count = flag.removeprefix("loop: ")
        if count != flag and count.isdigit():
            return int(count)
    return 0
