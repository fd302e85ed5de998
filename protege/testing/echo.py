"""The echo model: a Chat Completions server on loopback that needs no key and answers every
run the same predictable way, for trying protege before choosing a real model.

Its rules, in order, for each request:

1. If the run already called ``send_email`` since the email it answers, it ends the run
   with a short text.
2. If it has called no tool yet, and the email names an offered tool followed by a JSON
   object (``lookup_order {"order_number": "SCP-1042"}``), it calls each such tool with
   that object as its arguments.
3. If ``send_email`` is offered, it replies to the email: the email's text quoted, then
   what each tool it called answered.
4. Otherwise it ends the run with the email's text.

It does what the email says with the tools it is offered (``send_email`` aside, which it
uses only to reply), so it is for trying protege on one's own mail, never for mail from
outside. ``protege model echo`` serves it until interrupted.
"""

from __future__ import annotations

import json
from typing import Any

from protege.testing.model import ScriptedModel, Step, say, tool_call, tool_calls

DONE = "Done: the echo model answered by email."


class EchoModel(ScriptedModel):
    """The server: answers by the rules above and keeps nothing of what it is sent."""

    def _answer(
        self, body: dict[str, Any], authorization: str | None = None
    ) -> tuple[int, dict[str, Any] | bytes, tuple[tuple[str, str], ...]]:
        return (*self._completion(echo_step(body), body), ())


def echo_step(body: dict[str, Any]) -> Step:
    """What the echo model answers to the Chat Completions request ``body``."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    offered = [
        tool["function"]["name"]
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    ]
    asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    text = _email_text(_text_of(messages[asked])) if asked >= 0 else ""
    since = messages[asked + 1 :] if asked >= 0 else []
    called = [
        call.get("function", {}).get("name")
        for message in since
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    ]
    if "send_email" in called:
        return say(DONE)
    if not called:
        wanted = _tools_named(text, [name for name in offered if name != "send_email"])
        if wanted:
            return tool_calls(wanted)
    if "send_email" in offered:
        return tool_call("send_email", mode="reply", body=_reply(text, since))
    return say(text or "(nothing to echo)")


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text only
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _email_text(shown: str) -> str:
    """The body of the email as protege shows it: its fence lines, headers and list of
    attachments left out."""
    lines = [line for line in shown.splitlines() if not line.startswith("<<<")]
    if "" in lines and any(line.startswith("Subject:") for line in lines):
        lines = lines[lines.index("") + 1 :]
    for index, line in enumerate(lines):
        if line.startswith("Attachments (read_attachment"):
            lines = lines[:index]
            break
    return "\n".join(lines).strip()


def _tools_named(text: str, offered: list[str]) -> list[Step | tuple[str, dict[str, Any]]]:
    """Each ``tool_id {json object}`` in ``text`` for an offered tool, in order."""
    decoder = json.JSONDecoder()
    found: list[tuple[int, str, dict[str, Any]]] = []
    for name in offered:
        start = 0
        while (at := text.find(name, start)) >= 0:
            start = at + len(name)
            rest = text[start:]
            brace = len(rest) - len(rest.lstrip())
            if not rest[brace:].startswith("{") or (at and _word(text[at - 1])):
                continue
            try:
                arguments, _ = decoder.raw_decode(rest[brace:])
            except ValueError:
                continue
            if isinstance(arguments, dict):
                found.append((at, name, arguments))
    return [(name, arguments) for _, name, arguments in sorted(found, key=lambda f: f[0])]


def _word(character: str) -> bool:
    return character.isalnum() or character == "_"


def _reply(text: str, since: list[dict[str, Any]]) -> str:
    quoted = "\n".join(f"> {line}" if line else ">" for line in text.splitlines()) or "> (empty)"
    reply = f"You wrote:\n\n{quoted}\n"
    results = [
        "\n".join(line for line in _text_of(m).splitlines() if not line.startswith("<<<"))
        for m in since
        if m.get("role") == "tool"
    ]
    if results:
        reply += "\nWhat the tools answered:\n\n" + "\n".join(results) + "\n"
    return reply + "\n(This answer comes from protege's echo model.)"
