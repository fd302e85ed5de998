"""The delivery loop: pending mail goes to the transport apart from its run, survives a
crash with its Message-ID and bytes, goes to the outbox exactly once, and is retried with
backoff when a relay defers it."""

import asyncio
import datetime
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import attrs
import pytest
from aiosmtpd.controller import Controller

from protege import blobs
from protege.config import load_config
from protege.delivery import DeliveryLoop, claim_due, hand_off, send_pending
from protege.gateway import outbound
from protege.gateway.smtp import free_port
from protege.models import Agent, Message
from protege.models.base import utcnow
from tests.conftest import sql_run
from tests.looping import TURNS, ends, turns, until

T0 = utcnow() + datetime.timedelta(days=1)  # after every mail the tests queue


def at(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.fixture
def config(tmp_path, protege_db):
    return load_config(tmp_path)


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address="sundae@thescoop.example")


def queue_mail(agent, config, to="jane@acme.com"):
    mail = {"to": [to], "body": "Hello."}
    outcome = outbound.queue_mail(agent=agent, run=None, config=config, mail=mail)
    assert outcome["status"] == "queued"
    return Message.get(Message.message_id == outcome["message_id"])


def outbox(config):
    return sorted((config.data_dir / "outbox").glob("*.eml"))


def test_queued_mail_waits_for_the_delivery_loop_and_goes_out_as_stored(sundae, config):
    mail = queue_mail(sundae, config)
    assert outbox(config) == []
    (sent,) = send_pending(config)
    assert (sent.id, sent.status, sent.delivery_attempts) == (mail.id, "sent", 1)
    (path,) = outbox(config)
    assert path.read_bytes() == blobs.read(mail.raw_blob, config)  # the bytes stored at queueing


def test_a_hand_off_reads_the_mail_and_its_bytes_in_one_query_and_writes_once(sundae, config):
    mail = queue_mail(sundae, config)
    (claimed,) = claim_due(config, utcnow(), 10)
    with sql_run() as statements:
        sent = hand_off(claimed, config)
    assert sent.status == "sent"
    assert outbox(config)[0].read_bytes() == blobs.read(mail.raw_blob, config)
    assert [sql.split()[0] for sql in statements] == ["SELECT", "UPDATE"]


def test_mail_handed_off_before_a_crash_reaches_the_outbox_once(sundae, config):
    mail = queue_mail(sundae, config)
    send_pending(config)
    # The process died after the transport took it and before "sent" was committed: the
    # row is as it was when the hand-off began.
    Message.update(
        status="pending",
        delivery_attempts=0,
        next_attempt_at=mail.next_attempt_at,
        pending_recipients=mail.pending_recipients,
        delivery_lease_expires_at=None,
    ).where(Message.id == mail.id).execute()
    (again,) = send_pending(config)
    assert again.status == "sent"
    assert len(outbox(config)) == 1


def test_pending_mail_is_sent_by_another_process_with_its_message_id(sundae, config, tmp_path):
    mail = queue_mail(sundae, config)
    elsewhere = load_config(tmp_path)  # a fresh start: nothing shared but the database
    (sent,) = send_pending(elsewhere)
    (path,) = outbox(elsewhere)
    assert f"Message-ID: {mail.message_id}".encode() in path.read_bytes()
    assert sent.message_id == mail.message_id


def test_a_mail_held_by_one_delivery_loop_is_not_taken_by_another_until_its_lease_ends(
    sundae, config
):
    mail = queue_mail(sundae, config)
    assert claim_due(config, utcnow(), 10) == [mail.id]
    assert claim_due(config, utcnow(), 10) == []
    much_later = utcnow() + datetime.timedelta(hours=1)
    assert claim_due(config, much_later, 10) == [mail.id]  # that loop died: taken over


def test_a_mail_that_cannot_be_handed_off_stays_pending_and_the_rest_go(sundae, config):
    broken = queue_mail(sundae, config, to="broken@acme.com")
    fine = queue_mail(sundae, config, to="fine@acme.com")
    blobs.blob_store_for(config).delete(broken.raw_blob.sha256)  # gone: the hand-off raises
    sent = send_pending(config)
    assert [m.id for m in sent] == [fine.id]
    waiting = Message.get_by_id(broken.id)
    assert (waiting.status, waiting.delivery_attempts) == ("pending", 1)
    for hour in range(1, 10):  # each try after the backoff counts, until the retries run out
        send_pending(config, clock=lambda hour=hour: utcnow() + datetime.timedelta(hours=hour))
    given_up = Message.get_by_id(broken.id)
    assert (given_up.status, given_up.delivery_attempts) == ("failed", 4)
    assert given_up.delivery_error.startswith("gave up after 4 attempts: BlobMissingError")


class Deferring:
    """A relay that answers 451 to a recipient a given number of times, then takes it."""

    def __init__(self, busy_times):
        self.busy = busy_times
        self.received = []

    async def handle_RCPT(self, server, session, envelope, address, options):
        if self.busy > 0:
            self.busy -= 1
            return "451 4.2.1 mailbox busy, try later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.received.append(envelope)
        return "250 OK"


@pytest.fixture
def deferring_relay():
    started = []

    def start(busy_times):
        relay = Deferring(busy_times)
        controller = Controller(relay, hostname="127.0.0.1", port=free_port())
        controller.start()
        started.append(controller)
        return relay, controller.port

    yield start
    for controller in started:
        controller.stop()


def by_smtp(config, port, **mail):
    settings = {"transport": "smtp", "smtp_port": port, "smtp_starttls": False, **mail}
    return attrs.evolve(config, mail=attrs.evolve(config.mail, **settings))


def test_a_deferred_recipient_is_tried_again_after_the_backoff_not_before(
    sundae, config, deferring_relay
):
    relay, port = deferring_relay(busy_times=1)
    smtp = by_smtp(config, port, smtp_backoff_seconds=60, smtp_retries=3)
    mail = queue_mail(sundae, smtp)
    (first,) = send_pending(smtp, clock=lambda: at(0))
    assert (first.status, first.delivery_attempts, first.pending_recipients) == (
        "pending",
        1,
        ["jane@acme.com"],
    )
    assert first.next_attempt_at == at(60)
    assert send_pending(smtp, clock=lambda: at(59)) == []  # not due yet
    (second,) = send_pending(smtp, clock=lambda: at(60))
    assert (second.id, second.status, second.delivery_attempts) == (mail.id, "sent", 2)
    (envelope,) = relay.received
    assert envelope.rcpt_tos == ["jane@acme.com"]


def test_a_recipient_deferred_past_the_retries_is_reported_and_the_mail_failed(
    sundae, config, deferring_relay
):
    _, port = deferring_relay(busy_times=10)
    smtp = by_smtp(config, port, smtp_backoff_seconds=1, smtp_retries=1)
    queue_mail(sundae, smtp)
    send_pending(smtp, clock=lambda: at(0))
    (last,) = send_pending(smtp, clock=lambda: at(10))
    assert (last.status, last.delivery_attempts) == ("failed", 2)
    assert last.delivery_error == (
        "gave up after 2 attempts: SMTP 451: 4.2.1 mailbox busy, try later"
    )
    assert [r["address"] for r in last.refused_recipients] == ["jane@acme.com"]


def test_the_delivery_loop_sends_what_is_pending_and_a_last_pass_on_stop(sundae, config):
    queue_mail(sundae, config)

    async def serve():
        with ThreadPoolExecutor(2) as pool:
            loop = DeliveryLoop(config, pool, poll_interval=60)
            running = asyncio.create_task(loop.run())
            loop.stop()  # before it even looked: the last pass still sends
            await running
            return loop.sent

    assert asyncio.run(serve()) == 1
    assert len(outbox(config)) == 1


class AcceptsThenQuitsBadly:
    """A relay that takes the mail (250 after DATA), then answers QUIT with an error."""

    def __init__(self, quit_answer):
        self.quit_answer = quit_answer
        self.received = []

    async def handle_DATA(self, server, session, envelope):
        self.received.append(envelope)
        return "250 OK: queued as 1"

    async def handle_QUIT(self, server, session, envelope):
        return self.quit_answer


@pytest.mark.parametrize("quit_answer", ["421 4.4.2 closing", "500 5.5.1 what"])
def test_mail_the_relay_took_is_sent_once_whatever_quit_answers(sundae, config, quit_answer):
    relay = AcceptsThenQuitsBadly(quit_answer)
    controller = Controller(relay, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        smtp = by_smtp(config, controller.port, smtp_backoff_seconds=0, smtp_retries=3)
        queue_mail(sundae, smtp)
        (mail,) = send_pending(smtp)
        assert send_pending(smtp) == []
    finally:
        controller.stop()
    assert (mail.status, len(relay.received)) == ("sent", 1)


class ReclaimedWhileSending:
    """A relay so slow that another delivery loop claims the mail while it answers."""

    def __init__(self, config):
        self.config = config
        self.received = []

    async def handle_DATA(self, server, session, envelope):
        self.received.append(envelope)
        later = utcnow() + datetime.timedelta(hours=1)
        await asyncio.to_thread(claim_due, self.config, later, 10)  # the other loop
        return "250 OK"


def test_a_loop_whose_claim_ran_out_while_sending_does_not_record_over_the_next(sundae, config):
    relay = ReclaimedWhileSending(config)
    controller = Controller(relay, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        smtp = by_smtp(config, controller.port)
        mail = queue_mail(sundae, smtp)
        (mine,) = claim_due(smtp, utcnow(), 10)
        hand_off(mine, smtp)
    finally:
        controller.stop()
    assert len(relay.received) == 1
    still = Message.get_by_id(mail.id)
    assert (still.status, still.delivery_attempts) == ("pending", 0)  # the other loop's now


class HoldsTheMail:
    """A slow relay: it holds its answer to the mail (after the last byte) until let go."""

    def __init__(self):
        self.holding = threading.Event()
        self.let_go = threading.Event()
        self.received = []

    async def handle_DATA(self, server, session, envelope):
        self.received.append(envelope)
        self.holding.set()
        await asyncio.to_thread(self.let_go.wait, 60)
        return "250 OK: queued as 1"


def _eventually(condition, within=30.0):
    """Whether ``condition()`` came true within ``within`` seconds (it is looked at often)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_relay_slower_than_the_claim_gets_the_mail_once_and_it_ends_sent(sundae, config):
    relay = HoldsTheMail()
    controller = Controller(relay, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        # A claim of one second, and a relay answering slower than both it and smtp_timeout.
        smtp = by_smtp(config, controller.port, smtp_timeout=5)
        smtp = attrs.evolve(smtp, runs=attrs.evolve(smtp.runs, lease_seconds=1))
        mail = queue_mail(sundae, smtp)
        tried: list = []
        sending = threading.Thread(target=lambda: tried.extend(send_pending(smtp)))
        sending.start()
        try:
            assert relay.holding.wait(30)
            claimed_until = Message.get_by_id(mail.id).delivery_lease_expires_at
            past_both = claimed_until + datetime.timedelta(seconds=smtp.mail.smtp_timeout)

            def renewed_past_both():
                held = Message.get_by_id(mail.id).delivery_lease_expires_at
                return utcnow() > past_both and held is not None and held > utcnow()

            # The first claim ran out long ago, yet the mail is still held, by its loop.
            assert _eventually(renewed_past_both)
            assert claim_due(smtp, utcnow(), 10) == []  # another loop leaves it alone
        finally:
            relay.let_go.set()
            sending.join(60)
        assert send_pending(smtp) == []
    finally:
        controller.stop()
    (sent,) = tried
    assert (sent.status, sent.delivery_attempts, sent.delivery_error) == ("sent", 1, None)
    assert len(relay.received) == 1


def test_the_outbox_folder_is_its_owners_only(tmp_path):
    import stat

    from protege.delivery import write_to_outbox
    from protege.models import Message

    message = Message(
        message_id=f"<approval.{'ab' * 20}@thescoop.example>",
        created_at=datetime.datetime(2026, 12, 1, 9, 0),
    )
    written = write_to_outbox(b"Subject: x\r\n\r\nx\r\n", message, tmp_path / "outbox")
    # Its file names are Message-IDs, an approval request's token among them.
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


@pytest.mark.parametrize("after", range(TURNS))
def test_the_delivery_loop_cancelled_just_after_a_wake_stops(config, after):
    # Python 3.11's asyncio.wait_for returned, swallowing the cancel, when it landed in the
    # turn the wake completed the wait: the loop then ran on, cancelled.
    async def serve():
        with ThreadPoolExecutor(2) as pool:
            loop = DeliveryLoop(config, pool, poll_interval=3600)
            running = asyncio.create_task(loop.run())
            try:
                await until(lambda: loop.waiting)  # nothing to send: it waits for a wake
                loop.wake()
                await turns(after)
                running.cancel()
                stopped = await ends(running)
            finally:
                loop.stop()
                await asyncio.wait({running})
            return stopped, running.cancelled()

    assert asyncio.run(serve()) == (True, True)
