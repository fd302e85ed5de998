"""The conversation a run shows the model: instructions, policy, the thread so far, the ask."""

from __future__ import annotations

import datetime
import json
import logging
import zoneinfo
from collections.abc import Sequence
from typing import Any

from protege import blobs
from protege.config import Config
from protege.errors import ProtegeError
from protege.filetypes import IMAGE_TYPES, PDF_TYPE, malformed
from protege.harness import events
from protege.harness.approval import note
from protege.harness.fence import Fence
from protege.harness.parts import PartBudget, Shown, fenced_parts
from protege.models import Blob, Event, Message, Responsibility, Run
from protege.models.blobs import attachments_of
from protege.result import IMAGE, PDF, Part, Trust

logger = logging.getLogger(__name__)

HISTORY_LIMIT = 20  # earlier inbound messages of the thread shown to the model, newest kept
FILES_NOT_SHOWN_AGAIN = {
    "role": "user",
    "content": "(protege: the files these tool calls gave back were shown to you as "
    "themselves then; they are not shown again here.)",
}


def system_prompt(run: Run, fence: Fence) -> str:
    """The agent's instructions, the security policy, and the facts of this run."""
    agent = run.agent
    parts = [agent.instructions.strip()] if agent.instructions.strip() else []
    parts.append(
        f"You are {agent.name}, reached by email at {agent.address}. Your plain replies are "
        "never sent to anyone: to write to someone, call send_email if you have it."
    )
    parts.append(fence.policy())
    return "\n\n".join(parts)


def render_email(message: Message, fence: Fence, attachments: Sequence[Blob] = ()) -> str:
    """An email as the model sees it: headers, body and a list of its attachments (name,
    type, size, blob id), all fenced (it came from outside)."""
    lines = [
        f"From: {message.sender}",
        f"To: {', '.join(message.to_addresses)}",
    ]
    if message.cc_addresses:
        lines.append(f"Cc: {', '.join(message.cc_addresses)}")
    lines += [f"Subject: {message.subject}", "", message.body_text]
    if attachments:
        lines += ["", "Attachments (read_attachment reads one by its blob id, if you have it):"]
        lines += [
            f"- {blob.filename} ({blob.content_type}, {blob.size} bytes, blob id {blob.token})"
            for blob in attachments
        ]
    return fence.wrap("\n".join(lines), source="email")


def render_result(result: events.ToolResult, fence: Fence) -> str:
    """A tool result's content as the model sees it, fenced if untrusted."""
    content = "" if result.content is None else str(result.content)
    if result.trust == Trust.UNTRUSTED:
        return fence.wrap(content, source=f"tool {result.tool}")
    return content


def _duty(run: Run, responsibility: Responsibility) -> str:
    """A scheduled run's ask: its responsibility's instructions, and the due time it stands
    for (in the responsibility's time zone), so that a late run knows which one it is."""
    if run.due_at is None:
        return f"{responsibility.prompt}\n\n(protege: run on request, not on a schedule.)"
    due = run.due_at.replace(tzinfo=datetime.UTC).astimezone(
        zoneinfo.ZoneInfo(responsibility.timezone)
    )
    return (
        f"{responsibility.prompt}\n\n(protege: this is the run due at "
        f"{due:%A %d %B %Y, %H:%M} {responsibility.timezone} for the responsibility "
        f"{responsibility.name!r}.)"
    )


def build_messages(
    run: Run, fence: Fence, config: Config | None = None, budget: PartBudget | None = None
) -> list[dict[str, Any]]:
    """The full conversation for the first model call of ``run``.

    With ``config`` and ``budget``, the images and PDFs attached to the message being
    answered are shown as themselves, as far as the model accepts them and the budget
    allows; otherwise they are only listed."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(run, fence)}]
    message = run.message
    if message is None:
        responsibility = run.responsibility
        if responsibility is None:
            raise ProtegeError(f"run {run.id} has neither a message nor a responsibility")
        messages.append({"role": "user", "content": _duty(run, responsibility)})
        return messages
    messages += thread_history(run, fence)
    attached = attachments_of([message])[message.id]
    text = render_email(message, fence, attached)
    if config is None or budget is None or not attached:
        messages.append({"role": "user", "content": text})
        return messages
    parts, left_out = fenced_parts(_viewable(attached, config), budget, fence, "email attachments")
    if left_out:
        text += "\n" + "\n".join(f"(protege: {line})" for line in left_out)
    if not parts:
        messages.append({"role": "user", "content": text})
    else:
        messages.append({"role": "user", "content": [{"type": "text", "text": text}, *parts]})
    return messages


def _viewable(attached: Sequence[Blob], config: Config) -> list[Shown]:
    """The attachments that are images or PDFs by their bytes, as labelled parts (none for
    a model that reads neither: it is not told about what it could never be shown)."""
    found: list[Shown] = []
    if not (config.model.accepts(IMAGE) or config.model.accepts(PDF)):
        return found
    for blob in attached:
        if blob.size > config.runs.max_shown_attachment_bytes:
            continue
        try:
            data = blobs.read(blob, config)
        except OSError as error:  # listed anyway; read_attachment reports it if asked
            logger.warning("attachment %s cannot be read: %s", blob.id, error)
            continue
        kind = blobs.sniff(data)
        if kind is not None and malformed(data, kind) is not None:
            continue  # only listed: a model's API would refuse it, and the run fail
        label = f"Attachment {blob.filename} (blob id {blob.token}):"
        ours = f"The attachment with blob id {blob.token}"
        if kind in IMAGE_TYPES:
            found.append(Shown(label, ours, Part(IMAGE, data, kind, blob.filename)))
        elif kind == PDF_TYPE:
            found.append(Shown(label, ours, Part(PDF, data, kind, blob.filename)))
    return found


def thread_history(run: Run, fence: Fence) -> list[dict[str, Any]]:
    """The earlier messages of the run's thread, each followed by what the agent did then."""
    current = run.message
    if current is None:
        return []
    earlier = current.earlier_in_thread(HISTORY_LIMIT)
    if not earlier:
        return []
    runs = {r.message_id: r for r in Run.select().where(Run.message.in_([m.id for m in earlier]))}
    timelines: dict[int, list[Event]] = {}
    for event in (
        Event.select()
        .where(Event.run.in_([r.id for r in runs.values()]))
        .where(
            Event.kind.in_(
                [
                    events.MODEL_RESPONSE,
                    events.TOOL_RESULT,
                    events.APPROVAL_ANSWERED,
                    events.APPROVAL_EXPIRED,
                ]
            )
        )
        .order_by(Event.run, Event.seq)
    ):
        timelines.setdefault(event.run_id, []).append(event)
    history: list[dict[str, Any]] = []
    attached = attachments_of(earlier)
    for message in earlier:
        text = render_email(message, fence, attached[message.id])
        history.append({"role": "user", "content": text})
        earlier_run = runs.get(message.id)
        if earlier_run is not None:
            history += _replay(timelines.get(earlier_run.id, []), fence)
    return history


def _replay(timeline: list[Event], fence: Fence) -> list[dict[str, Any]]:
    replayed, unanswered = replay(timeline, fence)
    # A run that ended mid-turn left calls unanswered, and the API rejects that. Only the
    # last turn can be cut short, so the answers belong at the end.
    return replayed + [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": json.dumps({"ok": False, "reason": "not run: the run ended first"}),
        }
        for call in unanswered
    ]


def replay(timeline: list[Event], fence: Fence) -> tuple[list[dict[str, Any]], list[dict]]:
    """A run's recorded turns as conversation messages, and the tool calls of its last
    turn that have no recorded result.

    Files that results showed as themselves are not kept, only described; a note after the
    turn's tool messages says they are not shown again."""
    replayed: list[dict[str, Any]] = []
    answered: set[str] = set()
    calls: list[dict[str, Any]] = []
    files_shown = False
    approvals: dict[str, events.RunEvent] = {}  # the answer to each call that waited
    for row in timeline:
        event = events.read(row.kind, row.payload)
        if isinstance(event, events.ApprovalAnswered | events.ApprovalExpired) and event.call_id:
            approvals[event.call_id] = event
        elif isinstance(event, events.ToolResult) and event.after_approval:
            call_id, tool = str(event.call_id), str(event.tool)
            content = render_result(event, fence)
            replayed.append(note(approvals.get(call_id), call_id, tool, content))
        elif isinstance(event, events.ModelResponse):
            if files_shown:
                replayed.append(FILES_NOT_SHOWN_AGAIN)
                files_shown = False
            message: dict[str, Any] = {"role": "assistant", "content": event.content}
            if event.tool_calls:
                message["tool_calls"] = event.tool_calls
                calls += event.tool_calls
            replayed.append(message)
        elif isinstance(event, events.ToolResult) and event.call_id is not None:
            files_shown = files_shown or bool(event.parts)
            answered.add(event.call_id)
            replayed.append(
                {
                    "role": "tool",
                    "tool_call_id": event.call_id,
                    "content": render_result(event, fence),
                }
            )
    unanswered = [call for call in calls if call["id"] not in answered]
    if files_shown and not unanswered:  # the note may not come between a turn's answers
        replayed.append(FILES_NOT_SHOWN_AGAIN)
    return _in_call_order(replayed), unanswered


def _in_call_order(replayed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool messages after each assistant message in the order of its calls: the
    calls of a turn run at once, so their results are recorded as they end."""
    ordered: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    position: dict[str, int] = {}

    def flush() -> None:
        ordered.extend(sorted(answers, key=lambda m: position.get(m["tool_call_id"], 1 << 30)))
        answers.clear()

    for message in replayed:
        if message.get("role") == "tool":
            answers.append(message)
            continue
        flush()
        if message.get("role") == "assistant":
            position = {c["id"]: i for i, c in enumerate(message.get("tool_calls") or [])}
        ordered.append(message)
    flush()
    return ordered
