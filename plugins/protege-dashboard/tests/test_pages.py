"""The pages do what the command line does, and show outside content as text."""

from __future__ import annotations

import html
import json
import re

from click.testing import CliRunner

from protege import blobs
from protege.cli import cli
from protege.models import (
    Agent,
    AgentToolkit,
    Event,
    Message,
    MessageAttachment,
    Responsibility,
    Run,
    Toolkit,
)


def _form(client, path, token_of, **fields):
    page = client.get(path)
    assert page.status_code == 200, page.text
    return client.post(path, data={"csrf_token": token_of(page.text), **fields})


def _post(client, page_path, action, token_of, **fields):
    page = client.get(page_path)
    return client.post(action, data={"csrf_token": token_of(page.text), **fields})


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_tools_page_lists_the_manifest_with_summaries(signed_in):
    page = signed_in.get("/tools").text
    assert "Process Refund" in page
    assert "Refunds an order." in page
    assert "scoop_tools_for_dashboard" in page


def test_the_tools_page_shows_the_server_and_hints_of_a_tool(signed_in):
    page = signed_in.get("/tools").text
    row = next(r for r in page.split("<tr>") if "<code>close_account</code>" in r)
    assert 'server <strong class="tool-server">crm</strong>' in row
    assert '<span class="tag hint-danger">destructive</span>' in row
    assert '<span class="tag hint-plain">writes</span>' in row
    refund = next(r for r in page.split("<tr>") if "<code>process_refund</code>" in r)
    assert "tool-server" not in refund
    assert "hint-" not in refund


def test_the_tools_page_lists_withheld_tools_with_why(installation, operator, sign_in):
    import attrs
    from starlette.testclient import TestClient

    from protege.registry.entries import Withheld
    from protege_dashboard.app import create_app
    from protege_dashboard.settings import DashboardSettings

    down = Withheld("crm_find_customer", "protege-mcp", "MCP server crm did not answer")
    withheld = attrs.evolve(
        installation, manifest=attrs.evolve(installation.manifest, withheld=(down,))
    )
    with TestClient(
        create_app(withheld, DashboardSettings(), {}), base_url="http://127.0.0.1"
    ) as client:
        sign_in(client)
        page = _text(client.get("/tools").text)
    assert "Withheld" in page
    assert "crm_find_customer protege-mcp MCP server crm did not answer" in " ".join(page.split())


def test_a_toolkit_is_made_by_ticking_tools(signed_in, token_of):
    answer = _form(
        signed_in,
        "/toolkits/new",
        token_of,
        name="Kitchen",
        description="Orders.",
        members=["lookup_order", "process_refund"],
    )
    assert answer.status_code == 200
    kitchen = Toolkit.named("Kitchen")
    assert kitchen.member_tool_ids == ["lookup_order", "process_refund"]
    assert "created toolkit Kitchen" in answer.text


def test_a_member_the_manifest_lacks_cannot_be_ticked_in(signed_in, token_of):
    answer = _form(signed_in, "/toolkits/new", token_of, name="Kitchen", members=["launch"])
    assert answer.status_code == 422
    assert "not in the manifest: launch" in answer.text
    assert Toolkit.get_or_none(Toolkit.name == "Kitchen") is None


def test_stale_members_are_shown_and_kept_unless_unticked(signed_in, token_of):
    old = Toolkit.create(name="Old", member_tool_ids=["lookup_order", "gone_tool"])
    page = signed_in.get(f"/toolkits/{old.id}/edit").text
    assert 'value="gone_tool"' in page
    assert "stale" in page
    _form(signed_in, f"/toolkits/{old.id}/edit", token_of, name="Old", members=["gone_tool"])
    assert Toolkit.named("Old").member_tool_ids == ["gone_tool"]
    _form(signed_in, f"/toolkits/{old.id}/edit", token_of, name="Old", members=[])
    assert Toolkit.named("Old").member_tool_ids == []


def test_all_tools_is_read_only_and_system_toolkits_stay(signed_in, token_of):
    everything = Toolkit.create(name="All Tools", system_key="all_tools", member_tool_ids=[])
    page = signed_in.get(f"/toolkits/{everything.id}/edit").text
    assert 'name="members"' not in page
    edit = _post(
        signed_in,
        "/toolkits",
        f"/toolkits/{everything.id}/edit",
        token_of,
        name="All Tools",
        members=["process_refund"],
    )
    assert edit.status_code == 403
    deleted = _post(signed_in, "/toolkits", f"/toolkits/{everything.id}/delete", token_of)
    assert "system toolkit and cannot be deleted" in deleted.text
    assert Toolkit.all_tools() is not None


def test_an_agent_is_created_and_a_toolkit_attached_and_detached(signed_in, token_of):
    kitchen = Toolkit.create(name="Kitchen", member_tool_ids=["lookup_order"])
    made = _form(signed_in, "/agents", token_of, name="Scout", address="scout@thescoop.example")
    scout = Agent.named("Scout")
    assert made.url.path == f"/agents/{scout.id}"
    _post(
        signed_in,
        f"/agents/{scout.id}",
        f"/agents/{scout.id}/attach",
        token_of,
        toolkit=kitchen.id,
        allow_proactive="on",
    )
    grant = scout.grant_of(kitchen)
    assert grant.allow_proactive is True
    page = signed_in.get(f"/agents/{scout.id}").text
    assert "Configure Access Settings" in page
    _post(
        signed_in, f"/agents/{scout.id}", f"/agents/{scout.id}/grants/{grant.id}/detach", token_of
    )
    assert AgentToolkit.select().where(AgentToolkit.agent == scout).count() == 0


def test_a_bad_address_for_a_new_agent_is_said_and_kept_in_the_form(signed_in, token_of):
    answer = _form(signed_in, "/agents", token_of, name="Scout", address="not an address")
    assert answer.status_code == 422
    assert 'value="Scout"' in answer.text
    assert Agent.get_or_none(Agent.name == "Scout") is None


def test_gate_rules_are_checked_as_the_command_line_checks_them(signed_in, scoop, token_of):
    grant = scoop.grant_of(Toolkit.named("Finance"))
    here = f"/agents/{scoop.id}/grants/{grant.id}"
    bad = _post(signed_in, here, f"{here}/rules", token_of, kind="allow", pattern="a*b*@x.com")
    cli_says = CliRunner().invoke(cli, ["rules", "add", "Sundae", "Finance", "allow", "a*b*@x.com"])
    reason = cli_says.output.strip().removeprefix("Error: ")
    assert reason
    assert html.escape(reason, quote=True) in bad.text or reason in _text(bad.text)
    _post(signed_in, here, f"{here}/rules", token_of, kind="deny", pattern="Boss+x@TheScoop.com")
    assert [str(r) for r in sorted(grant.rules, key=lambda r: r.id)] == [
        "allow *@thescoop.com",
        "deny boss@thescoop.com",
    ]
    rule = max(grant.rules, key=lambda r: r.id)
    _post(signed_in, here, f"{here}/rules/{rule.id}/remove", token_of)
    assert [str(r) for r in grant.rules] == ["allow *@thescoop.com"]
    _post(signed_in, here, f"{here}/scheduled", token_of, allow_proactive="on")
    assert AgentToolkit.get_by_id(grant.id).allow_proactive is True
    _post(signed_in, here, f"{here}/scheduled", token_of)
    assert AgentToolkit.get_by_id(grant.id).allow_proactive is False


def test_a_grants_page_shows_and_sets_which_mail_its_tools_reach(signed_in, scoop, token_of):
    grant = scoop.grant_of(Toolkit.named("Finance"))
    here = f"/agents/{scoop.id}/grants/{grant.id}"
    assert "reach only the mail the run's sender took part in" in _text(signed_in.get(here).text)
    page = _post(signed_in, here, f"{here}/archive", token_of, whole_archive="on")
    assert AgentToolkit.get_by_id(grant.id).whole_archive is True
    assert "reach all of Sundae's mail" in _text(page.text)
    assert "archive-open-to-strangers" not in page.text  # Finance admits only the shop
    open_gate = scoop.grant(Toolkit.create(name="Lookups", member_tool_ids=["search_emails"]))
    there = f"/agents/{scoop.id}/grants/{open_gate.id}"
    opened = _post(signed_in, there, f"{there}/archive", token_of, whole_archive="on")
    assert "anyone who writes can have the agent search all of its mail" in _text(opened.text)
    _post(signed_in, here, f"{here}/archive", token_of)
    assert AgentToolkit.get_by_id(grant.id).whole_archive is False


def test_access_rules_are_added_and_removed(signed_in, scoop, token_of):
    here = f"/agents/{scoop.id}"
    _post(signed_in, here, f"{here}/access-rules", token_of, kind="deny", pattern="*@spam.example")
    rule = scoop.access_rules.get()
    assert str(rule) == "deny *@spam.example"
    _post(signed_in, here, f"{here}/access-rules/{rule.id}/remove", token_of)
    assert scoop.access_rules.count() == 0


def test_the_explain_form_answers_exactly_as_the_command_line(signed_in, scoop, token_of):
    scoop.add_access_rule("deny", "*@spam.example")
    here = f"/agents/{scoop.id}"
    for sender in ("mara@thescoop.com", "kid@gmail.example", "x@spam.example"):
        answer = _post(signed_in, here, f"{here}/explain", token_of, sender=sender)
        shown = re.search(r'<pre class="text" id="explanation">(.*?)</pre>', answer.text, re.S)
        cli_says = CliRunner().invoke(cli, ["access", "explain", "Sundae", "--sender", sender])
        assert cli_says.exit_code == 0, cli_says.output
        assert html.unescape(shown.group(1)) == cli_says.output
    scheduled = _post(signed_in, here, f"{here}/explain", token_of, scheduled="on")
    cli_says = CliRunner().invoke(cli, ["access", "explain", "Sundae", "--scheduled"])
    assert cli_says.output in html.unescape(scheduled.text)
    forged = _post(
        signed_in,
        here,
        f"{here}/explain",
        token_of,
        sender="mara@thescoop.com",
        unauthenticated="on",
    )
    shown = re.search(r'<pre class="text" id="explanation">(.*?)</pre>', forged.text, re.S)
    cli_says = CliRunner().invoke(
        cli, ["access", "explain", "Sundae", "--sender", "mara@thescoop.com", "--unauthenticated"]
    )
    assert html.unescape(shown.group(1)) == cli_says.output
    assert "does NOT prove its sender" in cli_says.output


def _inbound(agent, body, subject="Hello", sender="kid@gmail.example"):
    message = Message.create(
        agent=agent,
        direction="inbound",
        sender=sender,
        to_addresses=[agent.address],
        subject=subject,
        body_text=body,
        message_id="<1@gmail.example>",
        thread_key="<1@gmail.example>",
    )
    run = Run.create(agent=agent, kind="reply", message=message, correlation_id="c1")
    return message, run


def test_outside_content_is_shown_as_text_never_as_html(signed_in, scoop):
    _, run = _inbound(
        scoop,
        '<script>alert(1)</script><img src=x onerror="alert(2)">',
        subject="<b>bold</b>",
        sender='"<i>x</i>" <kid@gmail.example>',
    )
    page = signed_in.get(f"/runs/{run.id}").text
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page
    assert "<b>bold</b>" not in page
    assert "<i>x</i>" not in page


def test_a_run_page_shows_its_events_with_tokens_arguments_and_refusals(signed_in, scoop):
    _, run = _inbound(scoop, "Refund please")
    events = [
        ("model_request", {"turn": 1, "messages": 2, "tools": ["lookup_order"]}),
        (
            "model_response",
            {
                "turn": 1,
                "tool_calls": [{"function": {"name": "process_refund"}}],
                "usage": {"total_tokens": 321},
                "latency_ms": 45,
            },
        ),
        ("tool_call", {"call_id": "a", "tool": "process_refund", "arguments": '{"order": 7}'}),
        ("tool_refused", {"call_id": "a", "tool": "process_refund", "reason": "not granted"}),
        ("budget_exhausted", {"budget": "max_model_turns", "limit": 20}),
        ("delivery", {"status": "sent", "to": ["kid@gmail.example"], "subject": "Re: Hello"}),
    ]
    for seq, (kind, payload) in enumerate(events, start=1):
        Event.create(run=run, seq=seq, kind=kind, payload_json=json.dumps(payload))
    text = _text(signed_in.get(f"/runs/{run.id}").text)
    assert "321 tokens, 45 ms" in text
    assert '"order": 7' in text
    assert "REFUSED process_refund: not granted" in text
    assert "budget exhausted: max_model_turns (20)" in text
    assert "delivery sent to kid@gmail.example" in text
    assert "Refund please" in text


def test_runs_are_filtered_by_agent_status_and_kind(signed_in, scoop):
    _, run = _inbound(scoop, "Hi")
    other = Agent.create(name="Scout", address="scout@thescoop.example")
    duty = Responsibility.create(agent=other, name="Stock", prompt="Count.")
    Run.create(agent=other, kind="scheduled", responsibility=duty, correlation_id="c2")
    assert "Stock" in signed_in.get("/runs").text
    only_sundae = signed_in.get(f"/runs?agent={scoop.id}").text
    assert f'id="run-{run.id}"' in only_sundae
    assert "Stock" not in only_sundae
    assert "Stock" in signed_in.get("/runs?kind=scheduled").text
    assert "Stock" not in signed_in.get("/runs?kind=reply").text
    assert "No runs." in signed_in.get("/runs?status=failed").text


def test_attachments_download_and_are_never_sniffed(signed_in, scoop, installation):
    message, run = _inbound(scoop, "See attached")
    blob = blobs.store(
        b"<html><script>alert(1)</script></html>",
        filename='evil".html',
        content_type="text/html",
        data_dir=installation.data_dir,
    )
    MessageAttachment.create(message=message, blob=blob, position=0)
    assert f"/files/{blob.id}" in signed_in.get(f"/runs/{run.id}").text
    answer = signed_in.get(f"/files/{blob.id}")
    assert answer.content == b"<html><script>alert(1)</script></html>"
    assert answer.headers["content-disposition"].startswith("attachment;")
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-type"] == "application/octet-stream"
    assert signed_in.get("/files/999").status_code == 404


def test_responsibilities_are_edited_switched_and_run_now(signed_in, scoop, token_of):
    duty = Responsibility.create(agent=scoop, name="Stock report", prompt="Count the tubs.")
    here = f"/responsibilities/{duty.id}/edit"
    bad = _form(signed_in, here, token_of, prompt="Count.", schedule="every day", timezone="UTC")
    assert bad.status_code == 422
    _form(
        signed_in,
        here,
        token_of,
        prompt="Count all tubs.",
        schedule="0 7 * * 1",
        timezone="Europe/Berlin",
    )
    saved = Responsibility.get_by_id(duty.id)
    assert (saved.prompt, saved.schedule, saved.timezone) == (
        "Count all tubs.",
        "0 7 * * 1",
        "Europe/Berlin",
    )
    _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/enable", token_of)
    assert Responsibility.get_by_id(duty.id).enabled is False
    _post(
        signed_in,
        "/responsibilities",
        f"/responsibilities/{duty.id}/enable",
        token_of,
        enabled="on",
    )
    assert Responsibility.get_by_id(duty.id).enabled is True
    ran = _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/run", token_of)
    queued = Run.get(Run.responsibility == duty)
    assert queued.status == "queued"
    assert ran.url.path == f"/runs/{queued.id}"
    again = _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/run", token_of)
    assert f"has run {queued.id} queued already" in again.text
    assert Run.select().where(Run.responsibility == duty).count() == 1


def test_runs_come_fifty_a_page_with_a_link_to_older_ones(signed_in, scoop):
    message, first = _inbound(scoop, "Hi")
    for number in range(2, 56):
        Run.create(agent=scoop, kind="reply", message=message, correlation_id=f"c{number}")
    page = signed_in.get("/runs").text
    assert page.count('id="run-') == 50
    older = re.search(r'href="([^"]*before=\d+)" id="older"', page).group(1)
    rest = signed_in.get(html.unescape(older)).text
    assert rest.count('id="run-') == 5
    assert f'id="run-{first.id}"' in rest
    assert 'id="older"' not in rest


def test_the_home_page_says_the_model_endpoint_is_failing_and_since_when(signed_in, installation):
    from protege.limits.circuit import Breaker
    from protege.models.base import utcnow

    assert "model endpoint" not in signed_in.get("/").text  # healthy: nothing said
    since = utcnow().replace(microsecond=0)
    breaker = Breaker.of(installation.config, clock=lambda: since)
    for _ in range(installation.config.limits.circuit_failures):
        breaker.failed("the model endpoint answered 500: <b>down</b>")
    page = signed_in.get("/")
    assert page.status_code == 200
    shown = re.search(r'<p class="error" id="model-endpoint">(.*?)</p>', page.text)
    assert shown is not None
    assert _text(shown.group(1)).startswith(
        f"model endpoint failing since {since.isoformat(sep=' ')}Z, circuit open until "
    )
    assert "&lt;b&gt;down&lt;/b&gt;" in shown.group(1)  # the endpoint's words, as text


def test_the_home_page_shows_the_endpoint_s_control_characters_as_escapes(signed_in, installation):
    from protege.limits.circuit import Breaker

    breaker = Breaker.of(installation.config)
    for _ in range(installation.config.limits.circuit_failures):
        breaker.failed("answered 500: \x1b[2Jgone\u202eevil")
    page = signed_in.get("/")
    shown = re.search(r'<p class="error" id="model-endpoint">(.*?)</p>', page.text)
    assert shown is not None
    assert "\x1b" not in shown.group(1)
    assert "\u202e" not in shown.group(1)
    assert "answered 500: \\x1b[2Jgone\\u202eevil" in shown.group(1)


def test_an_operator_closes_the_circuit_from_the_home_page_and_it_is_audited(
    signed_in, installation, token_of
):
    from protege.limits.circuit import Breaker
    from protege.models import AuditEntry
    from protege.models.limits import Circuit

    breaker = Breaker.of(installation.config)
    for _ in range(installation.config.limits.circuit_failures):
        breaker.failed("the model endpoint answered 429", retry_after=86_400)
    page = signed_in.get("/").text
    assert 'id="reset-circuit-button"' in page
    for data in ({}, {"csrf_token": "x"}):  # refused without the token: still open
        assert signed_in.post("/circuit/reset", data=data).status_code == 403
    assert Circuit.get(Circuit.endpoint == breaker.endpoint).state == "open"
    assert AuditEntry.select().count() == 0

    answer = signed_in.post("/circuit/reset", data={"csrf_token": token_of(page)})

    assert answer.status_code == 200
    assert f"circuit closed, runs are taken again: {breaker.endpoint}" in answer.text
    assert breaker.refresh().healthy
    assert 'id="model-endpoint"' not in answer.text
    (entry,) = AuditEntry.select()
    assert (entry.actor, entry.action, entry.subject) == (
        "operator:mara",
        "model circuit reset",
        breaker.endpoint,
    )
    assert entry.before["state"] == "open"


def test_a_stranger_cannot_close_the_circuit(client, installation):
    from protege.limits.circuit import Breaker

    breaker = Breaker.of(installation.config)
    for _ in range(installation.config.limits.circuit_failures):
        breaker.failed("down")
    answer = client.post("/circuit/reset", data={}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/login")
    assert breaker.refresh().state == "open"
