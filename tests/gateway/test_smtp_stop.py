"""Stopping the gateway on an event loop while a mail is being stored: no new connection is
taken, the mail is stored, its sender hears so (within the grace), and the gateway says it
stopped only once the storing is done, whatever became of the sender."""

import asyncio
import smtplib
import threading

import pytest

from protege import hookimpl
from protege.gateway.smtp import serve_gateway
from protege.models import Message
from tests.looping import TURNS, turns

from .conftest import make_mail


class SlowInspector:
    """An inspector holding each mail it is asked about until the test lets it go: the mail
    is being stored (inside its transaction) for as long as the test wants."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()

    @hookimpl
    def inspect_inbound(self, app, message):
        self.asked.set()
        assert self.release.wait(60), "the test never let the mail go"


@pytest.fixture
def inspector(protege_app):
    slow = SlowInspector()
    protege_app.plugins.add(slow, "slow-inspector")
    yield slow
    slow.release.set()  # a failing test leaves no thread waiting


class Sender:
    """An SMTP client sending one mail from a thread of its own; ``heard`` is how it went."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.heard: list[str] = []
        self.thread = threading.Thread(target=self._send, args=(address,))
        self.thread.start()

    def _send(self, address):
        try:
            with smtplib.SMTP(*address, timeout=60) as client:
                client.sendmail("jane@acme.com", ["sundae@thescoop.example"], make_mail())
            self.heard.append("stored")
        except (OSError, smtplib.SMTPException) as error:
            self.heard.append(type(error).__name__)

    async def done(self) -> list[str]:
        await asyncio.to_thread(self.thread.join, 60)
        assert not self.thread.is_alive(), "the client hung"
        return self.heard


def refused(address):
    try:
        with smtplib.SMTP(*address, timeout=30):
            return False
    except ConnectionRefusedError:
        return True


def stored():
    return [m.subject for m in Message.select().where(Message.direction == "inbound")]


async def stopping_while_storing(app, inspector, grace, then):
    """Start the gateway, send a mail, stop the gateway while the mail is being stored, and
    return what ``then(stopping, sender, address)`` does (the stop's task, not done yet, the
    sender, and where the gateway listened); the mail is let go whatever happens."""
    try:
        gateway = await serve_gateway(app.config, "127.0.0.1", 0, app=app)
        address = (gateway.hostname, gateway.port)
        sender = Sender(address)
        assert await asyncio.to_thread(inspector.asked.wait, 60)  # the mail is being stored
        stopping = asyncio.create_task(gateway.stop(grace))
        return await then(stopping, sender, address)
    finally:
        inspector.release.set()


def test_stop_has_the_mail_being_stored_stored_and_answered_before_it_returns(
    protege_app, sundae, inspector
):
    async def then(stopping, sender, address):
        await turns(TURNS)
        waited = not stopping.done()
        closed = await asyncio.to_thread(refused, address)
        inspector.release.set()
        await stopping
        return waited, closed, stored(), await sender.done()

    waited, closed, when_stopped, heard = asyncio.run(
        stopping_while_storing(protege_app, inspector, 60, then)
    )
    assert waited  # the gateway did not say it stopped with the mail in hand
    assert closed  # while it finished, it took no new connection
    assert when_stopped == ["Melted"]
    assert heard == ["stored"]  # its sender heard the 250


def test_past_the_grace_the_sender_is_cut_off_and_stop_still_waits_for_the_storing(
    protege_app, sundae, inspector
):
    async def then(stopping, sender, address):
        heard = await sender.done()  # no grace: its connection ends at once
        await turns(TURNS)
        waited = not stopping.done()
        inspector.release.set()
        await stopping
        return heard, waited, stored()

    heard, waited, when_stopped = asyncio.run(
        stopping_while_storing(protege_app, inspector, 0, then)
    )
    assert heard == ["SMTPServerDisconnected"]  # it sends again; the copy is told apart
    assert waited  # the storing thread cannot be stopped: the gateway waits for it
    assert when_stopped == ["Melted"]


def test_cancelling_the_stop_cuts_the_grace_short_but_not_the_storing(
    protege_app, sundae, inspector
):
    async def then(stopping, sender, address):
        await turns(TURNS)
        stopping.cancel()  # no hour of grace: the sender is cut off now
        heard = await sender.done()
        await turns(TURNS)
        waited = not stopping.done()
        inspector.release.set()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        return heard, waited, stored()

    heard, waited, when_stopped = asyncio.run(
        stopping_while_storing(protege_app, inspector, 3600, then)
    )
    assert heard == ["SMTPServerDisconnected"]
    assert waited
    assert when_stopped == ["Melted"]
