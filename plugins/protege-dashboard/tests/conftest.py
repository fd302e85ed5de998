"""Fixtures: the dashboard over this test's database, a browserless client, a signed-in one."""

from __future__ import annotations

import importlib
import re
import sys
from textwrap import dedent

import attrs
import pytest
from starlette.testclient import TestClient

from protege import admin
from protege.models import Agent, Toolkit
from protege.plugins import PluginHost, Selection, discover, normalize
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


class CloseAccountTool(Tool):
    description = "Closes a customer's account in the CRM."
    annotations = {"destructive": True, "read_only": False}
    server = "crm"

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
    yield admin.open_installation(admin.load_config(), connect=False)
    monkeypatch.undo()


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


class PluginSite:
    """A folder of installed-looking plugin distributions written by a test, loaded with
    the dashboard itself into the plugin host of an installation."""

    def __init__(self, path, installation) -> None:
        self.path = path
        self.installation = installation
        self.modules: list[str] = []

    def add(self, distribution: str, source: str) -> None:
        """Install ``distribution`` with one module (named after it) holding ``source``."""
        module = normalize(distribution).replace("-", "_")
        (self.path / f"{module}.py").write_text(dedent(source))
        info = self.path / f"{module}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(f"[protege]\n{module} = {module}\n")
        importlib.invalidate_caches()
        self.modules.append(module)

    def app(self, settings: DashboardSettings | None = None, environ=None):
        """The dashboard for the installation with these plugins and the dashboard loaded."""
        (dashboard,) = [s for s in discover() if s.distribution == "protege-dashboard"]
        host = PluginHost((dashboard, *discover(path=[str(self.path)])), Selection())
        with_plugins = attrs.evolve(self.installation, plugins=host)
        return create_app(with_plugins, settings or DashboardSettings(), environ or SECRETS)


@pytest.fixture
def plugin_site(installation, tmp_path, monkeypatch):
    """An empty site of plugin distributions on ``sys.path`` for the test's duration."""
    path = tmp_path / "plugin-site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    site = PluginSite(path, installation)
    yield site
    for module in site.modules:
        sys.modules.pop(module, None)
