"""Fixtures: the dashboard over this test's database, a browserless client, a signed-in one."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from protege import admin, registry
from protege.models import Agent, Toolkit
from protege_dashboard.app import create_app
from protege_dashboard.operators import add_operator
from protege_dashboard.settings import DashboardSettings

PASSWORD = "correct horse battery"
SECRETS = {
    "PROTEGE_RELAY_PASSWORD": "relay-secret-1",
    "PROTEGE_POSTMARK_PASSWORD": "postmark-secret-1",
    "PROTEGE_SENDGRID_PASSWORD": "sendgrid-secret-1",
    "MAILGUN_SIGNING_KEY": "mailgun-key-1",
}
SCOOP_TOOLS = """
from protege import Tool


class LookupOrderTool(Tool):
    description = "Looks up an order by number."

    def use(self, context):
        return self.success()


class ProcessRefundTool(Tool):
    description = "Refunds an order."

    def use(self, context):
        return self.success()
"""


@pytest.fixture
def installation(protege_db, tmp_path, monkeypatch):
    """An installation on this test's database whose host module offers two tools."""
    (tmp_path / "scoop_tools_for_dashboard.py").write_text(SCOOP_TOOLS)
    (tmp_path / "protege.toml").write_text('tool_modules = ["scoop_tools_for_dashboard"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The command line's manifest is built once per process: rebuilt for this folder, so that
    # `protege ...` run in a test sees the same tools as the dashboard.
    registry.refresh()
    yield admin.open_installation(admin.load_config(), connect=False)
    monkeypatch.undo()
    registry.refresh()


@pytest.fixture
def app(installation):
    """The dashboard's application, every ingress configured."""
    return create_app(installation, DashboardSettings(), SECRETS)


@pytest.fixture
def client(app):
    """A client that is not signed in."""
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def _token_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def _sign_in(client: TestClient, name: str = "mara", password: str = PASSWORD):
    """Sign ``client`` in through the login form; returns the answer."""
    page = client.get("/login")
    return client.post(
        "/login",
        data={"csrf_token": _token_of(page.text), "name": name, "password": password, "next": "/"},
        follow_redirects=False,
    )


@pytest.fixture
def token_of():
    """Finds the CSRF token in a page."""
    return _token_of


@pytest.fixture
def sign_in():
    """Signs a client in through the login form: ``sign_in(client, name=, password=)``."""
    return _sign_in


@pytest.fixture
def operator(installation):
    """An operator account, mara."""
    return add_operator("mara", PASSWORD)


@pytest.fixture
def signed_in(client, operator):
    """A client signed in as mara."""
    answer = _sign_in(client)
    assert answer.status_code == 303
    return client


@pytest.fixture
def scoop(installation):
    """Sundae with Finance (process_refund) attached, gate allowing *@thescoop.com."""
    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    finance = Toolkit.create(name="Finance", member_tool_ids=["process_refund"])
    sundae.grant(finance).add_rule("allow", "*@thescoop.com")
    return sundae
