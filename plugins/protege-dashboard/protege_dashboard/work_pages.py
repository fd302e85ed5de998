"""Pages for what the agents did and will do: runs with their events, stored files,
responsibilities, and the audit log."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protege import ProtegeError, admin, blobs
from protege.models import Agent, Approval, Blob, Message, Responsibility, Run
from protege_dashboard.security import checked_form
from protege_dashboard.web import actor, found, installation, redirect, render

STATUSES = ("queued", "running", "waiting", "held", "done", "failed", "cancelled")
STOPPABLE = ("queued", "running", "waiting", "held")
KINDS = ("reply", "scheduled")
PAGE = 50


def _whole(text: str) -> int | None:
    """``text`` as an id, when it is one: ASCII digits only ("²" is a digit to
    ``str.isdigit``, not to ``int``), few enough for a database column."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


async def runs_page(request: Request) -> Response:
    """Recent runs, newest first, filtered by agent, status and kind."""
    query = Run.select(Run, Agent).join(Agent).order_by(Run.id.desc())
    agent = request.query_params.get("agent", "")
    status = request.query_params.get("status", "")
    kind = request.query_params.get("kind", "")
    if _whole(agent) is not None:
        query = query.where(Run.agent == _whole(agent))
    if status in STATUSES:
        query = query.where(Run.status == status)
    if kind in KINDS:
        query = query.where(Run.kind == kind)
    before = request.query_params.get("before", "")
    if _whole(before) is not None:
        query = query.where(Run.id < _whole(before))
    runs = list(query.limit(PAGE + 1))
    return render(
        request,
        "runs.html",
        runs=runs[:PAGE],
        older=runs[PAGE - 1].id if len(runs) > PAGE else None,
        agents=list(Agent.select().order_by(Agent.name)),
        statuses=STATUSES,
        kinds=KINDS,
        chosen={"agent": agent, "status": status, "kind": kind},
        held=Run.select().where(Run.status == "held").count(),
    )


def _event_view(row: Any) -> dict[str, Any]:
    payload = row.payload
    typed = admin.read_event(row.kind, payload)
    fields = typed.as_json() if hasattr(typed, "as_json") else payload
    fields = fields if isinstance(fields, dict) else {"payload": fields}
    return {
        "seq": row.seq,
        "kind": row.kind,
        "at": row.created_at,
        "line": admin.render_event(row.kind, payload),
        "fields": fields,
        "pretty": {
            key: value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
            for key, value in fields.items()
            if value not in (None, "", [], {})
        },
    }


def _mail_view(message: Message) -> dict[str, Any]:
    """Where one mail the run queued stands: the delivery loop sends it after the run."""
    refused = [r for r in message.refused_recipients if isinstance(r, dict)]
    return {
        "message": message,
        "status": message.status,
        "attempts": message.delivery_attempts,
        "next_attempt_at": message.next_attempt_at if message.status == "pending" else None,
        "waiting": [str(a) for a in message.pending_recipients],
        "refused": [
            f"{r.get('address')} ({r.get('code')} {r.get('reason')})".strip() for r in refused
        ],
        "error": message.delivery_error,
    }


async def run_page(request: Request) -> Response:
    """One run: the message it answered, its events as a timeline, and the mail it queued
    with where each one's delivery stands."""
    run = found(Run, request.path_params["id"])
    answered = run.message if run.message_id else None
    sent = (
        Message.select()
        .where((Message.run == run) & (Message.direction == "outbound"))
        .order_by(Message.id)
    )
    return render(
        request,
        "run.html",
        run=run,
        answered=answered,
        sender_verdict=answered.verdict if answered is not None else None,
        answered_files=answered.attachments if answered is not None else [],
        mail=[_mail_view(message) for message in sent],
        events=[_event_view(row) for row in run.timeline()],
        approvals=list(Approval.select().where(Approval.run == run.id).order_by(Approval.id)),
        stoppable=run.status in STOPPABLE,
    )


async def message_page(request: Request) -> Response:
    """One stored message: who sent it and what its sender verdict proved, its flags, its
    text, and the runs that answered it (mail that started none is shown here too)."""
    message = found(Message, request.path_params["id"])
    runs = list(Run.select().where(Run.message == message.id).order_by(Run.id))
    return render(
        request,
        "message.html",
        message=message,
        sender_verdict=message.verdict if message.inbound else None,
        runs=runs,
    )


async def run_cancel(request: Request) -> Response:
    """Stop a run, as ``protege runs cancel`` does: a queued or waiting one at once, a
    running one at its next step; recorded in the audit log."""
    run = found(Run, request.path_params["id"])
    await checked_form(request)
    try:
        cancelled = admin.cancel_run(run.id, actor=actor(request))
    except ProtegeError as error:
        return redirect(f"/runs/{run.id}", str(error), request, error=True)
    return redirect(f"/runs/{run.id}", cancelled.describe(), request)


async def run_release(request: Request) -> Response:
    """Queue a held run now, as ``protege runs release RUN`` does; recorded in the audit
    log."""
    run = found(Run, request.path_params["id"])
    await checked_form(request)
    try:
        released = admin.release_held(actor=actor(request), run_ids=[run.id])
    except ProtegeError as error:
        return redirect(f"/runs/{run.id}", str(error), request, error=True)
    return redirect(f"/runs/{run.id}", released.describe(), request)


async def runs_release(request: Request) -> Response:
    """Queue every held run (of the agent the form names), as ``protege runs release
    --all`` (``--agent``) does; recorded in the audit log."""
    chosen, agent = await _agent_of_form(request)
    try:
        released = admin.release_held(actor=actor(request), agent=agent, everything=agent is None)
    except ProtegeError as error:
        return redirect("/runs?status=held", str(error), request, error=True)
    return redirect(f"/runs?status=held&agent={chosen}", released.describe(), request)


async def runs_cancel_held(request: Request) -> Response:
    """Cancel every held run (of the agent the form names), as ``protege runs cancel
    --held`` (``--agent``) does: a flood's held mail, discarded unpaid; audited."""
    chosen, agent = await _agent_of_form(request)
    try:
        cancelled = admin.cancel_held(actor=actor(request), agent=agent)
    except ProtegeError as error:
        return redirect("/runs?status=held", str(error), request, error=True)
    return redirect(f"/runs?status=held&agent={chosen}", cancelled.describe(), request)


async def _agent_of_form(request: Request) -> tuple[str, Agent | None]:
    """The agent a checked form names by id (``agent``), or None when it names none; 404
    for an id no agent has."""
    form = await checked_form(request)
    chosen = str(form.get("agent", ""))
    number = _whole(chosen)
    agent = Agent.get_or_none(Agent.id == number) if number is not None else None
    if chosen and agent is None:
        raise HTTPException(404, "no such agent")
    return chosen, agent


async def blob_download(request: Request) -> Response:
    """A stored file, always as a download: never shown by the browser as a page."""
    blob = found(Blob, request.path_params["id"])
    try:
        data = blobs.read(blob, installation(request).data_dir)
    except OSError:
        raise HTTPException(404, "the file's bytes are not in the data directory") from None
    name = blobs.sanitize_filename(blob.filename)
    ascii_name = name.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    return Response(
        data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": (
                f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
            ),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )


async def responsibilities_page(request: Request) -> Response:
    """Every responsibility, with its schedule and last run, and the form to add one."""
    if request.method == "POST":
        return await _responsibility_add(request)
    return _responsibilities(request)


def _responsibilities(
    request: Request, error: str | None = None, typed: dict[str, str] | None = None
) -> Response:
    duties = list(
        Responsibility.select(Responsibility, Agent)
        .join(Agent)
        .order_by(Agent.name, Responsibility.name)
    )
    last = {}
    for duty in duties:
        last[duty.id] = (
            Run.select().where(Run.responsibility == duty).order_by(Run.id.desc()).first()
        )
    return render(
        request,
        "responsibilities.html",
        status_code=422 if error else 200,
        duties=duties,
        last=last,
        agents=list(Agent.active().order_by(Agent.name)),
        error=error,
        form=typed or {"timezone": "UTC"},
    )


async def _responsibility_add(request: Request) -> Response:
    """Give an agent a new responsibility, as ``protege responsibilities add`` does."""
    form = await checked_form(request)
    typed = {
        field: str(form.get(field, ""))
        for field in ("agent", "name", "prompt", "schedule", "timezone")
    }
    number = _whole(typed["agent"])
    agent = Agent.get_or_none(Agent.id == number) if number is not None else None
    try:
        if agent is None:
            raise ProtegeError("choose the agent whose responsibility it is")
        with admin.change(actor(request), "responsibility added") as change:
            duty = Responsibility.create(
                agent=agent,
                name=typed["name"],
                prompt=typed["prompt"],
                schedule=typed["schedule"].strip() or None,
                timezone=typed["timezone"].strip() or "UTC",
                enabled=form.get("enabled") == "on",
            )
            change.created(duty)
    except ProtegeError as error:
        return _responsibilities(request, str(error), typed)
    return redirect(
        "/responsibilities", f"added {agent.name}'s responsibility {duty.name}", request
    )


async def responsibility_form(request: Request) -> Response:
    """Edit a responsibility: its instructions, schedule and time zone."""
    duty = found(Responsibility, request.path_params["id"])
    if request.method == "GET":
        return _responsibility(request, duty)
    form = await checked_form(request)
    typed = {field: str(form.get(field, "")) for field in ("prompt", "schedule", "timezone")}
    try:
        with admin.change(actor(request), "responsibility edited", duty):
            duty.prompt = typed["prompt"]
            duty.schedule = typed["schedule"].strip() or None
            duty.timezone = typed["timezone"].strip() or "UTC"
            duty.save()
    except ProtegeError as error:
        fresh = Responsibility.get_by_id(duty.id)
        return _responsibility(request, fresh, str(error), typed)
    return redirect("/responsibilities", f"saved {duty.name}", request)


def _responsibility(
    request: Request,
    duty: Responsibility,
    error: str | None = None,
    typed: dict[str, str] | None = None,
) -> Response:
    shown = typed or {
        "prompt": duty.prompt,
        "schedule": duty.schedule or "",
        "timezone": duty.timezone,
    }
    return render(
        request,
        "responsibility.html",
        status_code=422 if error else 200,
        duty=duty,
        error=error,
        form=shown,
    )


async def responsibility_enable(request: Request) -> Response:
    """Switch a responsibility on or off."""
    duty = found(Responsibility, request.path_params["id"])
    form = await checked_form(request)
    on = form.get("enabled") == "on"
    with admin.change(actor(request), "enabled" if on else "disabled", duty):
        duty.enabled = on
        duty.save()
    return redirect("/responsibilities", f"{duty.name} {'enabled' if on else 'disabled'}", request)


async def responsibility_run(request: Request) -> Response:
    """Queue a run of the responsibility now, for the workers of ``protege serve``."""
    duty = found(Responsibility, request.path_params["id"])
    await checked_form(request)
    try:
        run = admin.queue_responsibility(duty)
    except ProtegeError as error:
        return redirect("/responsibilities", str(error), request, error=True)
    said = f"queued run {run.id}: `protege serve` carries it out"
    return redirect(f"/runs/{run.id}", said, request)


async def audit_page(request: Request) -> Response:
    """The audit log: who changed access, when, what changed, before and after."""
    entries = admin.audit_entries(200)
    return render(
        request,
        "audit.html",
        entries=entries,
        changes={e.id: _changes(e.before, e.after) for e in entries},
    )


def _changes(before: Any, after: Any) -> list[str]:
    """What differs between two snapshots, one line per key."""
    if before is None or after is None:
        return ["created" if before is None else "deleted"]
    shown = []
    for key in sorted({*before, *after}):
        old, new = before.get(key), after.get(key)
        if old != new:
            shown.append(
                f"{key}: {json.dumps(old, ensure_ascii=False)} → "
                f"{json.dumps(new, ensure_ascii=False)}"
            )
    return shown or ["no difference"]


ROUTES = [
    Route("/runs", runs_page),
    Route("/runs/{id:int}", run_page),
    Route("/runs/{id:int}/cancel", run_cancel, methods=["POST"]),
    Route("/runs/{id:int}/release", run_release, methods=["POST"]),
    Route("/runs/release", runs_release, methods=["POST"]),
    Route("/runs/cancel-held", runs_cancel_held, methods=["POST"]),
    Route("/messages/{id:int}", message_page),
    Route("/files/{id:int}", blob_download),
    Route("/responsibilities", responsibilities_page, methods=["GET", "POST"]),
    Route("/responsibilities/{id:int}/edit", responsibility_form, methods=["GET", "POST"]),
    Route("/responsibilities/{id:int}/enable", responsibility_enable, methods=["POST"]),
    Route("/responsibilities/{id:int}/run", responsibility_run, methods=["POST"]),
    Route("/audit", audit_page),
]
