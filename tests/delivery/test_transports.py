"""A plugin's transport, registered through ``register_transports`` and chosen by
``[mail] transport``: it gets the exact bytes and the envelope, and what it reports for each
recipient is what the delivery loop records and retries."""

import asyncio
import datetime
import json
from concurrent.futures import ThreadPoolExecutor

import attrs
import pytest

from protege import blobs
from protege.config import load_config
from protege.delivery import DeliveryLoop, send_pending
from protege.gateway.outbound import queue_mail
from protege.installation import open_installation
from protege.models import Agent, Message
from protege.models.base import utcnow

# A real plugin: it releases each mail into the loft its settings name (the bytes and the
# envelope, one pair of files per attempt) and answers for each recipient by its local part.
PIGEON = """
import json
import pathlib

from protege import MailRefused, Outcome, Transport, hookimpl


class PigeonTransport(Transport):
    def __init__(self, config):
        super().__init__(config)
        self.loft = pathlib.Path(config.plugin_settings("protege-pigeon")["loft"])

    def send(self, message, envelope):
        attempt = len(list(self.loft.glob("*.eml")))
        (self.loft / f"{attempt}.eml").write_bytes(message)
        (self.loft / f"{attempt}.json").write_text(json.dumps({
            "sender": envelope.sender,
            "recipients": list(envelope.recipients),
            "smtputf8": envelope.smtputf8,
            "message_id": envelope.message_id,
            "attempt": envelope.attempt,
        }))
        for address in envelope.recipients:
            local = address.split("@")[0]
            if local == "boom":
                raise RuntimeError("the pigeon flew off")
            if local == "exit":
                raise SystemExit("the pigeon keeper quit")
            if local == "closed":
                raise MailRefused("the loft is closed for good")
            if local == "later" and envelope.attempt == 1:
                yield Outcome.deferred(address, "the loft is full")
            elif local == "never":
                yield Outcome.refused(address, "no such loft", code=550)
            else:
                yield Outcome.delivered(address)


@hookimpl
def plugin_settings():
    return {"type": "object", "required": ["loft"], "properties": {"loft": {"type": "string"}}}


@hookimpl
def register_transports(register):
    register("pigeon", PigeonTransport)
"""


@pytest.fixture
def loft(tmp_path):
    folder = tmp_path / "loft"
    folder.mkdir()
    return folder


@pytest.fixture
def app(protege_db, site, tmp_path, loft):
    site.add("protege-pigeon", PIGEON)
    config = load_config(tmp_path)
    config = attrs.evolve(
        config,
        mail=attrs.evolve(config.mail, transport="pigeon", smtp_backoff_seconds=600),
        plugins={"protege-pigeon": {"loft": str(loft)}},
    )
    return open_installation(config, plugins=site.host(), connect=False)


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


def queue(app, agent, *to):
    outcome = queue_mail(
        agent=agent, run=None, config=app.config, mail={"to": list(to), "body": "Hi"}
    )
    return Message.get(Message.message_id == outcome["message_id"])


def released(loft, attempt):
    return (loft / f"{attempt}.eml").read_bytes(), json.loads(
        (loft / f"{attempt}.json").read_text()
    )


def later(hours):
    return lambda: utcnow() + datetime.timedelta(hours=hours)


def test_the_transport_gets_the_exact_bytes_and_envelope_and_each_outcome_is_recorded(
    app, sundae, loft
):
    mail = queue(app, sundae, "jane@acme.com", "later@acme.com", "never@acme.com")
    (tried,) = send_pending(app.config, transport=app.transport)
    data, envelope = released(loft, 0)
    assert data == blobs.read(mail.raw_blob, app.config)
    assert envelope == {
        "sender": "sundae@thescoop.example",
        "recipients": ["jane@acme.com", "later@acme.com", "never@acme.com"],
        "smtputf8": False,
        "message_id": mail.message_id,
        "attempt": 1,
    }
    assert (tried.status, tried.delivery_attempts) == ("pending", 1)
    assert tried.pending_recipients == ["later@acme.com"]
    assert tried.refused_recipients == [
        {"address": "never@acme.com", "code": 550, "reason": "no such loft"}
    ]
    assert tried.delivery_error == "deferred: later@acme.com (the loft is full)"
    # Not before the backoff; after it, only the deferred recipient, with the same bytes.
    assert send_pending(app.config, transport=app.transport) == []
    (sent,) = send_pending(app.config, transport=app.transport, clock=later(1))
    again, envelope = released(loft, 1)
    assert again == data
    assert (envelope["recipients"], envelope["attempt"]) == (["later@acme.com"], 2)
    assert (sent.status, sent.pending_recipients, sent.delivery_attempts) == ("sent", [], 2)
    assert [r["address"] for r in sent.refused_recipients] == ["never@acme.com"]


def test_an_address_outside_ascii_asks_for_smtputf8(app, sundae, loft):
    queue(app, sundae, "jürgen@acme.com")
    send_pending(app.config, transport=app.transport)
    assert released(loft, 0)[1]["smtputf8"] is True


def test_a_raising_transport_fails_that_attempt_and_the_loop_sends_the_rest(app, sundae, loft):
    failing = queue(app, sundae, "boom@acme.com")
    fine = queue(app, sundae, "jane@acme.com")

    async def serve():
        with ThreadPoolExecutor(2) as pool:
            loop = DeliveryLoop(app.config, pool, poll_interval=60, transport=app.transport)
            running = asyncio.create_task(loop.run())
            loop.stop()  # the last pass still sends what is due
            await running
            return loop.sent

    assert asyncio.run(serve()) == 1
    assert Message.get_by_id(fine.id).status == "sent"
    waiting = Message.get_by_id(failing.id)
    assert (waiting.status, waiting.delivery_attempts) == ("pending", 1)
    assert waiting.delivery_error == "deferred: RuntimeError: the pigeon flew off"
    for hour in range(1, 10):  # tried again after each backoff, until the retries run out
        send_pending(app.config, transport=app.transport, clock=later(hour))
    given_up = Message.get_by_id(failing.id)
    assert (given_up.status, given_up.delivery_attempts) == ("failed", 4)
    assert given_up.delivery_error == (
        "gave up after 4 attempts: RuntimeError: the pigeon flew off"
    )


def test_mail_refused_as_a_whole_fails_at_once_for_everyone_waiting(app, sundae):
    mail = queue(app, sundae, "closed@acme.com", "jane@acme.com")
    (tried,) = send_pending(app.config, transport=app.transport)
    assert (tried.id, tried.status, tried.delivery_attempts) == (mail.id, "failed", 1)
    assert tried.delivery_error == "the loft is closed for good"
    assert tried.refused_recipients == [
        {"address": a, "code": 0, "reason": "the loft is closed for good"}
        for a in ("closed@acme.com", "jane@acme.com")
    ]


def test_an_outcome_for_an_address_in_another_case_counts_for_that_recipient():
    from protege.delivery.transports import handover_of
    from protege.transports import Outcome

    handover = handover_of(
        [Outcome.delivered("Kid@Gmail.Example"), Outcome.delivered("stranger@elsewhere.example")],
        ["kid@gmail.example", "mum@gmail.example"],
        transport=object(),
    )
    assert handover.delivered == ("kid@gmail.example",)  # not sent again on the next attempt
    assert [r.address for r in handover.deferred] == ["mum@gmail.example"]


def test_a_transport_raising_system_exit_fails_that_attempt_and_the_loop_goes_on(app, sundae, loft):
    quitting = queue(app, sundae, "exit@acme.com")
    fine = queue(app, sundae, "jane@acme.com")
    send_pending(app.config, transport=app.transport)
    assert Message.get_by_id(fine.id).status == "sent"
    waiting = Message.get_by_id(quitting.id)
    assert (waiting.status, waiting.delivery_attempts) == ("pending", 1)
    assert "SystemExit: the pigeon keeper quit" in waiting.delivery_error


STUCK = """
import threading

from protege import Outcome, Transport, hookimpl

GATE = threading.Event()
ENTERED = threading.Event()


class StuckTransport(Transport):
    def send(self, message, envelope):
        ENTERED.set()
        GATE.wait(120)  # a connection that never answers, until the test lets it go
        return [Outcome.delivered(address) for address in envelope.recipients]


@hookimpl
def register_transports(register):
    register("stuck", StuckTransport)
"""


def test_a_transport_that_hangs_lets_its_claim_go_after_max_handoff_seconds(
    protege_db, site, tmp_path, sundae, caplog
):
    import importlib
    import threading

    site.add("protege-stuck", STUCK)
    config = load_config(tmp_path)
    config = attrs.evolve(
        config,
        mail=attrs.evolve(config.mail, transport="stuck", max_handoff_seconds=60),
        runs=attrs.evolve(config.runs, lease_seconds=1),
    )
    app = open_installation(config, plugins=site.host(), connect=False)
    stuck = importlib.import_module("protege_stuck")
    mail = queue(app, sundae, "jane@acme.com")
    hours = iter(range(10_000))

    def clock():  # an hour passes at each look: the first renewal finds the limit passed
        return utcnow() + datetime.timedelta(hours=next(hours))

    sending = threading.Thread(
        target=send_pending, args=(app.config,), kwargs={"transport": app.transport, "clock": clock}
    )
    sending.start()
    try:
        assert stuck.ENTERED.wait(60)

        name = f"protege-delivery-lease-{mail.id}"
        renewals = [t for t in threading.enumerate() if t.name == name]
        for renewal in renewals:  # ends on its own while send() still hangs
            renewal.join(60)
            assert not renewal.is_alive()
        assert not stuck.GATE.is_set()
        assert any("longer than max_handoff_seconds" in r.message for r in caplog.records)
    finally:
        stuck.GATE.set()
        sending.join(60)
    assert not sending.is_alive()
