"""Nobody sees a page without signing in; no form is taken without its CSRF token."""

from __future__ import annotations

import pytest

from protege.models import Agent, AgentToolkit, Responsibility, Toolkit
from protege.testing import with_plugin_settings
from protege_dashboard.app import create_app
from protege_dashboard.operators import remove_operator
from protege_dashboard.settings import DashboardSettings, read_settings

PAGES = [
    "/",
    "/tools",
    "/toolkits",
    "/toolkits/new",
    "/toolkits/{toolkit}/edit",
    "/agents",
    "/agents/{agent}",
    "/agents/{agent}/grants/{grant}",
    "/runs",
    "/runs/1",
    "/messages/1",
    "/files/1",
    "/responsibilities",
    "/responsibilities/{duty}/edit",
    "/audit",
]
PASSWORD = "correct horse battery"  # mara's, as the operator fixture makes her
FORMS = [
    "/logout",
    "/toolkits/new",
    "/toolkits/{toolkit}/edit",
    "/toolkits/{toolkit}/delete",
    "/agents",
    "/agents/{agent}/attach",
    "/agents/{agent}/explain",
    "/agents/{agent}/access-rules",
    "/agents/{agent}/access-rules/1/remove",
    "/agents/{agent}/grants/{grant}/detach",
    "/agents/{agent}/grants/{grant}/rules",
    "/agents/{agent}/grants/{grant}/rules/1/remove",
    "/agents/{agent}/grants/{grant}/scheduled",
    "/agents/{agent}/grants/{grant}/archive",
    "/responsibilities/{duty}/edit",
    "/responsibilities/{duty}/enable",
    "/responsibilities/{duty}/run",
]


@pytest.fixture
def ids(scoop):
    grant = AgentToolkit.get()
    duty = Responsibility.create(agent=scoop, name="Stock report", prompt="Count the tubs.")
    return {"agent": scoop.id, "toolkit": grant.toolkit_id, "grant": grant.id, "duty": duty.id}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_sends_a_stranger_to_the_login(client, ids, page):
    answer = client.get(page.format(**ids), follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/login?next=")


@pytest.mark.parametrize("form", FORMS)
def test_a_stranger_posting_a_form_changes_nothing(client, ids, form):
    before = (Toolkit.select().count(), AgentToolkit.select().count(), Agent.select().count())
    answer = client.post(form.format(**ids), data={"name": "X"}, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login?next=/"
    assert (Toolkit.select().count(), AgentToolkit.select().count(), Agent.select().count()) == (
        before
    )


@pytest.mark.parametrize("form", FORMS)
def test_a_form_without_its_csrf_token_is_refused(signed_in, ids, form):
    fields = {"name": "Kitchen", "kind": "allow", "pattern": "*@x.com", "toolkit": ids["toolkit"]}
    before = Toolkit.select().count(), [g.id for g in AgentToolkit.select()]
    answer = signed_in.post(form.format(**ids), data=fields, follow_redirects=False)
    assert answer.status_code == 403
    assert "CSRF" in answer.text
    wrong = signed_in.post(
        form.format(**ids), data={**fields, "csrf_token": "forged"}, follow_redirects=False
    )
    assert wrong.status_code == 403
    assert (Toolkit.select().count(), [g.id for g in AgentToolkit.select()]) == before


def test_the_login_form_itself_needs_the_token(client, operator):
    answer = client.post("/login", data={"name": "mara", "password": PASSWORD})
    assert answer.status_code == 403


def test_a_wrong_password_is_refused_and_signs_nobody_in(client, operator, sign_in):
    assert sign_in(client, password="not the password").status_code == 401
    assert client.get("/agents", follow_redirects=False).status_code == 303


def test_logins_are_limited_per_name_and_address(client, operator, sign_in):
    for _ in range(5):
        assert sign_in(client, password="guess guess guess").status_code == 401
    blocked = sign_in(client)  # the right password, too late
    assert blocked.status_code == 429
    assert "too many failed attempts" in blocked.text
    assert client.get("/agents", follow_redirects=False).status_code == 303


def test_an_unknown_name_is_answered_like_a_wrong_password(client, operator, sign_in):
    answer = sign_in(client, name="nobody")
    assert answer.status_code == 401
    assert "wrong name or password" in answer.text


def test_the_session_cookie_is_signed_http_only_and_same_site(client, operator, sign_in):
    answer = sign_in(client)
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "secure" not in cookie.replace("samesite", "")
    value = client.cookies["protege_session"]
    client.cookies.set("protege_session", value[:-4] + "AAAA", domain="127.0.0.1")
    assert client.get("/agents", follow_redirects=False).status_code == 303


def test_cookies_are_https_only_when_configured(installation, operator, sign_in):
    from starlette.testclient import TestClient

    configured = with_plugin_settings(installation, "protege-dashboard", {"secure_cookies": True})
    app = create_app(configured, read_settings(configured), {})
    with TestClient(app, base_url="https://127.0.0.1") as client:
        answer = sign_in(client)
    assert "secure" in answer.headers["set-cookie"].lower().replace("samesite", "")


def test_removing_an_operator_ends_their_session(signed_in):
    assert signed_in.get("/agents").status_code == 200
    remove_operator("mara")
    assert signed_in.get("/agents", follow_redirects=False).status_code == 303


def test_logging_out_ends_the_session(signed_in, token_of):
    page = signed_in.get("/agents")
    signed_in.post("/logout", data={"csrf_token": token_of(page.text)})
    assert signed_in.get("/agents", follow_redirects=False).status_code == 303


def test_a_cookie_kept_from_before_logging_out_signs_nobody_in(signed_in, client, token_of):
    """Logging out ends the session on the server: a copy of the cookie (another tab's, or
    one stolen) is refused afterwards, not only the browser's own, which it forgets."""
    page = signed_in.get("/agents")
    kept = signed_in.cookies["protege_session"]
    signed_in.post("/logout", data={"csrf_token": token_of(page.text)})
    client.cookies.clear()
    client.cookies.set("protege_session", kept, domain="127.0.0.1")
    answer = client.get("/agents", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/login")


def test_signing_in_again_after_logging_out_works(signed_in, client, token_of, sign_in):
    page = signed_in.get("/agents")
    signed_in.post("/logout", data={"csrf_token": token_of(page.text)})
    assert sign_in(client).status_code == 303
    assert client.get("/agents", follow_redirects=False).status_code == 200


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example"])
def test_login_goes_on_only_to_a_page_of_this_site(client, operator, target, token_of):
    page = client.get("/login")
    answer = client.post(
        "/login",
        data={
            "csrf_token": token_of(page.text),
            "name": "mara",
            "password": PASSWORD,
            "next": target,
        },
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/"


def test_every_answer_forbids_scripts_framing_and_sniffing(client):
    answer = client.get("/login")
    policy = answer.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy
    assert "frame-ancestors 'none'" in policy
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_dashboard_listens_on_this_machine_only_by_default():
    settings = DashboardSettings()
    assert settings.host == "127.0.0.1"
    assert settings.secrets({}).get("relay") is None


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example"])
def test_a_request_for_another_host_name_is_refused(app, host):
    # A web page that rebinds its own name to 127.0.0.1 still sends its own name as Host.
    from starlette.testclient import TestClient

    with TestClient(app, base_url=f"http://{host}") as stranger:
        assert stranger.get("/login").status_code == 400


def test_allowed_hosts_follow_the_address_listened_on():
    assert "localhost" in DashboardSettings().hosts()
    assert DashboardSettings(host="0.0.0.0").hosts() == ["*"]
    named = DashboardSettings(host="0.0.0.0", allowed_hosts=("dash.example.com",))
    assert named.hosts() == ["dash.example.com"]


def test_a_burst_of_guesses_sent_at_once_meets_the_login_limit(app, client, operator):
    """Thirty wrong passwords sent together: the limit counts each before its slow hash
    is checked, so only the first five are even tried (it once checked first and counted
    after, and a burst got every guess tried)."""
    import asyncio
    import re

    import httpx

    page = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    cookies = dict(client.cookies)

    async def burst() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", cookies=cookies
        ) as guesser:
            form = {"csrf_token": token, "name": "mara", "password": "guess guess guess"}
            answers = await asyncio.gather(*[guesser.post("/login", data=form) for _ in range(30)])
        return sorted(answer.status_code for answer in answers)

    codes = asyncio.run(burst())
    assert codes == [401] * 5 + [429] * 25


def test_a_right_password_does_not_use_up_the_limit(client, operator, sign_in):
    for _ in range(8):
        assert sign_in(client).status_code == 303
        client.cookies.clear()


def test_head_requests_are_answered_like_gets(client, operator):
    assert client.head("/login").status_code == 200  # it was refused as a form without token
    assert client.head("/agents", follow_redirects=False).status_code == 303
