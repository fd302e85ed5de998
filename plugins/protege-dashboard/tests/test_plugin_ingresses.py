"""Ingresses plugins add through ``register_ingresses``: served at /ingress/NAME with the
hardened reading and the same ingest as the dashboard's own, never in their place."""

from __future__ import annotations

import json
import logging
import re
from email import policy
from email.message import EmailMessage
from pathlib import Path

import attrs
import pytest
from starlette.testclient import TestClient

from protege.models import Message, Run
from protege.plugins import PluginHost, Selection
from protege_dashboard.app import create_app
from protege_dashboard.settings import DashboardSettings

SUNDAE = "sundae@thescoop.example"
LIMIT = 8 * 1024
ACME = ("acme", "acme-secret-1")
ENVIRON = {
    "PROTEGE_RELAY_PASSWORD": "relay-secret-1",
    "PROTEGE_POSTMARK_PASSWORD": "postmark-secret-1",
    "ACME_MAIL_PASSWORD": ACME[1],
}

README = Path(__file__).parents[3] / "README.md"


def readme_block(name: str) -> str:
    """The README's Python block marked ``readme-test: NAME``."""
    pattern = rf"<!-- readme-test: {name} -->\n```python\n(.*?)```"
    match = re.search(pattern, README.read_text(), re.DOTALL)
    assert match, f"no readme-test block named {name}"
    return match.group(1)


# The README's example, as a plugin author would publish it.
ACME_PLUGIN = readme_block("ingress-plugin")

FAILING_PLUGIN = """
from protege import Ingress, hookimpl


class FailingIngress(Ingress):
    name = "failing"
    secret_env = "ACME_MAIL_PASSWORD"

    async def receive(self, request, intake):
        intake.check_password()
        raise RuntimeError("the provider changed its format")


@hookimpl
def register_ingresses(register):
    register(FailingIngress())
"""

SQUATTER_PLUGIN = """
from protege import Ingress, hookimpl


class PostmarkIngress(Ingress):
    name = "postmark"
    secret_env = "ACME_MAIL_PASSWORD"

    async def receive(self, request, intake):
        raise AssertionError("a plugin took the built-in postmark route")


class SecondAcme(Ingress):
    name = "acme"
    secret_env = "ACME_MAIL_PASSWORD"

    async def receive(self, request, intake):
        raise AssertionError("a later plugin took the acme route")


class Open(Ingress):
    name = "open"

    async def receive(self, request, intake):
        raise AssertionError("an ingress without a secret was served")


@hookimpl
def register_ingresses(register):
    register(PostmarkIngress())
    register(SecondAcme())
    register(Open())
"""


def mail(body="Where is my order?"):
    message = EmailMessage()
    message["From"] = "kid@gmail.example"
    message["To"] = SUNDAE
    message["Subject"] = "Order SCP-1042"
    message["Message-ID"] = "<order-1@gmail.example>"
    message.set_content(body)
    return message.as_bytes(policy=policy.SMTP).decode()


def limit_messages(plugin_site):
    """Give the site's installation a small message limit, so oversized mail is cheap."""
    config = plugin_site.installation.config
    small = attrs.evolve(config, mail=attrs.evolve(config.mail, max_message_bytes=LIMIT))
    plugin_site.installation = attrs.evolve(plugin_site.installation, config=small)


@pytest.fixture
def web(plugin_site, scoop):
    limit_messages(plugin_site)
    plugin_site.add("acme-mail", ACME_PLUGIN)
    plugin_site.add("acme-failing", FAILING_PLUGIN)
    with TestClient(plugin_site.app(environ=ENVIRON), base_url="http://127.0.0.1") as client:
        yield client


def acme(web, payload, auth=ACME):
    return web.post(
        "/ingress/acme",
        content=json.dumps(payload).encode(),
        auth=auth,
        headers={"Content-Type": "application/json"},
    )


def test_a_plugin_ingress_stores_the_mail_and_queues_its_run_as_the_relay_does(web):
    answer = acme(web, {"mime": mail(), "to": [SUNDAE]})
    assert answer.status_code == 204
    (message,) = Message.select()
    assert (message.sender, message.subject, message.status) == (
        "kid@gmail.example",
        "Order SCP-1042",
        "accepted",
    )
    assert Run.get(Run.message == message).status == "queued"


@pytest.mark.parametrize("auth", [None, ("acme", "wrong")])
def test_a_plugin_ingress_refuses_a_wrong_password_and_stores_nothing(web, auth):
    answer = acme(web, {"mime": mail(), "to": [SUNDAE]}, auth=auth)
    assert answer.status_code == 401
    assert Message.select().count() == 0


def test_a_plugin_ingress_reads_with_the_dashboards_caps(web):
    # Past the room a JSON body has for a message of the limit: refused before it is parsed.
    too_big = {"mime": "x" * (LIMIT * 2 + 1024 * 1024), "to": [SUNDAE]}
    assert acme(web, too_big).status_code == 413
    text = web.post(
        "/ingress/acme", content=b"{}", auth=ACME, headers={"Content-Type": "text/plain"}
    )
    assert text.status_code == 415
    assert Message.select().count() == 0


def test_a_plugin_ingress_checks_the_password_before_reading_the_body(web):
    too_big = {"mime": "x" * (LIMIT * 2 + 1024 * 1024), "to": [SUNDAE]}
    assert acme(web, too_big, auth=("acme", "wrong")).status_code == 401


def test_a_plugin_ingress_cannot_read_past_the_dashboards_cap(plugin_site, scoop):
    plugin_site.add(
        "greedy-mail",
        """
        from protege import Ingress, hookimpl

        class Greedy(Ingress):
            name = "greedy"
            secret_env = "ACME_MAIL_PASSWORD"

            async def receive(self, request, intake):
                intake.check_password()
                raw = await intake.read_body(limit=10**12)
                return await intake.deliver(raw, ["sundae@thescoop.example"])

        @hookimpl
        def register_ingresses(register):
            register(Greedy())
        """,
    )
    limit_messages(plugin_site)
    cap = LIMIT * 2 + 1024 * 1024
    with TestClient(plugin_site.app(environ=ENVIRON), base_url="http://127.0.0.1") as web:
        answer = web.post("/ingress/greedy", content=b"x" * (cap + 1), auth=ACME)
    # Refused by the read's cap, before ingest could refuse it as too large.
    assert (answer.status_code, answer.text) == (
        413,
        f"the body is over the limit of {cap} bytes\n",
    )
    assert Message.select().count() == 0


def test_a_plugin_ingress_answers_as_ingest_decides(web):
    assert acme(web, {"mime": mail(), "to": ["nobody@thescoop.example"]}).status_code == 422
    assert acme(web, {"mime": mail(), "to": []}).status_code == 422
    assert acme(web, {"nope": 1}).text == "no mime field\n"


def test_a_raising_plugin_ingress_answers_500_and_the_dashboard_goes_on(web, caplog):
    with caplog.at_level(logging.ERROR):
        answer = web.post("/ingress/failing", content=b"x", auth=ACME)
    assert answer.status_code == 500
    assert "the provider changed its format" in caplog.text
    assert acme(web, {"mime": mail(), "to": [SUNDAE]}).status_code == 204


def test_a_plugin_ingress_without_its_secret_set_is_closed(plugin_site, scoop):
    plugin_site.add("acme-mail", ACME_PLUGIN)
    environ = {k: v for k, v in ENVIRON.items() if k != "ACME_MAIL_PASSWORD"}
    with TestClient(plugin_site.app(environ=environ), base_url="http://127.0.0.1") as web:
        answer = acme(web, {"mime": mail(), "to": [SUNDAE]})
    assert answer.status_code == 404
    assert Message.select().count() == 0


def test_a_name_taken_keeps_its_first_ingress_and_the_clash_is_reported(plugin_site, scoop, caplog):
    plugin_site.add("acme-mail", ACME_PLUGIN)
    plugin_site.add("zz-squatter", SQUATTER_PLUGIN)
    with caplog.at_level(logging.WARNING):
        app = plugin_site.app(environ=ENVIRON)
    refused = "\n".join(app.state.refused_extensions)
    assert "postmark ingress from zz-squatter is left out" in refused
    assert "served by protege-dashboard's" in refused
    assert "acme ingress from zz-squatter is left out" in refused
    assert "served by acme-mail's" in refused
    assert "from zz-squatter is left out: it names no secret_env" in refused
    assert "zz-squatter is left out" in caplog.text
    with TestClient(app, base_url="http://127.0.0.1") as web:
        # The built-in Postmark still answers: its password, its checks.
        wrong = web.post("/ingress/postmark", content=b"{}", auth=("postmark", "nope"))
        assert wrong.status_code == 401
        assert acme(web, {"mime": mail(), "to": [SUNDAE]}).status_code == 204
        assert web.post("/ingress/open", content=b"x").status_code == 404


def test_the_dashboards_own_ingresses_are_served_without_it_among_the_plugins(installation, scoop):
    bare = attrs.evolve(installation, plugins=PluginHost((), Selection()))
    app = create_app(bare, DashboardSettings(), ENVIRON)
    assert [i.name for i in app.state.ingresses] == ["relay", "postmark", "sendgrid", "mailgun"]


def test_a_raising_register_ingresses_leaves_the_dashboards_own_served(plugin_site, scoop):
    plugin_site.add(
        "broken-mail",
        """
        from protege import hookimpl

        @hookimpl(tryfirst=True)
        def register_ingresses(register):
            raise RuntimeError("no ingresses today")
        """,
    )
    limit_messages(plugin_site)
    with TestClient(plugin_site.app(environ=ENVIRON), base_url="http://127.0.0.1") as web:
        answer = web.post(
            "/ingress/relay",
            content=mail().encode(),
            auth=("protege", ENVIRON["PROTEGE_RELAY_PASSWORD"]),
            headers={"Content-Type": "message/rfc822", "Protege-Envelope-To": SUNDAE},
        )
    assert answer.status_code == 204
    assert Message.select().count() == 1


def test_an_ingress_claiming_the_dashboards_module_does_not_pass_for_its_own(plugin_site, scoop):
    # Ownership is whose hook implementation registered it, never what a class says of itself.
    plugin_site.add(
        "zzz-spoof",
        SQUATTER_PLUGIN.replace(
            'class PostmarkIngress(Ingress):\n    name = "postmark"',
            'class PostmarkIngress(Ingress):\n    __module__ = "protege_dashboard.ingress"\n'
            '    name = "postmark"',
        ),
    )
    app = plugin_site.app(environ=ENVIRON)
    assert "postmark ingress from zzz-spoof is left out" in "\n".join(app.state.refused_extensions)
    with TestClient(app, base_url="http://127.0.0.1") as web:
        wrong = web.post("/ingress/postmark", content=b"{}", auth=("postmark", "nope"))
    assert wrong.status_code == 401  # the built-in's password check, not the squatter's code


def test_what_a_raising_register_ingresses_registered_first_is_withdrawn(plugin_site, scoop):
    assert "    register(AcmeIngress())\n" in ACME_PLUGIN
    plugin_site.add(
        "half-mail",
        ACME_PLUGIN.replace(
            "    register(AcmeIngress())\n",
            "    register(AcmeIngress())\n    raise RuntimeError('then it broke')\n",
        ),
    )
    app = plugin_site.app(environ=ENVIRON)
    assert "acme" not in [ingress.name for ingress in app.state.ingresses]
    with TestClient(app, base_url="http://127.0.0.1") as web:
        assert acme(web, {"mime": mail(), "to": [SUNDAE]}).status_code == 404


EMPTY_PASSWORD_PLUGIN = """
from protege import Ingress, hookimpl


class Careless(Ingress):
    name = "careless"
    secret_env = "ACME_MAIL_PASSWORD"

    async def receive(self, request, intake):
        intake.check_password(password="")  # a setting left empty, say
        raise AssertionError("a request with no password was let in")


@hookimpl
def register_ingresses(register):
    register(Careless())
"""


def test_an_empty_password_lets_no_request_in(plugin_site, scoop):
    plugin_site.add("careless-mail", EMPTY_PASSWORD_PLUGIN)
    with TestClient(plugin_site.app(environ=ENVIRON), base_url="http://127.0.0.1") as web:
        assert web.post("/ingress/careless", content=b"x").status_code == 401
        assert web.post("/ingress/careless", content=b"x", auth=("a", "")).status_code == 401
