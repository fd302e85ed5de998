"""Every change an operator makes is in the audit log: who, when, before and after."""

from __future__ import annotations

import html
import json

from click.testing import CliRunner

from protege.cli import cli
from protege.models import AuditEntry, Toolkit


def _post(client, page_path, action, token_of, **fields):
    page = client.get(page_path)
    return client.post(action, data={"csrf_token": token_of(page.text), **fields})


def test_operator_changes_are_recorded_with_who_and_before_and_after(signed_in, scoop, token_of):
    _post(
        signed_in,
        "/toolkits/new",
        "/toolkits/new",
        token_of,
        name="Kitchen",
        members=["lookup_order"],
    )
    kitchen = Toolkit.named("Kitchen")
    here = f"/agents/{scoop.id}"
    _post(signed_in, here, f"{here}/attach", token_of, toolkit=kitchen.id)
    grant = scoop.grant_of(kitchen)
    _post(
        signed_in,
        here,
        f"{here}/grants/{grant.id}/rules",
        token_of,
        kind="allow",
        pattern="*@thescoop.com",
    )
    _post(signed_in, here, f"{here}/access-rules", token_of, kind="deny", pattern="x@y.example")
    _post(
        signed_in,
        f"/toolkits/{kitchen.id}/edit",
        f"/toolkits/{kitchen.id}/edit",
        token_of,
        name="Kitchen",
        members=["lookup_order", "process_refund"],
    )
    entries = list(AuditEntry.select().order_by(AuditEntry.id))
    assert [(e.actor, e.action, e.subject) for e in entries] == [
        ("operator:mara", "toolkit created", "Kitchen"),
        ("operator:mara", "toolkit attached", "Kitchen on Sundae"),
        ("operator:mara", "rule added", "Kitchen on Sundae"),
        ("operator:mara", "access rule added", "Sundae"),
        ("operator:mara", "toolkit edited", "Kitchen"),
    ]
    assert entries[0].before is None
    assert entries[2].before["rules"] == []
    assert entries[2].after["rules"] == ["allow *@thescoop.com"]
    assert entries[3].after["access_rules"] == ["deny x@y.example"]
    assert entries[4].before["members"] == ["lookup_order"]
    assert entries[4].after["members"] == ["lookup_order", "process_refund"]


def test_a_refused_change_is_not_recorded(signed_in, scoop, token_of):
    grant = scoop.grants.get()
    here = f"/agents/{scoop.id}/grants/{grant.id}"
    _post(signed_in, here, f"{here}/rules", token_of, kind="allow", pattern="a*b*@x.com")
    assert AuditEntry.select().count() == 0


def test_the_audit_page_shows_the_dashboard_and_the_command_line(signed_in, scoop, token_of):
    here = f"/agents/{scoop.id}"
    _post(signed_in, here, f"{here}/access-rules", token_of, kind="deny", pattern="x@y.example")
    CliRunner().invoke(cli, ["access-rules", "add", "Sundae", "deny", "z@y.example"])
    page = signed_in.get("/audit").text
    assert "operator:mara" in page
    assert "cli:" in page
    assert "deny z@y.example" in page
    assert html.unescape('access_rules: [] → ["deny x@y.example"]') in html.unescape(page)
    logged = json.loads(CliRunner().invoke(cli, ["audit", "--json"]).output)
    assert [e["actor"].split(":")[0] for e in logged] == ["cli", "operator"]
