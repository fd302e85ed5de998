"""Pages for who may use what: tools, toolkits, agents, their grants and access rules."""

from __future__ import annotations

import datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protege import ProtegeError, admin
from protege.models import Agent, AgentAccessRule, AgentToolkit, AgentToolkitRule, Run, Toolkit
from protege_dashboard.security import checked_form
from protege_dashboard.web import actor, found, installation, redirect, render

ALL_TOOLS = "all_tools"


async def tools_page(request: Request) -> Response:
    """The live manifest, the shadowed tools and every problem ``doctor`` would report."""
    manifest = installation(request).manifest
    return render(
        request,
        "tools.html",
        tools=manifest.tools,
        shadowed=manifest.shadowed,
        withheld=manifest.withheld,
        problems=manifest.problems(),
        hints=tool_hints,
    )


# How each of a tool's annotations reads on the page, when True and when False; ``kind``
# colours it (a destructive tool stands out).
_HINTS = {
    "read_only": (("read-only", "safe"), ("writes", "plain")),
    "destructive": (("destructive", "danger"), ("not destructive", "plain")),
    "idempotent": (("idempotent", "plain"), None),
    "open_world": (("open world", "plain"), ("closed world", "plain")),
}


def tool_hints(entry: Any) -> list[dict[str, str]]:
    """What a tool's annotations say, as badges: text and kind."""
    hints = []
    for key, (if_true, if_false) in _HINTS.items():
        if key not in entry.annotations:
            continue
        chosen = if_true if entry.annotations[key] else if_false
        if chosen is not None:
            hints.append({"text": chosen[0], "kind": chosen[1]})
    return hints


async def toolkits_page(request: Request) -> Response:
    """Every toolkit, its members and the agents holding it."""
    holders: dict[int, list[str]] = {}
    for grant in AgentToolkit.select(AgentToolkit, Agent).join(Agent).order_by(Agent.name):
        holders.setdefault(grant.toolkit_id, []).append(grant.agent.name)
    kits = list(Toolkit.select().order_by(Toolkit.name))
    return render(request, "toolkits.html", toolkits=kits, holders=holders)


def _member_rows(request: Request, toolkit: Toolkit | None, ticked: set[str]) -> list[dict]:
    manifest = installation(request).manifest
    rows = [
        {
            "id": entry.id,
            "display_name": entry.display_name,
            "summary": entry.summary,
            "source": entry.describe_source(),
            "ticked": entry.id in ticked,
            "stale": False,
        }
        for entry in manifest.tools
    ]
    stale = sorted(i for i in (toolkit.member_tool_ids if toolkit else []) if i not in manifest)
    rows += [
        {
            "id": i,
            "display_name": i,
            "summary": "no longer in the manifest: skipped until it returns",
            "source": "",
            "ticked": i in ticked,
            "stale": True,
        }
        for i in stale
    ]
    return rows


async def toolkit_form(request: Request) -> Response:
    """New (no id) or Edit: name, description and the member checklist."""
    toolkit = found(Toolkit, request.path_params["id"]) if "id" in request.path_params else None
    if request.method == "GET":
        ticked = set(toolkit.member_tool_ids) if toolkit else set()
        return _toolkit_page(request, toolkit, ticked)
    form = await checked_form(request)
    if toolkit is not None and toolkit.system_key == ALL_TOOLS:
        raise HTTPException(403, "All Tools is rewritten by `protege sync`: it is not edited")
    name = str(form.get("name", ""))
    description = str(form.get("description", ""))
    ticked = {str(v) for v in form.getlist("members")}
    manifest = installation(request).manifest
    known = set(toolkit.member_tool_ids) if toolkit else set()
    unknown = sorted(i for i in ticked if i not in manifest and i not in known)
    if unknown:
        error = f"not in the manifest: {', '.join(unknown)}"
        return _toolkit_page(request, toolkit, ticked, name, description, error)
    try:
        if toolkit is None:
            with admin.change(actor(request), "toolkit created") as change:
                toolkit = Toolkit.create(
                    name=name, description=description, member_tool_ids=sorted(ticked)
                )
                change.created(toolkit)
            message = f"created toolkit {toolkit.name}"
        else:
            with admin.change(actor(request), "toolkit edited", toolkit):
                if toolkit.system_key is None:
                    toolkit.name = name
                toolkit.description = description
                toolkit.member_tool_ids = sorted(ticked)
                toolkit.save()
            message = f"saved toolkit {toolkit.name}"
    except ProtegeError as error:
        return _toolkit_page(request, toolkit, ticked, name, description, str(error))
    return redirect("/toolkits", message, request)


def _toolkit_page(
    request: Request,
    toolkit: Toolkit | None,
    ticked: set[str],
    name: str | None = None,
    description: str | None = None,
    error: str | None = None,
) -> Response:
    return render(
        request,
        "toolkit_form.html",
        status_code=422 if error else 200,
        toolkit=toolkit,
        name=name if name is not None else (toolkit.name if toolkit else ""),
        description=description
        if description is not None
        else (toolkit.description if toolkit else ""),
        rows=_member_rows(request, toolkit, ticked),
        read_only=toolkit is not None and toolkit.system_key == ALL_TOOLS,
        error=error,
    )


async def toolkit_delete(request: Request) -> Response:
    """Delete a toolkit (never a system one); it is detached from every agent."""
    toolkit = found(Toolkit, request.path_params["id"])
    await checked_form(request)
    try:
        with admin.change(actor(request), "toolkit deleted", toolkit):
            toolkit.delete_instance(recursive=True)
    except ProtegeError as error:
        return redirect("/toolkits", str(error), request, error=True)
    return redirect("/toolkits", f"deleted toolkit {toolkit.name}", request)


async def agents_page(request: Request) -> Response:
    """Every agent, and the form to create one."""
    if request.method == "POST":
        form = await checked_form(request)
        try:
            with admin.change(actor(request), "agent created") as change:
                agent = Agent.create(
                    name=str(form.get("name", "")),
                    address=str(form.get("address", "")),
                    instructions=str(form.get("instructions", "")),
                )
                change.created(agent)
        except ProtegeError as error:
            return _agents(request, str(error), form)
        return redirect(f"/agents/{agent.id}", f"created agent {agent.name}", request)
    return _agents(request)


def _agents(request: Request, error: str | None = None, form: Any = None) -> Response:
    # The home page says so when the model endpoint is failing (runs wait meanwhile).
    endpoint = admin.model_endpoint(datetime.datetime.now(datetime.UTC))
    held: dict[int, list[str]] = {}
    for grant in AgentToolkit.select(AgentToolkit, Toolkit).join(Toolkit).order_by(Toolkit.name):
        held.setdefault(grant.agent_id, []).append(grant.toolkit.name)
    agents = list(Agent.active().order_by(Agent.name))
    waiting = {  # one count per agent: agents are few, held runs may be many
        agent.id: Run.select().where((Run.agent == agent.id) & (Run.status == "held")).count()
        for agent in agents
    }
    return render(
        request,
        "agents.html",
        status_code=422 if error else 200,
        agents=agents,
        archived=list(Agent.select().where(Agent.archived_at.is_null(False)).order_by(Agent.name)),
        held=held,
        endpoint=None if endpoint is None else admin.model_endpoint_line(endpoint),
        held_runs=waiting,
        error=error,
        form=form or {},
    )


async def circuit_reset(request: Request) -> Response:
    """Close the model endpoint's circuit, as ``protege status --reset-circuit`` does:
    workers take runs again at once; recorded in the audit log."""
    await checked_form(request)
    closed = admin.reset_circuit(actor=actor(request))
    return redirect("/", closed.describe(), request)


async def agent_page(request: Request) -> Response:
    """An agent: its Agent Toolkits, access rules, catalogue and the explain form."""
    agent = found(Agent, request.path_params["id"])
    return _agent(request, agent)


def _agent(
    request: Request,
    agent: Agent,
    explanation: admin.Explanation | None = None,
    error: str | None = None,
    asked: str = "",
    typed: dict[str, Any] | None = None,
) -> Response:
    manifest = installation(request).manifest
    catalogue = agent.available_tools(manifest)
    grants = sorted(agent.grants, key=lambda g: g.toolkit.name)
    attached = {g.toolkit_id for g in grants}
    typed = typed or {}
    return render(
        request,
        "agent.html",
        status_code=422 if error else 200,
        agent=agent,
        edit={
            field: typed.get(field, getattr(agent, field))
            for field in ("name", "address", "instructions")
        },
        rule_typed={"kind": typed.get("rule_kind", ""), "pattern": typed.get("rule_pattern", "")},
        grants=grants,
        access_rules=sorted(agent.access_rules, key=lambda r: r.id),
        attachable=[t for t in Toolkit.select().order_by(Toolkit.name) if t.id not in attached],
        catalogue=catalogue,
        required={entry.id: None for entry in catalogue if entry.requires_approval}
        | agent.approvals_required(),
        withheld=admin.unapprovable(agent, manifest),
        skipped=admin.bypassed_approvals(agent, manifest),
        explanation=explanation,
        error=error,
        asked=asked,
    )


async def agent_edit(request: Request) -> Response:
    """Change the agent's name, address and instructions, as ``protege agents edit`` does."""
    agent = found(Agent, request.path_params["id"])
    form = await checked_form(request)
    typed = {field: str(form.get(field, "")) for field in ("name", "address", "instructions")}
    try:
        with admin.change(actor(request), "agent edited", agent):
            changed = agent.edit(**typed)
    except ProtegeError as error:
        return _agent(request, agent, error=str(error), typed=typed)
    said = f"saved agent {agent.name}" if changed else f"nothing changed on {agent.name}"
    return redirect(f"/agents/{agent.id}", said, request)


async def agent_archive(request: Request) -> Response:
    """Archive the agent (kept with its mail and runs, hidden, sent nothing) or restore it,
    as ``protege agents delete --archive`` and ``protege agents restore`` do."""
    agent = found(Agent, request.path_params["id"])
    form = await checked_form(request)
    restoring = form.get("action") == "restore"
    try:
        with admin.change(
            actor(request), "agent restored" if restoring else "agent archived", agent
        ):
            agent.restore() if restoring else agent.archive()
    except ProtegeError as error:
        return redirect(f"/agents/{agent.id}", str(error), request, error=True)
    said = "restored" if restoring else "archived: mail to it is refused until it is restored"
    return redirect(f"/agents/{agent.id}", f"{agent.name} {said}", request)


async def agent_attach(request: Request) -> Response:
    """Attach a toolkit to the agent, its gate open."""
    agent = found(Agent, request.path_params["id"])
    form = await checked_form(request)
    toolkit = found(Toolkit, form.get("toolkit"))
    try:
        admin.attach_toolkit(
            agent,
            toolkit,
            actor=actor(request),
            allow_proactive=form.get("allow_proactive") == "on",
        )
    except ProtegeError as error:
        return redirect(f"/agents/{agent.id}", str(error), request, error=True)
    return redirect(f"/agents/{agent.id}", f"attached {toolkit.name}", request)


def _grant(request: Request) -> AgentToolkit:
    grant = found(AgentToolkit, request.path_params["grant"])
    if grant.agent_id != int(request.path_params["id"]):
        raise HTTPException(404, "no such record")
    return grant


async def grant_detach(request: Request) -> Response:
    """Take a toolkit away from the agent, with its gate rules."""
    grant = _grant(request)
    await checked_form(request)
    name, agent_id = grant.toolkit.name, grant.agent_id
    admin.detach_toolkit(grant, actor=actor(request))
    return redirect(f"/agents/{agent_id}", f"detached {name}", request)


async def access_rule_add(request: Request) -> Response:
    """Add an allow or deny pattern to who may reach the agent at all."""
    agent = found(Agent, request.path_params["id"])
    form = await checked_form(request)
    kind, pattern = str(form.get("kind", "")), str(form.get("pattern", ""))
    try:
        rule = admin.add_access_rule(agent, kind, pattern, actor=actor(request))
    except ProtegeError as error:
        typed = {"rule_kind": kind, "rule_pattern": pattern}
        return _agent(request, agent, error=str(error), typed=typed)
    return redirect(f"/agents/{agent.id}", f"added access rule {rule}", request)


async def access_rule_remove(request: Request) -> Response:
    """Remove one of the agent's access rules."""
    agent = found(Agent, request.path_params["id"])
    await checked_form(request)
    rule = found(AgentAccessRule, request.path_params["rule"])
    if rule.agent_id != agent.id:
        raise HTTPException(404, "no such record")
    try:  # removed meanwhile, by another operator
        admin.remove_access_rule(agent, rule.kind, rule.pattern, actor=actor(request))
    except ProtegeError as error:
        return redirect(f"/agents/{agent.id}", str(error), request, error=True)
    return redirect(f"/agents/{agent.id}", f"removed access rule {rule}", request)


async def explain(request: Request) -> Response:
    """What a sender (or a scheduled run) would get: ``protege access explain``'s answer."""
    agent = found(Agent, request.path_params["id"])
    form = await checked_form(request)
    sender = str(form.get("sender", "")).strip()
    scheduled = form.get("scheduled") == "on"
    if not scheduled and not sender:
        return _agent(request, agent, error="give a sender's address, or tick scheduled run")
    answer = admin.explain(
        agent,
        installation(request).manifest,
        sender=None if scheduled else sender,
        scheduled=scheduled,
        authenticated=form.get("unauthenticated") != "on",
    )
    return _agent(request, agent, explanation=answer, asked=sender)


async def grant_page(request: Request) -> Response:
    """Configure Access Settings of one attachment: its gate rules, scheduled runs."""
    return grant_view(request, _grant(request))


def grant_view(
    request: Request,
    grant: AgentToolkit,
    error: str | None = None,
    typed: dict[str, Any] | None = None,
) -> Response:
    """The grant's page; with ``error``, said as one, and the gate rule form holding what
    was ``typed``."""
    skipped = [
        bypass
        for bypass in admin.bypassed_approvals(grant.agent, installation(request).manifest)
        if grant.toolkit.name in (bypass.guarded_by, bypass.given_by)
    ]
    return render(
        request,
        "grant.html",
        status_code=422 if error else 200,
        grant=grant,
        agent=grant.agent,
        toolkit=grant.toolkit,
        rules=sorted(grant.rules, key=lambda r: r.id),
        skipped=skipped,
        error=error,
        typed={"kind": "", "pattern": "", **(typed or {})},
    )


async def grant_rule_add(request: Request) -> Response:
    """Add an allow or deny pattern to the attachment's sender gate."""
    grant = _grant(request)
    form = await checked_form(request)
    here = f"/agents/{grant.agent_id}/grants/{grant.id}"
    kind, pattern = str(form.get("kind", "")), str(form.get("pattern", ""))
    try:
        rule = admin.add_gate_rule(grant, kind, pattern, actor=actor(request))
    except ProtegeError as error:
        return grant_view(request, grant, str(error), {"kind": kind, "pattern": pattern})
    return redirect(here, f"added rule {rule}", request)


async def grant_rule_remove(request: Request) -> Response:
    """Remove a rule from the attachment's sender gate."""
    grant = _grant(request)
    await checked_form(request)
    rule = found(AgentToolkitRule, request.path_params["rule"])
    if rule.grant_id != grant.id:
        raise HTTPException(404, "no such record")
    here = f"/agents/{grant.agent_id}/grants/{grant.id}"
    try:  # removed meanwhile, by another operator
        admin.remove_gate_rule(grant, rule.kind, rule.pattern, actor=actor(request))
    except ProtegeError as error:
        return redirect(here, str(error), request, error=True)
    return redirect(here, f"removed {rule}", request)


async def grant_scheduled(request: Request) -> Response:
    """Set whether the toolkit is offered on the agent's scheduled runs."""
    grant = _grant(request)
    form = await checked_form(request)
    allow = form.get("allow_proactive") == "on"
    admin.set_scheduled_runs(grant, allow, actor=actor(request))
    said = "offered" if allow else "not offered"
    return redirect(
        f"/agents/{grant.agent_id}/grants/{grant.id}", f"tools {said} on scheduled runs", request
    )


async def grant_archive(request: Request) -> Response:
    """Set whether the toolkit's mail tools reach the agent's whole archive, or only the
    mail the run's sender took part in."""
    grant = _grant(request)
    form = await checked_form(request)
    whole = form.get("whole_archive") == "on"
    admin.set_whole_archive(grant, whole, actor=actor(request))
    said = "all of the agent's mail" if whole else "only the mail the sender took part in"
    return redirect(
        f"/agents/{grant.agent_id}/grants/{grant.id}", f"mail tools reach {said}", request
    )


ROUTES = [
    Route("/tools", tools_page),
    Route("/toolkits", toolkits_page),
    Route("/toolkits/new", toolkit_form, methods=["GET", "POST"]),
    Route("/toolkits/{id:int}/edit", toolkit_form, methods=["GET", "POST"]),
    Route("/toolkits/{id:int}/delete", toolkit_delete, methods=["POST"]),
    Route("/agents", agents_page, methods=["GET", "POST"]),
    Route("/circuit/reset", circuit_reset, methods=["POST"]),
    Route("/agents/{id:int}", agent_page),
    Route("/agents/{id:int}/edit", agent_edit, methods=["POST"]),
    Route("/agents/{id:int}/archive", agent_archive, methods=["POST"]),
    Route("/agents/{id:int}/attach", agent_attach, methods=["POST"]),
    Route("/agents/{id:int}/explain", explain, methods=["POST"]),
    Route("/agents/{id:int}/access-rules", access_rule_add, methods=["POST"]),
    Route("/agents/{id:int}/access-rules/{rule:int}/remove", access_rule_remove, methods=["POST"]),
    Route("/agents/{id:int}/grants/{grant:int}", grant_page),
    Route("/agents/{id:int}/grants/{grant:int}/detach", grant_detach, methods=["POST"]),
    Route("/agents/{id:int}/grants/{grant:int}/rules", grant_rule_add, methods=["POST"]),
    Route(
        "/agents/{id:int}/grants/{grant:int}/rules/{rule:int}/remove",
        grant_rule_remove,
        methods=["POST"],
    ),
    Route("/agents/{id:int}/grants/{grant:int}/scheduled", grant_scheduled, methods=["POST"]),
    Route("/agents/{id:int}/grants/{grant:int}/archive", grant_archive, methods=["POST"]),
]
