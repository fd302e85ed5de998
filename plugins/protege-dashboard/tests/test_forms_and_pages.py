"""What an operator sees when a form is refused (an error, with what they typed), editing and
archiving agents, adding responsibilities, and the pages that said the wrong thing."""

from __future__ import annotations

import datetime
import html
import re

from protege.models import (
    Agent,
    AgentToolkit,
    AuditEntry,
    Message,
    Responsibility,
    Run,
    Toolkit,
)


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _post(client, page_path, target, token_of, **fields):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(target, data={"csrf_token": token_of(page.text), **fields})


def _error(page: str) -> str:
    match = re.search(r'<p class="error" id="(?:error|flash-error)">(.*?)</p>', page, re.S)
    assert match, "the page shows no error"
    return match.group(1)


def _grant_path(agent):
    grant = agent.grant_of(Toolkit.named("Finance"))
    return grant, f"/agents/{agent.id}/grants/{grant.id}"


def test_the_grant_pages_title_is_only_its_name(signed_in, scoop):
    _, here = _grant_path(scoop)
    page = signed_in.get(here).text
    (title,) = re.findall(r"<title>(.*?)</title>", page, re.S)
    assert title == "Finance on Sundae · protege"
    assert page.count("<h2>Approval</h2>") == 1


def test_a_refused_gate_rule_is_an_error_and_keeps_what_was_typed(signed_in, scoop, token_of):
    grant, here = _grant_path(scoop)
    answer = _post(signed_in, here, f"{here}/rules", token_of, kind="deny", pattern="a*b*@x.com")
    assert answer.status_code == 422
    assert "'a*b*@x.com' is not a rule pattern" in html.unescape(_error(answer.text))
    assert 'class="flash"' not in answer.text
    assert 'value="a*b*@x.com"' in answer.text
    assert '<option value="deny" selected>' in answer.text
    assert [str(r) for r in grant.rules] == ["allow *@thescoop.com"]


def test_a_refused_approval_policy_is_shown_as_an_error(signed_in, scoop, token_of):
    grant, here = _grant_path(scoop)
    answer = _post(
        signed_in,
        here,
        f"{here}/approval",
        token_of,
        action="save",
        approvers="*@thescoop.com",
        notify="boss@elsewhere.example",
        timeout_hours="12",
    )
    assert "is not among the approvers" in _error(answer.text)
    assert 'id="flash"' not in answer.text
    assert AgentToolkit.get_by_id(grant.id).approval is None


def test_a_refused_access_rule_is_an_error_and_keeps_what_was_typed(signed_in, scoop, token_of):
    here = f"/agents/{scoop.id}"
    answer = _post(signed_in, here, f"{here}/access-rules", token_of, kind="deny", pattern="a*b*@x")
    assert answer.status_code == 422
    assert "is not a rule pattern" in _error(answer.text)
    assert 'id="access-pattern" placeholder="*@example.com" value="a*b*@x"' in answer.text
    assert scoop.access_rules.count() == 0


def test_a_refusal_after_a_redirect_is_shown_as_an_error(signed_in, scoop, token_of):
    duty = Responsibility.create(agent=scoop, name="Stock report", prompt="Count the tubs.")
    _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/run", token_of)
    again = _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/run", token_of)
    assert "queued already; wait for it to end" in _error(again.text)
    assert 'id="flash"' not in again.text


def test_backticks_in_a_message_are_shown_as_code_and_escaped(signed_in, scoop, token_of):
    duty = Responsibility.create(agent=scoop, name="Stock report", prompt="Count the tubs.")
    ran = _post(signed_in, "/responsibilities", f"/responsibilities/{duty.id}/run", token_of)
    flash = re.search(r'<p class="flash" id="flash">(.*?)</p>', ran.text, re.S).group(1)
    assert flash == f"queued run {Run.get().id}: <code>protege serve</code> carries it out"
    # What is inside the backticks came from the form: escaped, code or not.
    Agent.create(name="a `<b>x</b>` b", address="x@thescoop.example")
    refused = _post(
        signed_in, "/agents", "/agents", token_of, name="a `<b>x</b>` b", address="y@x.example"
    )
    assert "a <code>&lt;b&gt;x&lt;/b&gt;</code> b" in _error(refused.text)
    assert "<b>x</b>" not in refused.text


def test_an_agent_is_edited_from_its_page_and_the_change_audited(signed_in, scoop, token_of):
    here = f"/agents/{scoop.id}"
    answer = _post(
        signed_in,
        here,
        f"{here}/edit",
        token_of,
        name="Sundae Bot",
        address="Bot@TheScoop.example",
        instructions="Answer about ice cream.",
    )
    assert answer.status_code == 200
    assert "saved agent Sundae Bot" in answer.text
    saved = Agent.get_by_id(scoop.id)
    assert (saved.name, saved.address, saved.instructions) == (
        "Sundae Bot",
        "bot@thescoop.example",
        "Answer about ice cream.",
    )
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).first()
    assert (entry.actor, entry.action) == ("operator:mara", "agent edited")
    assert (entry.before["name"], entry.after["name"]) == ("Sundae", "Sundae Bot")


def test_a_taken_address_is_an_error_and_the_form_keeps_what_was_typed(signed_in, scoop, token_of):
    Agent.create(name="Scout", address="scout@thescoop.example")
    here = f"/agents/{scoop.id}"
    answer = _post(
        signed_in,
        here,
        f"{here}/edit",
        token_of,
        name="Sundae Bot",
        address="scout@thescoop.example",
        instructions="New words.",
    )
    assert answer.status_code == 422
    assert "an agent with address &#39;scout@thescoop.example&#39; already exists" in (
        _error(answer.text)
    )
    assert 'id="agent-name" value="Sundae Bot"' in answer.text
    assert 'id="agent-address" value="scout@thescoop.example"' in answer.text
    assert ">New words.</textarea>" in answer.text
    kept = Agent.get_by_id(scoop.id)
    assert (kept.name, kept.address) == ("Sundae", "sundae@thescoop.example")
    assert AuditEntry.select().count() == 0


def test_an_archived_agent_is_listed_apart_and_restored(signed_in, scoop, token_of):
    here = f"/agents/{scoop.id}"
    answer = _post(signed_in, here, f"{here}/archive", token_of, action="archive")
    assert "Sundae archived: mail to it is refused until it is restored" in answer.text
    assert Agent.get_by_id(scoop.id).archived
    listing = signed_in.get("/agents").text
    main_table = listing.split("<h2>Archived</h2>")[0]
    assert "Sundae" not in main_table
    assert "Sundae" in listing.split("<h2>Archived</h2>")[1].split("<h2>New agent</h2>")[0]
    assert 'id="archived"' in signed_in.get(here).text
    _post(signed_in, here, f"{here}/archive", token_of, action="restore")
    assert not Agent.get_by_id(scoop.id).archived
    actions = [e.action for e in AuditEntry.select().order_by(AuditEntry.id)]
    assert actions == ["agent archived", "agent restored"]


def test_the_agent_page_says_which_toolkits_need_approval(signed_in, scoop):
    grant = scoop.grant_of(Toolkit.named("Finance"))
    grant.require_approval(["*@thescoop.com"], ["mara@thescoop.com"])
    Toolkit.create(name="Support", member_tool_ids=["lookup_order"])
    scoop.grant(Toolkit.named("Support"))
    rows = {
        cells[0]: cells
        for cells in (
            [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(
                r"<tr>(.*?)</tr>", signed_in.get(f"/agents/{scoop.id}").text, re.S
            )
        )
        if cells
    }
    assert rows["Finance"][3] == "needs approval by *@thescoop.com"
    assert rows["Support"][3] == "none"


def test_a_responsibility_is_added_from_the_page(signed_in, scoop, token_of):
    answer = _post(
        signed_in,
        "/responsibilities",
        "/responsibilities",
        token_of,
        agent=str(scoop.id),
        name="Stock report",
        prompt="Count the tubs.",
        schedule="0 7 * * 1-5",
        timezone="Europe/Berlin",
        enabled="on",
    )
    assert "added Sundae&#39;s responsibility Stock report" in answer.text
    duty = Responsibility.get(Responsibility.name == "Stock report")
    assert (duty.agent_id, duty.prompt, duty.schedule, duty.timezone, duty.enabled) == (
        scoop.id,
        "Count the tubs.",
        "0 7 * * 1-5",
        "Europe/Berlin",
        True,
    )
    entry = AuditEntry.select().order_by(AuditEntry.id.desc()).first()
    assert (entry.actor, entry.action, entry.before) == (
        "operator:mara",
        "responsibility added",
        None,
    )


def test_a_refused_responsibility_is_an_error_and_keeps_what_was_typed(signed_in, scoop, token_of):
    answer = _post(
        signed_in,
        "/responsibilities",
        "/responsibilities",
        token_of,
        agent=str(scoop.id),
        name="Stock report",
        prompt="Count the tubs.",
        schedule="every day",
        timezone="UTC",
    )
    assert answer.status_code == 422
    assert "every day" in html.unescape(_error(answer.text))
    assert 'id="duty-name" value="Stock report"' in answer.text
    assert ">Count the tubs.</textarea>" in answer.text
    assert 'value="every day"' in answer.text
    assert Responsibility.select().count() == 0


def test_an_edit_refused_keeps_what_was_typed(signed_in, scoop, token_of):
    duty = Responsibility.create(agent=scoop, name="Stock report", prompt="Count the tubs.")
    here = f"/responsibilities/{duty.id}/edit"
    answer = _post(
        signed_in, here, here, token_of, prompt="Count all.", schedule="often", timezone="UTC"
    )
    assert answer.status_code == 422
    assert ">Count all.</textarea>" in answer.text
    assert 'value="often"' in answer.text
    assert Responsibility.get_by_id(duty.id).prompt == "Count the tubs."


def test_a_waiting_run_shows_no_finished_time(signed_in, scoop):
    message = Message.create(
        agent=scoop,
        direction="inbound",
        sender="jane@acme.example",
        to_addresses=[scoop.address],
        subject="Refund",
        body_text="Refund please",
        message_id="<1@acme.example>",
        thread_key="<1@acme.example>",
    )
    run = Run.create(
        agent=scoop,
        kind="reply",
        message=message,
        correlation_id="c1",
        status="waiting",
        finished_at=datetime.datetime(2026, 3, 2, 7, 0),
    )
    page = _text(signed_in.get(f"/runs/{run.id}").text)
    assert "finished" not in page
    run.status = "done"
    run.save()
    assert "finished 2026-03-02 07:00:00" in _text(signed_in.get(f"/runs/{run.id}").text)


def test_where_one_grant_skips_anothers_approval_the_agent_and_grant_pages_say_so(signed_in, scoop):
    scoop.grant_of(Toolkit.named("Finance")).require_approval(
        ["*@thescoop.com"], ["mara@thescoop.com"]
    )
    scoop.grant(Toolkit.create(name="Everything", member_tool_ids=["process_refund"]))
    skipped = (
        "process_refund waits for approval through Finance, but Everything gives it without "
        "approval to every sender its gate admits"
    )
    agent_page = _text(signed_in.get(f"/agents/{scoop.id}").text)
    assert skipped in " ".join(agent_page.split())
    _, here = _grant_path(scoop)
    grant_page = signed_in.get(here).text
    (listed,) = re.findall(r'<ul id="approval-skipped"[^>]*>(.*?)</ul>', grant_page, re.S)
    assert skipped in " ".join(_text(listed).split())
    # Made to wait on Sundae whatever grants it, the tool is no longer skippable.
    scoop.require_approval("process_refund", ["*@thescoop.com"], ["mara@thescoop.com"])
    agent_page = " ".join(_text(signed_in.get(f"/agents/{scoop.id}").text).split())
    assert skipped not in agent_page
    assert (
        "process_refund always waits for approval on Sundae, by *@thescoop.com, whichever "
        "toolkit gives it"
    ) in agent_page
    assert 'id="approval-skipped"' not in signed_in.get(here).text


def test_the_attach_form_preselects_no_toolkit(signed_in, scoop):
    Toolkit.create(name="All Tools", member_tool_ids=["process_refund"])
    page = signed_in.get(f"/agents/{scoop.id}").text
    (select,) = re.findall(
        r'<select name="toolkit" id="attach-toolkit"[^>]*>(.*?)</select>', page, re.S
    )
    assert re.findall(r"<option[^>]*selected[^>]*>([^<]*)<", select) == ["Choose a toolkit"]
