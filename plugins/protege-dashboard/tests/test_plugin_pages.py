"""Pages plugins add through ``dashboard_pages``: behind the login and the CSRF check like the
dashboard's own, in its layout and menu, never in place of one of its pages."""

from __future__ import annotations

import logging

import pytest
from starlette.testclient import TestClient

from protege.models import Agent

# Written as a plugin author would: protege's public API and the request it is handed.
STOCK_PLUGIN = """
import html

from protege import hookimpl
from starlette.responses import PlainTextResponse

NOTES = []


@hookimpl
def dashboard_pages(app, register):
    def stock(request, view):
        if view.form is not None:
            NOTES.append(view.form["note"])
        return (
            f"<h1>Stock</h1><p id='operator'>{html.escape(view.operator)}</p>"
            f"<form method='post'>{view.csrf_field}<input name='note'></form>"
            f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in NOTES)}</ul>"
        )

    async def export(request, view):
        return PlainTextResponse("flavor,count\\nvanilla,3\\n")

    def broken(request, view):
        raise RuntimeError("the stock service is down")

    register(
        "/stock", stock, title="Flavor <stock>", menu="Stock <&> more", methods=["GET", "POST"]
    )
    register("/stock/export", export, title="Export")
    register("/stock/broken", broken, title="Broken")
    register("/agents", stock, title="Not ours", menu="Agents again")
    register("/agents/{id:int}", stock, title="Not ours either")
    register("/login-help", stock, title="Would be public")
    register("/ingress/stock", stock, title="Would be public")
    register("/stock", stock, title="Twice")
    register("/stock/delete", stock, title="Delete", methods=["DELETE"])
    register("/stock/..", stock, title="Up")
"""


@pytest.fixture
def app(plugin_site):
    plugin_site.add("acme-stock", STOCK_PLUGIN)
    return plugin_site.app()


def test_a_signed_in_operator_sees_the_page_in_the_layout_and_its_menu_entry(signed_in):
    page = signed_in.get("/stock")
    assert page.status_code == 200
    assert "<h1>Stock</h1>" in page.text
    assert "<p id='operator'>mara</p>" in page.text
    # The dashboard's layout around it, title and menu label escaped.
    assert "<title>Flavor &lt;stock&gt; · protege</title>" in page.text
    assert '<a href="/stock" class="plugin-page">Stock &lt;&amp;&gt; more</a>' in page.text
    # And on the dashboard's own pages too.
    assert "Stock &lt;&amp;&gt; more</a>" in signed_in.get("/agents").text


def test_an_anonymous_visitor_is_sent_to_the_login_and_the_page_never_runs(
    client, operator, sign_in
):
    for path in ("/stock", "/stock/export", "/stock/broken"):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/login?next={path}"
    posted = client.post("/stock", data={"note": "anonymous"}, follow_redirects=False)
    assert posted.status_code == 303
    assert posted.headers["location"].startswith("/login")
    assert sign_in(client).status_code == 303
    page = client.get("/stock")
    assert "<h1>Stock</h1>" in page.text
    assert "anonymous" not in page.text


def test_a_post_without_the_sessions_csrf_token_is_refused(signed_in, token_of):
    for data in ({"note": "forged"}, {"note": "forged", "csrf_token": "not-the-token"}):
        assert signed_in.post("/stock", data=data).status_code == 403
    assert "forged" not in signed_in.get("/stock").text
    token = token_of(signed_in.get("/stock").text)
    taken = signed_in.post("/stock", data={"note": "vanilla low", "csrf_token": token})
    assert taken.status_code == 200
    assert "<li>vanilla low</li>" in taken.text


def test_a_page_may_answer_with_its_own_response(signed_in):
    answer = signed_in.get("/stock/export")
    assert (answer.status_code, answer.text) == (200, "flavor,count\nvanilla,3\n")
    # Still the dashboard's headers on it.
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


def test_a_page_that_raises_answers_an_error_page_and_the_dashboard_goes_on(signed_in, caplog):
    with caplog.at_level(logging.ERROR):
        answer = signed_in.get("/stock/broken")
    assert answer.status_code == 500
    assert "acme-stock" in answer.text
    assert "the stock service is down" in caplog.text
    assert "the stock service is down" not in answer.text
    assert signed_in.get("/stock").status_code == 200


def test_a_page_in_place_of_a_builtin_or_public_one_is_refused_and_reported(
    app, signed_in, scoop, caplog
):
    refused = "\n".join(app.state.refused_extensions)
    assert "'/agents' from acme-stock is left out: the dashboard answers /agents" in refused
    assert "'/agents/{id:int}' from acme-stock is left out" in refused
    assert "'/login-help' from acme-stock is left out: the dashboard answers that path" in (refused)
    assert "'/ingress/stock' from acme-stock is left out" in refused
    assert "'/stock' from acme-stock is left out: acme-stock registered /stock first" in refused
    assert "'/stock/delete' from acme-stock is left out: it may answer GET and POST only" in (
        refused
    )
    assert "'/stock/..' from acme-stock is left out: its path is not a path" in refused
    # The dashboard's own pages answer as before.
    agents = signed_in.get("/agents")
    assert "<h1>Stock</h1>" not in agents.text
    assert "Agents again" not in agents.text
    assert "<h1>Stock</h1>" not in signed_in.get(f"/agents/{scoop.id}").text
    assert signed_in.get("/login-help", follow_redirects=False).status_code == 404


def test_the_clashes_are_in_the_log(plugin_site, caplog):
    plugin_site.add("acme-stock", STOCK_PLUGIN)
    with caplog.at_level(logging.WARNING):
        plugin_site.app()
    assert "the page '/agents' from acme-stock is left out" in caplog.text


def test_pages_get_the_installation(plugin_site, operator, sign_in):
    plugin_site.add(
        "acme-agents",
        """
        import html
        from protege import hookimpl
        from protege.models import Agent

        @hookimpl
        def dashboard_pages(app, register):
            def agents(request, view):
                assert view.app is app
                names = sorted(a.name for a in Agent.select())
                return "<p id='names'>" + html.escape(", ".join(names)) + "</p>"

            register("/acme/agents", agents, title="Agents by Acme", menu="Acme")
        """,
    )
    Agent.create(name="Sundae", address="sundae@thescoop.example")
    with TestClient(plugin_site.app(), base_url="http://127.0.0.1") as client:
        assert sign_in(client).status_code == 303
        assert "<p id='names'>Sundae</p>" in client.get("/acme/agents").text


def test_a_raising_dashboard_pages_leaves_the_dashboard_serving(plugin_site, operator, sign_in):
    plugin_site.add(
        "broken-pages",
        """
        from protege import hookimpl

        @hookimpl
        def dashboard_pages(app, register):
            raise RuntimeError("no pages today")
        """,
    )
    with TestClient(plugin_site.app(), base_url="http://127.0.0.1") as client:
        assert sign_in(client).status_code == 303
        assert client.get("/agents").status_code == 200


def pages_plugin(title, *, fail=False):
    return (
        "from protege import hookimpl\n\n"
        "@hookimpl(tryfirst=True)\n"
        "def dashboard_pages(app, register):\n"
        f"    register('/report', lambda request, view: 'x', title={title!r}, menu={title!r})\n"
        + ("    raise RuntimeError('then it broke')\n" if fail else "")
    )


def test_a_contested_path_goes_to_the_first_plugin_by_distribution_name(plugin_site):
    # zz-reports is called first (tryfirst, and pluggy calls later registrations first).
    plugin_site.add("aa-reports", pages_plugin("From aa").replace("(tryfirst=True)", ""))
    plugin_site.add("zz-reports", pages_plugin("From zz"))
    app = plugin_site.app()
    assert [entry.label for entry in app.state.menu] == ["From aa"]
    assert any(
        "the page '/report' from zz-reports is left out" in line
        for line in app.state.refused_extensions
    )


def test_a_raising_dashboard_pages_has_none_of_its_pages_served(plugin_site):
    plugin_site.add("half-reports", pages_plugin("Half", fail=True))
    app = plugin_site.app()
    assert [entry.label for entry in app.state.menu] == []
    assert any("its hook raised" in line for line in app.state.refused_extensions)
