"""Approval: the policy on a grant (part of its Configure Access Settings page), and the
tool calls waiting for a yes, with buttons to approve or deny them."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protege import ProtegeError, admin
from protege.models import Agent, AgentToolkit, Approval, Run
from protege_dashboard.access_pages import grant_view
from protege_dashboard.security import checked_form
from protege_dashboard.web import actor, found, redirect, render

PENDING = "pending"


async def approvals_page(request: Request) -> Response:
    """The calls waiting for approval, oldest first; with ``?all=1`` the answered too."""
    everything = request.query_params.get("all") == "1"
    query = Approval.select(Approval, Run, Agent).join(Run).join(Agent).order_by(Approval.id)
    if not everything:
        query = query.where(Approval.status == PENDING)
    return render(request, "approvals.html", approvals=list(query), everything=everything)


async def approval_answer(request: Request) -> Response:
    """Approve or deny one waiting call, as the signed-in operator."""
    approval = found(Approval, request.path_params["id"])
    form = await checked_form(request)
    decision = {"approve": "approved", "deny": "denied"}.get(str(form.get("decision", "")))
    back = str(form.get("back", "")) or "/approvals"
    back = back if back.startswith("/") and not back.startswith("//") else "/approvals"
    if decision is None:
        return redirect(back, "say approve or deny", request, error=True)
    reason = " ".join(str(form.get("reason", "")).split())[:500] or None
    try:
        answered = admin.answer_approval(approval.id, decision, actor=actor(request), reason=reason)
    except ProtegeError as error:
        return redirect(back, str(error), request, error=True)
    return redirect(back, answered.describe(), request)


async def grant_approval(request: Request) -> Response:
    """Set or clear the approval a grant's tools need."""
    grant = found(AgentToolkit, request.path_params["grant"])
    if grant.agent_id != int(request.path_params["id"]):
        raise HTTPException(404, "no such record")
    here = f"/agents/{grant.agent_id}/grants/{grant.id}"
    form = await checked_form(request)
    try:
        if form.get("action") == "clear":
            admin.clear_grant_approval(grant, actor=actor(request))
            return redirect(here, "tools run without approval", request)
        hours = str(form.get("timeout_hours", "")).strip()
        if not hours.isdigit() or int(hours) < 1:
            raise ProtegeError("the timeout is a whole number of hours, at least 1")
        policy = admin.require_grant_approval(
            grant,
            actor=actor(request),
            approvers=_words(form.get("approvers")),
            notify=_words(form.get("notify")),
            timeout=int(hours) * 3600,
            self_approval=form.get("self_approval") == "on",
        )
    except ProtegeError as error:  # said as an error, the form holding what was typed
        typed = {
            "approvers": str(form.get("approvers", "")),
            "notify": str(form.get("notify", "")),
            "timeout_hours": str(form.get("timeout_hours", "")),
            "self_approval": form.get("self_approval") == "on",
        }
        return grant_view(request, grant, error=str(error), typed={"approval": typed})
    return redirect(here, f"tools wait for approval by {', '.join(policy.approvers)}", request)


def _words(value: object) -> list[str]:
    return str(value or "").replace(",", " ").split()


ROUTES = [
    Route("/approvals", approvals_page),
    Route("/approvals/{id:int}/answer", approval_answer, methods=["POST"]),
    Route("/agents/{id:int}/grants/{grant:int}/approval", grant_approval, methods=["POST"]),
]
