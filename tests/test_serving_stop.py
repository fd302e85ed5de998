"""Stopping a server while mail is being stored: the mail is stored and its sender answered
before the server says it stopped, so nothing lands after the host closes the installation;
and the installation refuses to close while a server of it runs."""

import asyncio

import pytest

from protege.installation import InstallationClosed, InstallationServing
from protege.models import Agent, Message
from protege.serving import serve
from tests.gateway.test_smtp_stop import Sender, SlowInspector
from tests.looping import protege_threads


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


@pytest.fixture
def inspector(protege_app):
    slow = SlowInspector()
    protege_app.plugins.add(slow, "slow-inspector")
    yield slow
    slow.release.set()  # a failing test leaves no thread waiting


def test_leaving_the_block_with_a_mail_being_stored_stores_it_and_answers_its_sender(
    protege_app, sundae, inspector
):
    async def host():
        async with serve(protege_app, host="127.0.0.1", port=0, scheduler=False) as server:
            sender = Sender(server.smtp_address)
            assert await asyncio.to_thread(inspector.asked.wait, 60)
            # Let go on the loop's next turn: once leaving the block has begun to stop it.
            asyncio.get_running_loop().call_soon(inspector.release.set)
        when_stopped = [m.subject for m in Message.select()]
        protege_app.close()  # what the host does next: nothing of the server lands after it
        return when_stopped, await sender.done()

    assert asyncio.run(host()) == (["Melted"], ["stored"])
    assert protege_threads() == []


def test_closing_an_installation_while_it_is_served_is_refused(protege_app):
    async def host():
        async with serve(protege_app, gateway=False, scheduler=False) as server:
            with pytest.raises(InstallationServing, match="stop its server"):
                protege_app.close()
            return server.running, protege_app.closed

    assert asyncio.run(host()) == (True, False)
    protege_app.close()  # once the server stopped, it closes
    assert protege_app.closed


def test_a_closed_installation_is_not_served(protege_app):
    protege_app.close()

    async def host():
        async with serve(protege_app, host="127.0.0.1", port=0):
            raise AssertionError("a closed installation was served")

    with pytest.raises(InstallationClosed):
        asyncio.run(host())
    assert protege_threads() == []
