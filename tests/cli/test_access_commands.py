"""The toolkit and access commands, run as an operator would (in-process, for speed)."""

import json

import pytest
from click.testing import CliRunner

from protege.cli import cli
from protege.migrations import MIGRATIONS

SCOOP_TOOLS = """
from protege import Tool


class LookupOrderTool(Tool):
    description = "Looks up an order by number."

    def use(self, context):
        return self.success()


class CheckFlavorStockTool(Tool):
    description = "Checks how much of a flavor is in stock."

    def use(self, context):
        return self.success()


class ProcessRefundTool(Tool):
    description = "Refunds an order."

    def use(self, context):
        return self.success()
"""


@pytest.fixture
def operator(host_project, protege_db, monkeypatch):
    """Runs `protege ...` in The Scoop's project, against the test database."""
    (host_project.root / "protege.toml").write_text('tool_modules = ["scoop_tools"]\n')
    host_project.module("scoop_tools", SCOOP_TOOLS)
    monkeypatch.chdir(host_project.root)
    runner = CliRunner()

    def run(*args, ok=True):
        result = runner.invoke(cli, list(args), env={"PROTEGE_DATABASE_URL": protege_db.url})
        if ok:
            assert result.exit_code == 0, result.output
        result.returncode = result.exit_code
        return result

    yield run
    monkeypatch.undo()


@pytest.fixture
def scoop(operator):
    """The toolkits seed's setup, made with the CLI."""
    operator("sync")
    operator("agents", "create", "Sundae", "--address", "sundae@thescoop.example")
    operator(
        "toolkits", "create", "Support", "--tool", "lookup_order", "--tool", "check_flavor_stock"
    )
    operator("toolkits", "create", "Finance", "--tool", "process_refund")
    operator("grants", "attach", "Sundae", "Support")
    operator("grants", "attach", "Sundae", "Finance")
    operator("rules", "add", "Sundae", "Finance", "allow", "*@thescoop.com")
    return operator


def test_explain_shows_each_toolkit_decision_and_the_tools(scoop):
    out = scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout
    assert out.splitlines() == [
        "Sundae, reply to jane@acme.com (routing key: jane@acme.com), "
        "as mail that proves its sender",
        "  sender may write to Sundae: no rules: open to every sender",
        "  admitted  Default Tools: no rules: open to every sender",
        "  refused   Finance: no allow rule matches (allow-list)",
        "  admitted  Support: no rules: open to every sender",
        "  mail      mail tools reach only the mail jane@acme.com took part in (From, To, Cc)",
        (
            "tools: check_flavor_stock, create_file, lookup_order, read_attachment, "
            "search_emails, send_email, web_fetch, web_search"
        ),
    ]


def test_explain_json_for_mara_with_a_tag(scoop):
    out = scoop("access", "explain", "Sundae", "--sender", "Mara+billing@TheScoop.com", "--json")
    data = json.loads(out.stdout)
    assert data["routing_key"] == "mara@thescoop.com"
    finance = next(t for t in data["toolkits"] if t["toolkit"] == "Finance")
    assert finance == {
        "toolkit": "Finance",
        "admitted": True,
        "reason": "allow rule *@thescoop.com matches",
        "tools": ["process_refund"],
        "missing": [],
        "whole_archive": False,
    }
    assert data["tools"] == [
        "check_flavor_stock",
        "create_file",
        "lookup_order",
        "process_refund",
        "read_attachment",
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]


def test_explain_a_scheduled_run(scoop):
    scoop("grants", "configure", "Sundae", "Support", "--allow-proactive")
    data = json.loads(scoop("access", "explain", "Sundae", "--scheduled", "--json").stdout)
    assert data["run"] == "scheduled"
    assert data["tools"] == ["check_flavor_stock", "lookup_order"]
    assert [t["admitted"] for t in data["toolkits"]] == [False, False, True]


def test_explain_needs_exactly_one_of_sender_and_scheduled(scoop):
    result = scoop("access", "explain", "Sundae", ok=False)
    assert result.returncode == 2
    assert "exactly one of --sender ADDRESS, --message ID or --scheduled" in result.stderr


def test_explain_shows_the_agent_access_decision(scoop):
    scoop("access-rules", "add", "Sundae", "deny", "*@acme.com")
    out = scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout
    assert "  sender may NOT write to Sundae: deny rule *@acme.com matches" in out
    assert scoop("access-rules", "list", "Sundae").stdout == "deny *@acme.com\n"
    scoop("access-rules", "remove", "Sundae", "deny", "*@ACME.com")
    assert "anyone may reach" in scoop("access-rules", "list", "Sundae").stdout


def test_agents_show_prints_grants_rules_and_catalogue(scoop):
    data = json.loads(scoop("agents", "show", "Sundae", "--json").stdout)
    assert [g["toolkit"] for g in data["grants"]] == ["Default Tools", "Finance", "Support"]
    finance = data["grants"][1]
    assert finance["rules"] == ["allow *@thescoop.com"]
    assert data["catalogue"] == [
        "check_flavor_stock",
        "create_file",
        "lookup_order",
        "process_refund",
        "read_attachment",
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]
    text = scoop("agents", "show", "Sundae").stdout
    assert "    gate: allow *@thescoop.com" in text
    # Default Tools: the built-ins
    assert (
        "    tools: create_file, read_attachment, search_emails, send_email, web_fetch, web_search"
        in text
    )


def test_agents_list_and_delete(scoop):
    rows = json.loads(scoop("agents", "list", "--json").stdout)
    assert rows == [
        {
            "name": "Sundae",
            "address": "sundae@thescoop.example",
            "toolkits": ["Default Tools", "Finance", "Support"],
        }
    ]
    assert scoop("agents", "delete", "Sundae", "--yes").stdout == "deleted agent Sundae\n"
    assert json.loads(scoop("agents", "list", "--json").stdout) == []


def test_delete_without_yes_and_without_a_terminal_does_nothing(scoop):
    result = scoop("agents", "delete", "Sundae", ok=False)
    assert result.returncode == 1
    assert len(json.loads(scoop("agents", "list", "--json").stdout)) == 1


def test_toolkit_editing(scoop):
    assert scoop("toolkits", "add-tools", "Finance", "lookup_order").stdout == (
        "Finance: added lookup_order\n"
    )
    assert scoop("toolkits", "remove-tools", "Finance", "lookup_order").stdout == (
        "Finance: removed lookup_order\n"
    )
    show = json.loads(scoop("toolkits", "show", "Finance", "--json").stdout)
    assert show["tools"] == [
        {
            "id": "process_refund",
            "summary": "Refunds an order.",
            "in_manifest": True,
            "withheld": None,
        }
    ]
    assert show["agents"] == ["Sundae"]


def test_unknown_tool_ids_are_refused_unless_forced(scoop):
    result = scoop("toolkits", "add-tools", "Finance", "procss_refund", ok=False)
    assert result.returncode == 1
    assert "not in the manifest: procss_refund" in result.stderr
    scoop("toolkits", "add-tools", "Finance", "future_tool", "--force")
    show = json.loads(scoop("toolkits", "show", "Finance", "--json").stdout)
    assert {"id": "future_tool", "summary": None, "in_manifest": False, "withheld": None} in show[
        "tools"
    ]
    out = scoop("access", "explain", "Sundae", "--sender", "mara@thescoop.com").stdout
    assert "skipped (not in the manifest): future_tool" in out


def test_all_tools_members_are_not_edited_by_hand(scoop):
    result = scoop("toolkits", "add-tools", "All Tools", "lookup_order", ok=False)
    assert "rewritten by `protege sync`" in result.stderr


def test_system_toolkit_cannot_be_deleted(scoop):
    result = scoop("toolkits", "delete", "Default Tools", "--yes", ok=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: 'Default Tools' is a system toolkit and cannot be deleted"
    )


def test_toolkits_list(scoop):
    rows = {r["name"]: r for r in json.loads(scoop("toolkits", "list", "--json").stdout)}
    assert rows["All Tools"]["tools"] == [
        "check_flavor_stock",
        "create_file",
        "get_forecast",
        "lookup_order",
        "process_refund",
        "read_attachment",
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]
    assert rows["Default Tools"]["tools"] == [
        "create_file",
        "read_attachment",
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]
    assert rows["All Tools"]["system"] == "all_tools"
    assert rows["Finance"]["agents"] == ["Sundae"]


def test_grants_detach_and_rules_listing(scoop):
    assert scoop("rules", "list", "Sundae", "Finance").stdout == "allow *@thescoop.com\n"
    scoop("rules", "remove", "Sundae", "Finance", "allow", "*@thescoop.com")
    assert "open to every sender" in scoop("rules", "list", "Sundae", "Finance").stdout
    scoop("grants", "detach", "Sundae", "Finance")
    result = scoop("rules", "list", "Sundae", "Finance", ok=False)
    assert result.stderr.strip() == "Error: 'Finance' is not attached to Sundae"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("agents", "show", "Nobody"), "Error: no agent named 'Nobody'"),
        (("toolkits", "show", "Nothing"), "Error: no toolkit named 'Nothing'"),
        (("rules", "add", "Sundae", "Finance", "allow", "*@*.com"), "is not a rule pattern"),
        (("grants", "attach", "Sundae", "Finance"), "already attached to Sundae"),
        (("agents", "create", "Sundae", "--address", "s2@x.example"), "already exists"),
        (("agents", "create", "Bad", "--address", "nope"), "is not an email address"),
        (("toolkits", "create", "Finance"), "a toolkit named 'Finance' already exists"),
    ],
)
def test_operator_mistakes_are_one_line_errors(scoop, args, message):
    result = scoop(*args, ok=False)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    assert "Traceback" not in result.stderr


def test_sync_reports_changes_then_nothing(operator):
    first = json.loads(operator("sync", "--json").stdout)
    assert first["migrations_applied"] == []  # the test database is migrated already
    assert first["toolkits_created"] == ["All Tools", "Default Tools"]
    assert first["all_tools_added"] == [
        "check_flavor_stock",
        "create_file",
        "get_forecast",
        "lookup_order",
        "process_refund",
        "read_attachment",
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]
    assert operator("sync").stdout == (
        "Nothing to change: the system toolkits match the manifest.\n"
    )


def test_commands_on_an_unmigrated_database_say_what_to_run(run_protege, tmp_path):
    url = f"sqlite:///{tmp_path}/new.db"
    result = run_protege("agents", "list", env={"PROTEGE_DATABASE_URL": url})
    assert result.returncode == 1
    assert "there is no protege database here yet: run `protege sync` to create it" in (
        result.stderr
    )
    migrated = run_protege("migrate", env={"PROTEGE_DATABASE_URL": url})
    assert migrated.stdout == "".join(
        f"applied {m.version:04d} {m.name}\n" for m in MIGRATIONS
    )  # tests/test_db.py checks each by name
    assert run_protege("agents", "list", env={"PROTEGE_DATABASE_URL": url}).returncode == 0


def test_agent_created_before_sync_warns_to_run_sync(run_protege, tmp_path):
    env = {"PROTEGE_DATABASE_URL": f"sqlite:///{tmp_path}/new.db"}
    run_protege("migrate", env=env)
    result = run_protege("agents", "create", "Early", "--address", "early@x.example", env=env)
    assert result.returncode == 0
    assert "Run `protege sync`" in result.stderr


def test_deleting_a_toolkit_detaches_it_from_its_agents(scoop):
    assert scoop("toolkits", "delete", "Finance", "--yes").stdout == "deleted toolkit Finance\n"
    data = json.loads(scoop("agents", "show", "Sundae", "--json").stdout)
    assert [g["toolkit"] for g in data["grants"]] == ["Default Tools", "Support"]


def test_attach_with_allow_proactive(operator):
    operator("sync")
    operator("agents", "create", "Scout", "--address", "scout@thescoop.example")
    operator("toolkits", "create", "Operations", "--tool", "check_flavor_stock")
    operator("grants", "attach", "Scout", "Operations", "--allow-proactive")
    data = json.loads(operator("access", "explain", "Scout", "--scheduled", "--json").stdout)
    assert data["tools"] == ["check_flavor_stock"]
    rows = {r["name"]: r for r in json.loads(operator("agents", "list", "--json").stdout)}
    assert rows["Scout"]["toolkits"] == ["Default Tools", "Operations"]


def test_sync_reports_builtins_default_tools_lacks_and_leaves_them_out(operator):
    operator("sync")
    operator("toolkits", "remove-tools", "Default Tools", "read_attachment", "create_file")
    out = operator("sync").stdout
    assert out.splitlines()[-1] == (
        "Default Tools lacks the built-in tools create_file, read_attachment (not added: its "
        'members are yours; add them with `protege toolkits add-tools "Default Tools" '
        "create_file read_attachment`)"
    )
    rows = {r["name"]: r for r in json.loads(operator("toolkits", "list", "--json").stdout)}
    assert rows["Default Tools"]["tools"] == [
        "search_emails",
        "send_email",
        "web_fetch",
        "web_search",
    ]
    again = json.loads(operator("sync", "--json").stdout)
    assert again["default_tools_lacks_builtins"] == ["create_file", "read_attachment"]


def test_every_change_to_access_from_the_command_line_is_in_the_audit_log(operator):
    operator("agents", "create", "Sundae", "--address", "sundae@thescoop.example")
    operator("toolkits", "create", "Finance", "--tool", "process_refund")
    operator("toolkits", "add-tools", "Finance", "lookup_order")
    operator("grants", "attach", "Sundae", "Finance")
    operator("rules", "add", "Sundae", "Finance", "allow", "*@TheScoop.com")
    operator("rules", "remove", "Sundae", "Finance", "allow", "*@thescoop.com")
    operator("access-rules", "add", "Sundae", "deny", "spam@example.com")
    operator("grants", "configure", "Sundae", "Finance", "--allow-proactive")
    operator("grants", "detach", "Sundae", "Finance")
    operator("toolkits", "delete", "Finance", "--yes")
    logged = json.loads(operator("audit", "--json").stdout)[::-1]
    assert [(e["action"], e["subject"]) for e in logged] == [
        ("agent created", "Sundae"),
        ("toolkit created", "Finance"),
        ("members added", "Finance"),
        ("toolkit attached", "Finance on Sundae"),
        ("rule added", "Finance on Sundae"),
        ("rule removed", "Finance on Sundae"),
        ("access rule added", "Sundae"),
        ("scheduled runs allowed", "Finance on Sundae"),
        ("toolkit detached", "Finance on Sundae"),
        ("toolkit deleted", "Finance"),
    ]
    assert all(e["actor"].startswith("cli:") for e in logged)
    assert logged[0]["before"] is None
    assert logged[2]["before"]["members"] == ["process_refund"]
    assert logged[2]["after"]["members"] == ["lookup_order", "process_refund"]
    assert logged[4]["after"]["rules"] == ["allow *@thescoop.com"]
    assert logged[5]["after"]["rules"] == []
    assert logged[8]["after"] is None
    assert logged[9]["before"]["name"] == "Finance"
    text = operator("audit", "--kind", "toolkit", "--limit", "1").stdout
    assert text.splitlines()[0].endswith("toolkit deleted, toolkit Finance")


def test_a_refused_change_leaves_no_audit_entry(operator):
    operator("agents", "create", "Sundae", "--address", "sundae@thescoop.example")
    operator("toolkits", "create", "Finance")
    operator("grants", "attach", "Sundae", "Finance")
    refused = operator("rules", "add", "Sundae", "Finance", "allow", "a*b*@x.com", ok=False)
    assert refused.returncode == 1
    actions = [e["action"] for e in json.loads(operator("audit", "--json").stdout)]
    assert "rule added" not in actions


def test_explain_a_stored_message_uses_its_sender_verdict(scoop):
    from protege.authentication import unverified
    from protege.mail import record_inbound
    from protege.models import Agent

    sundae = Agent.named("Sundae")
    forged = record_inbound(
        sundae,
        sender="Mara <mara@thescoop.com>",
        body="refund please",
        verdict=unverified("no signature", "thescoop.com"),
    )
    proven = record_inbound(sundae, sender="Mara <mara@thescoop.com>", body="refund please")
    out = scoop("access", "explain", "Sundae", "--message", str(forged.id)).stdout
    assert "as mail that does NOT prove its sender" in out
    assert "  sender verdict: not authenticated; dmarc none: no signature" in out
    assert "  refused   Finance: allow rule *@thescoop.com matches only an authenticated" in out
    data = json.loads(
        scoop("access", "explain", "Sundae", "--message", str(proven.id), "--json").stdout
    )
    assert data["authenticated"] is True
    assert data["sender_verdict"]["method"] == "operator"
    assert "process_refund" in data["tools"]


def test_explain_unauthenticated_takes_allow_rules_away(scoop):
    out = scoop(
        "access", "explain", "Sundae", "--sender", "mara@thescoop.com", "--unauthenticated"
    ).stdout
    assert "process_refund" not in out.splitlines()[-1]
    assert "as mail that does NOT prove its sender" in out


def test_a_grant_that_skips_another_grants_approval_is_reported_everywhere(scoop):
    scoop(
        "grants", "configure", "Sundae", "Finance",
        "--approval-by", "*@thescoop.com", "--approval-to", "mara@thescoop.com",
    )  # fmt: skip
    attached = scoop("grants", "attach", "Sundae", "All Tools")
    skipped = (
        "Sundae: process_refund waits for approval through Finance, but All Tools gives it "
        "without approval to every sender its gate admits"
    )
    assert f"warning: {skipped}" in attached.output
    explained = scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout
    assert (
        "  NO APPROVAL  process_refund: Finance asks for approval but does not admit this "
        "sender, and All Tools gives it without"
    ) in explained.splitlines()
    as_json = json.loads(
        scoop("access", "explain", "Sundae", "--sender", "jane@acme.com", "--json").stdout
    )
    assert as_json["approval_skipped"] == [
        {"tool": "process_refund", "guarded_by": "Finance", "given_by": "All Tools"}
    ]
    assert f"warning: {skipped}" in scoop("doctor", ok=False).output
    # Staff, whom Finance admits, still wait: the skip is only for senders Finance refuses.
    staff = scoop("access", "explain", "Sundae", "--sender", "bob@thescoop.com").stdout
    assert "NO APPROVAL" not in staff
    assert "  approval  process_refund: waits for a yes from *@thescoop.com" in staff


def test_an_operator_makes_a_tool_wait_on_an_agent_whatever_grants_it(scoop):
    scoop("grants", "attach", "Sundae", "All Tools")
    made = scoop(
        "approvals", "require", "Sundae", "process_refund",
        "--by", "*@thescoop.com", "--to", "mara@thescoop.com", "--timeout", "2h",
    )  # fmt: skip
    assert made.stdout.startswith("process_refund waits for approval by *@thescoop.com")
    explained = scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout
    assert "  approval  process_refund: waits for a yes from *@thescoop.com" in explained
    assert "NO APPROVAL" not in explained
    listed = json.loads(scoop("approvals", "required", "--json").stdout)
    assert listed == [
        {
            "agent": "Sundae",
            "tool": "process_refund",
            "required_by": "operator",
            "approvers": ["*@thescoop.com"],
            "timeout_seconds": 7200,
            "given": True,
        }
    ]
    audit = scoop("audit", "--json").stdout
    assert "approval required for a tool" in audit
    assert "approvals_required" in audit
    assert "process_refund no longer requires approval on Sundae" in (
        scoop("approvals", "unrequire", "Sundae", "process_refund").stdout
    )
    again = scoop("approvals", "unrequire", "Sundae", "process_refund", ok=False)
    assert again.returncode == 1
    assert "process_refund does not require approval on Sundae" in again.output
    assert "waits for a yes" not in (
        scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout
    )


def test_requiring_approval_of_a_tool_that_does_not_exist_says_what_is_close(scoop):
    typo = scoop("approvals", "require", "Sundae", "proces_refund", "--by", "a@b.com", ok=False)
    assert typo.returncode == 1
    assert "no tool 'proces_refund' in the manifest" in typo.output
    assert "process_refund" in typo.output
    assert "Traceback" not in typo.output


def test_a_grant_opened_to_the_whole_archive_is_shown_in_explain(scoop):
    said = scoop("grants", "configure", "Sundae", "Default Tools", "--whole-archive")
    assert said.stdout == (
        "Default Tools's mail tools reach all of Sundae's mail, for any sender it admits\n"
    )
    assert (
        "warning: Default Tools's gate has no allow rule, so it admits strangers: anyone who "
        "writes to Sundae can have its mail tools reach all of its mail"
    ) in said.stderr
    staff = scoop("grants", "configure", "Sundae", "Finance", "--whole-archive")
    assert "warning" not in staff.stderr  # Finance admits only *@thescoop.com
    doctor = scoop("doctor", ok=False).output.splitlines()
    assert (
        "warning: Sundae: Default Tools opens the whole mail archive and its gate has no allow "
        "rule: anyone who writes to Sundae can have its mail tools reach all of its mail"
    ) in doctor
    assert not [line for line in doctor if "Finance opens" in line]
    out = scoop("access", "explain", "Sundae", "--sender", "jane@acme.com").stdout.splitlines()
    assert "  admitted  Default Tools (whole mail archive): no rules: open to every sender" in out
    assert out[-3:-1] == [
        "  mail      mail tools reach only the mail jane@acme.com took part in (From, To, Cc)",
        "            all of the agent's mail, through a grant: create_file, read_attachment, "
        "search_emails, send_email, web_fetch, web_search",
    ]
    data = json.loads(
        scoop("access", "explain", "Sundae", "--sender", "x@y.example", "--json").stdout
    )
    assert data["mail_scope"] == "sender's mail"
    assert "search_emails" in data["whole_archive_tools"]
    assert "lookup_order" not in data["whole_archive_tools"]
    scoop("grants", "configure", "Sundae", "Default Tools", "--no-whole-archive")
    data = json.loads(
        scoop("access", "explain", "Sundae", "--sender", "x@y.example", "--json").stdout
    )
    assert data["whole_archive_tools"] == []


def test_explain_says_an_unproven_sender_reaches_only_its_own_message(scoop):
    out = scoop(
        "access", "explain", "Sundae", "--sender", "jane@acme.com", "--unauthenticated"
    ).stdout
    assert "  mail      mail tools reach only the run's own message (the sender is not proven)" in (
        out.splitlines()
    )
    scheduled = scoop("access", "explain", "Sundae", "--scheduled").stdout
    assert "mail tools reach all of the agent's mail (a scheduled run has no sender)" in scheduled
