"""A host with two installations open in one process mounts a dashboard for each: every
request is served on its own installation's records."""

import attrs
import pytest
from starlette.testclient import TestClient

from protege import admin
from protege.models import Agent
from protege_dashboard.app import create_app
from protege_dashboard.operators import add_operator
from protege_dashboard.settings import DashboardSettings

from .conftest import PASSWORD, SECRETS, _sign_in


@pytest.fixture
def two(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTEGE_DNS_OFFLINE", "1")
    opened = []
    for name, agent in (("first", "Ada"), ("second", "Bea")):
        root = tmp_path / name
        root.mkdir()
        config = attrs.evolve(
            admin.load_config(root, environ={}),
            database_url=f"sqlite:///{root / 'protege.db'}",
        )
        app = admin.open_installation(config)
        app.sync()
        with app.activated():
            Agent.create(name=agent, address=f"{agent.lower()}@{name}.example")
            add_operator("mara", PASSWORD)
        opened.append(app)
    yield opened
    for app in opened:
        app.close()


def test_each_dashboard_shows_its_own_installation(two):
    for app, mine, theirs in ((two[0], "Ada", "Bea"), (two[1], "Bea", "Ada")):
        dashboard = create_app(app, DashboardSettings(), SECRETS)
        with TestClient(dashboard, base_url="http://127.0.0.1") as client:
            assert _sign_in(client).status_code == 303
            page = client.get("/agents")
            assert page.status_code == 200
            assert mine in page.text
            assert theirs not in page.text
