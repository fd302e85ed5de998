"""``send_email``: the only way an agent's words leave as mail."""

from __future__ import annotations

import email.utils
import re
from typing import Any

from protege import Tool
from protege.mail import reply_headers, routing_key, visible_blob
from protege.models import Message

_REPLY_PREFIX = re.compile(r"^\s*(re\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)

ADDRESSES = {"type": "array", "items": {"type": "string", "minLength": 3}, "maxItems": 50}


def reply_subject(subject: str) -> str:
    """``subject`` with exactly one ``Re: `` in front."""
    return "Re: " + _REPLY_PREFIX.sub("", subject or "").strip()


def reply_recipients(
    inbound: Message, agent_address: str, to=(), cc=(), bcc=()
) -> tuple[list[str], list[str], list[str]]:
    """Reply-all: the sender (or its Reply-To) and the other To recipients in To, the Cc
    kept in Cc, plus what the agent adds; the agent itself dropped; each person once."""
    sender = inbound.reply_to or inbound.sender
    seen = {routing_key(agent_address)}
    lists: tuple[list[str], list[str], list[str]] = ([], [], [])
    wanted = (
        [sender, *inbound.to_addresses, *to],
        [*inbound.cc_addresses, *cc],
        list(bcc),
    )
    for target, addresses in zip(lists, wanted, strict=True):
        for address in addresses:
            key = routing_key(address)
            if key is not None and key not in seen:
                seen.add(key)
                target.append(email.utils.getaddresses([address])[0][1])
    return lists


class SendEmailTool(Tool):
    """Sends mail as the agent: a reply in the current conversation, or a new one."""

    description = (
        "Sends an email from you. This is the only way to write to anyone: your plain replies "
        'are never sent. mode "reply" answers the message you are handling: it goes to the '
        "sender and everyone else on it (reply-all), keeps the subject and the thread; add "
        'people with to, cc or bcc. mode "new" starts a new conversation: give to and '
        "subject. body is the full text. attachments are ids of files you may use (files "
        "attached to your mail, or files you created)."
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
            "attachments": {"type": "array", "items": {"type": "integer"}, "maxItems": 10},
        },
    }

    def use(self, context, mode, body, to=(), cc=(), bcc=(), subject=None, attachments=()):
        agent = context.agent
        files = []
        for blob_id in attachments:
            blob = visible_blob(agent, blob_id)
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
        mail["body"] = body
        try:
            outcome = context.deliver(mail, attachments=files)
        except Exception as error:  # a refusal from the gateway (bad address, limits)
            return self.failure(error)
        if outcome.get("status") != "sent":
            return self.failure(f"the mail was not sent: {outcome.get('error')}", **outcome)
        return self.success(**outcome)

    def _reply(self, context, to, cc, bcc) -> dict[str, Any] | str:
        inbound = context.message
        if inbound is None:
            return 'a scheduled run has no message to reply to: use mode "new" with to and subject'
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


def loop_count(message: Message) -> int:
    """How many times this message has gone between agents (its X-Protege-Loop)."""
    for flag in message.flags or []:
        if flag.startswith("loop: "):
            return int(flag.split(": ", 1)[1])
    return 0
