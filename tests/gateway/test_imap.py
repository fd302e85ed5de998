"""Reading an existing mailbox over IMAP, against a real Dovecot (tests/mailservers.py):
each mail stored once and then marked done, the checkpoint kept across passes, readers
and restarts, and every fault of the connection and the server recovered."""

from __future__ import annotations

import shlex
import sys
import threading

import attrs
import pytest

from protege.config import load_config
from protege.gateway import checkpoints
from protege.gateway.imap import MailboxUnavailable, connect, log_out
from protege.gateway.mailbox import MailboxReader
from protege.installation import open_installation
from protege.mailbox_settings import MailboxSettings
from protege.models import Agent, Message, Run
from protege.models.mailboxes import MailboxCheckpoint
from tests.cli.serving import until
from tests.mailservers import AGENT
from tests.mailservers import order_mail as mail

NAME = "support"


def settings_for(server, **changes) -> MailboxSettings:
    values = {
        "agent": AGENT.address,
        "host": server.host,
        "port": server.imaps_port,
        "ca_file": str(server.ca_file),
        "username": AGENT.address,
        "password_env": "AGENT_IMAP_PASSWORD",
        "password": AGENT.password,
        "poll_seconds": 60.0,
        "batch": 50,
    }
    values.update(changes)
    return MailboxSettings(**values)


@pytest.fixture
def agent(protege_db):
    return Agent.create(name="Support", address=AGENT.address)


def installation_for(tmp_path, box: MailboxSettings, **runs):
    config = load_config(tmp_path)  # as the fixtures isolate it: offline DNS among them
    config = attrs.evolve(
        config,
        mail=attrs.evolve(config.mail, imap={NAME: box}),
        runs=attrs.evolve(config.runs, **runs) if runs else config.runs,
    )
    return open_installation(config, connect=False)


@pytest.fixture
def reading(tmp_path, dovecot, agent):
    """A reader of the agent's mailbox holding its lease, and a logged-in client for it."""
    opened = []

    def make(**changes):
        app = installation_for(tmp_path, settings_for(dovecot, **changes))
        reader = MailboxReader(NAME, app)
        checkpoints.ensure(NAME, reader.source)
        assert checkpoints.take_lease(NAME, reader.holder, reader.lease_seconds)
        client = connect(NAME, reader.settings, app.config.root)
        opened.append((app, client))
        return reader, client

    yield make
    for app, client in opened:
        log_out(client)
        app.close()


def inbound() -> list[Message]:
    return list(Message.select().where(Message.direction == "inbound").order_by(Message.id))


def test_only_mail_arriving_after_the_first_look_is_taken_and_each_is_marked_seen(reading, dovecot):
    dovecot.append(AGENT.address, mail(1))  # before protege looked: the human's
    reader, client = reading()
    assert reader.take_new(client).stored == 0
    dovecot.append(AGENT.address, mail(2))
    dovecot.append(AGENT.address, mail(3))

    taken = reader.take_new(client)

    assert taken.stored == 2
    assert [m.subject for m in inbound()] == ["Order 2", "Order 3"]
    assert Run.select().count() == 2  # each queued its run
    flags = {m.uid: m.flags for m in dovecot.messages(AGENT.address)}
    assert "\\Seen" not in flags[1]
    assert all("\\Seen" in flags[uid] for uid in (2, 3))
    assert reader.take_new(client).stored == 0  # nothing is taken twice
    assert len(inbound()) == 2
    row = MailboxCheckpoint.get(MailboxCheckpoint.name == NAME)
    assert (row.last_uid, row.marked_uid, row.taken, row.waiting) == (3, 3, 2, 0)


def test_backfill_takes_the_backlog_in_bounded_batches(reading, dovecot):
    dovecot.append_many(AGENT.address, [mail(n) for n in range(1, 24)])
    reader, client = reading(backfill="all", batch=5)

    taken = reader.take_new(client)

    assert (taken.found, taken.stored) == (23, 23)
    assert [m.subject for m in inbound()] == [f"Order {n}" for n in range(1, 24)]


def test_done_move_moves_stored_mail_to_its_folder(reading, dovecot):
    dovecot.create_folder(AGENT.address, "Taken")
    reader, client = reading(done="move", move_to="Taken")
    reader.take_new(client)
    dovecot.append(AGENT.address, mail(1))

    reader.take_new(client)

    assert dovecot.messages(AGENT.address) == []
    assert [m.raw for m in dovecot.messages(AGENT.address, "Taken")] == [mail(1)]
    assert len(inbound()) == 1


def test_done_keep_leaves_the_mail_as_it_was(reading, dovecot):
    reader, client = reading(done="keep")
    reader.take_new(client)
    dovecot.append(AGENT.address, mail(1))
    reader.take_new(client)
    assert len(inbound()) == 1
    assert "\\Seen" not in dovecot.messages(AGENT.address)[0].flags


def test_a_mail_over_the_size_limit_is_left_unseen_in_the_mailbox(reading, dovecot, tmp_path):
    reader, client = reading()
    reader.take_new(client)
    reader.config = attrs.evolve(
        reader.config, mail=attrs.evolve(reader.config.mail, max_message_bytes=2000)
    )
    dovecot.append(AGENT.address, mail(1, headers="X-Padding: " + "x" * 3000 + "\r\n"))
    dovecot.append(AGENT.address, mail(2))

    taken = reader.take_new(client)

    assert (taken.stored, taken.passed_over) == (1, 1)
    assert [m.subject for m in inbound()] == ["Order 2"]
    big, small = dovecot.messages(AGENT.address)
    assert "\\Seen" not in big.flags
    assert "\\Seen" in small.flags


def test_a_checkpoint_is_kept_across_readers_and_restarts(reading, dovecot):
    reader, client = reading()
    reader.take_new(client)
    dovecot.append(AGENT.address, mail(1))
    reader.take_new(client)
    checkpoints.release(NAME, reader.holder)
    dovecot.restart()
    dovecot.append(AGENT.address, mail(2))

    again, fresh_client = reading()
    again.take_new(fresh_client)

    assert [m.subject for m in inbound()] == ["Order 1", "Order 2"]


def test_a_new_uidvalidity_takes_what_is_new_and_nothing_twice(reading, dovecot):
    reader, client = reading()
    reader.take_new(client)
    dovecot.append(AGENT.address, mail(1))
    dovecot.append(AGENT.address, mail(2))
    reader.take_new(client)
    before = MailboxCheckpoint.get(MailboxCheckpoint.name == NAME).uidvalidity
    checkpoints.release(NAME, reader.holder)
    dovecot.change_uidvalidity(AGENT.address)
    dovecot.append(AGENT.address, mail(3))  # arrived while the folder was rebuilt

    again, fresh_client = reading()
    again.take_new(fresh_client)
    again.take_new(fresh_client)

    assert [m.subject for m in inbound()] == ["Order 1", "Order 2", "Order 3"]
    row = MailboxCheckpoint.get(MailboxCheckpoint.name == NAME)
    assert row.uidvalidity != before
    dovecot.append(AGENT.address, mail(4))
    again.take_new(fresh_client)
    assert [m.subject for m in inbound()][-1] == "Order 4"
    assert len(inbound()) == 4


def test_a_reader_that_lost_its_lease_stores_nothing(reading, dovecot):
    reader, client = reading()
    reader.take_new(client)
    dovecot.append(AGENT.address, mail(1))
    MailboxCheckpoint.update(holder="another:1:x").execute()  # another process took over

    with pytest.raises(checkpoints.LeaseLost):
        reader.take_new(client)

    assert inbound() == []
    assert "\\Seen" not in dovecot.messages(AGENT.address)[0].flags


def test_the_providers_topmost_results_prove_the_sender_and_a_forged_one_below_does_not(
    reading, dovecot
):
    reader, client = reading(trusted_authserv_ids=("mx.example.test",))
    reader.take_new(client)
    proven = "Authentication-Results: mx.example.test; dmarc=pass header.from=acme.example\r\n"
    forged = (
        "Authentication-Results: mx.example.test; dmarc=fail header.from=bank.example\r\n"
        "Authentication-Results: mx.example.test; dmarc=pass header.from=bank.example\r\n"
    )
    dovecot.append(AGENT.address, mail(1, headers=proven))
    dovecot.append(AGENT.address, mail(2, sender="ceo@bank.example", headers=forged))

    reader.take_new(client)

    first, second = inbound()
    assert first.sender_authenticated is True
    assert second.sender_authenticated is False


def test_results_from_an_untrusted_authserv_id_prove_nothing(reading, dovecot):
    reader, client = reading(trusted_authserv_ids=("mx.example.test",))
    reader.take_new(client)
    dovecot.append(
        AGENT.address,
        mail(
            1,
            headers="Authentication-Results: evil.example; dmarc=pass header.from=acme.example\r\n",
        ),
    )
    reader.take_new(client)
    assert inbound()[0].sender_authenticated is False


def test_a_wrong_password_is_refused_with_a_clear_error(dovecot, tmp_path):
    box = settings_for(dovecot, password="not it")
    with pytest.raises(MailboxUnavailable, match=f"refused the login of {AGENT.address}") as raised:
        connect(NAME, box, tmp_path)
    assert "not it" not in str(raised.value)


def test_an_untrusted_certificate_is_refused_with_a_clear_error(dovecot, tmp_path):
    box = settings_for(dovecot, ca_file=str(dovecot.untrusted_ca_file))
    with pytest.raises(MailboxUnavailable, match="the certificate did not verify"):
        connect(NAME, box, tmp_path)


def test_starttls_is_required_and_used_on_the_plain_port(dovecot, tmp_path):
    box = settings_for(dovecot, port=dovecot.imap_port, security="starttls")
    client = connect(NAME, box, tmp_path)
    try:
        assert client._starttls_done
    finally:
        log_out(client)
    with pytest.raises(MailboxUnavailable, match="certificate did not verify"):
        connect(NAME, attrs.evolve(box, ca_file=str(dovecot.untrusted_ca_file)), tmp_path)


def test_xoauth2_logs_in_with_the_token_the_command_prints(dovecot, tmp_path):
    token = dovecot.oauth_token(AGENT.address)
    printer = shlex.join([sys.executable, "-c", f"print({token!r})"])
    box = settings_for(dovecot, password_env=None, password=None, oauth2_command=printer)
    log_out(connect(NAME, box, tmp_path))
    bad = dovecot.oauth_token(AGENT.address, valid=False)
    refused = settings_for(
        dovecot,
        password_env=None,
        password=None,
        oauth2_command=shlex.join([sys.executable, "-c", f"print({bad!r})"]),
    )
    with pytest.raises(MailboxUnavailable, match="refused the login"):
        connect(NAME, refused, tmp_path)


# -- the reader's own thread: IDLE, polling, faults -------------------------------------


@pytest.fixture
def running(tmp_path, agent):
    """Start a reader in its thread (stopped and joined after the test)."""
    started = []

    def start(server, **changes):
        app = installation_for(tmp_path, settings_for(server, **changes), lease_seconds=3)
        reader = MailboxReader(NAME, app)
        thread = threading.Thread(target=reader.run, daemon=True)
        thread.start()
        started.append((reader, thread, app))
        return reader

    yield start
    for reader, thread, app in started:
        reader.stop()
        thread.join(timeout=60)
        assert not thread.is_alive()
        app.close()


def stored(count: int) -> None:
    until(lambda: len(inbound()) >= count, 60, f"fewer than {count} mails were stored")


def begun() -> None:
    def looked() -> bool:
        row = MailboxCheckpoint.get_or_none(MailboxCheckpoint.name == NAME)
        return row is not None and row.checked_at is not None

    until(looked, 60, "the reader never looked at the mailbox")


def test_idle_hears_new_mail_at_once(running, dovecot):
    running(dovecot, poll_seconds=3600)  # only IDLE can bring it in time
    begun()
    dovecot.append(AGENT.address, mail(1))
    stored(1)
    assert "\\Seen" in dovecot.messages(AGENT.address)[0].flags


def test_a_server_without_idle_is_polled(running, dovecot_no_idle):
    running(dovecot_no_idle, poll_seconds=0.2)
    begun()
    dovecot_no_idle.append(AGENT.address, mail(1))
    stored(1)


def test_a_dropped_connection_and_a_restarted_server_lose_nothing(running, dovecot):
    reader = running(dovecot, poll_seconds=3600)
    begun()
    dovecot.kick(AGENT.address)
    dovecot.append(AGENT.address, mail(1))
    stored(1)
    dovecot.restart()
    dovecot.append(AGENT.address, mail(2))
    stored(2)
    assert [m.subject for m in inbound()] == ["Order 1", "Order 2"]
    assert reader.holding


def test_a_stopped_reader_lets_the_mailbox_go_at_once(running, dovecot):
    reader = running(dovecot)
    begun()
    reader.stop()
    until(lambda: MailboxCheckpoint.get(MailboxCheckpoint.name == NAME).holder is None, 60)


def test_a_ten_thousand_mail_backlog_is_taken_whole_and_once(reading, dovecot):
    dovecot.append_many(AGENT.address, [mail(n) for n in range(1, 10_001)])
    reader, client = reading(backfill="all", batch=500)

    taken = reader.take_new(client)

    assert (taken.found, taken.stored) == (10_000, 10_000)
    assert Message.select().where(Message.direction == "inbound").count() == 10_000
    subjects = {m.subject for m in Message.select(Message.subject)}
    assert subjects == {f"Order {n}" for n in range(1, 10_001)}
    assert reader.take_new(client).stored == 0
    row = MailboxCheckpoint.get(MailboxCheckpoint.name == NAME)
    assert (row.last_uid, row.marked_uid, row.taken) == (10_000, 10_000, 10_000)
    assert all("\\Seen" in m.flags for m in dovecot.messages(AGENT.address))


# -- from the attacker's pass ---------------------------------------------------------------


def test_a_header_built_to_be_slow_is_refused_before_any_check_and_blocks_nothing(reading, dovecot):
    reader, client = reading()
    reader.take_new(client)
    folded = "X-Folded: a\r\n" + "".join(f" {n}\r\n" for n in range(40_000))  # 240 KB
    dovecot.append(AGENT.address, mail(1, headers=folded))
    dovecot.append(AGENT.address, mail(2))

    taken = reader.take_new(client)

    assert (taken.stored, taken.passed_over) == (1, 1)
    assert [m.subject for m in inbound()] == ["Order 2"]
    assert "\\Seen" not in dovecot.messages(AGENT.address)[0].flags


def test_results_under_an_unlisted_providers_header_prove_nothing(reading, dovecot):
    reader, client = reading(trusted_authserv_ids=("mx1.example.test",))
    reader.take_new(client)
    headers = (
        "Authentication-Results: mx3.example.test; dmarc=fail header.from=bank.example\r\n"
        "Authentication-Results: mx1.example.test; dmarc=pass header.from=bank.example\r\n"
    )
    dovecot.append(AGENT.address, mail(1, sender="ceo@bank.example", headers=headers))
    reader.take_new(client)
    assert inbound()[0].sender_authenticated is False


def test_marking_owed_after_a_failure_never_touches_mail_that_was_passed_over(reading, dovecot):
    dovecot.create_folder(AGENT.address, "Taken")
    reader, client = reading(done="move", move_to="Gone")  # no such folder: marking fails
    reader.take_new(client)
    reader.config = attrs.evolve(
        reader.config, mail=attrs.evolve(reader.config.mail, max_message_bytes=2000)
    )
    dovecot.append(AGENT.address, mail(1, headers="X-Padding: " + "x" * 3000 + "\r\n"))
    dovecot.append(AGENT.address, mail(2))

    first = reader.take_new(client)  # stores 2, cannot move it: owed, and new mail still taken
    dovecot.append(AGENT.address, mail(3))
    second = reader.take_new(client)

    assert (first.stored, second.stored) == (1, 1)
    assert "could not mark" in MailboxCheckpoint.get(MailboxCheckpoint.name == NAME).last_error
    reader.settings = attrs.evolve(reader.settings, move_to="Taken")
    reader.take_new(client)  # the owed marking is done now
    left = dovecot.messages(AGENT.address)
    assert [m.uid for m in left] == [1]  # the mail passed over stays where it was, unread
    assert "\\Seen" not in left[0].flags
    assert sorted(m.raw for m in dovecot.messages(AGENT.address, "Taken")) == sorted(
        [mail(2), mail(3)]
    )


def test_mail_waiting_when_the_uidvalidity_changed_before_any_was_taken_is_taken(reading, dovecot):
    reader, client = reading()
    reader.take_new(client)  # reading begins: nothing stored yet
    checkpoints.release(NAME, reader.holder)
    dovecot.append(AGENT.address, mail(1))  # arrive while serve is down
    dovecot.append(AGENT.address, mail(2))
    dovecot.change_uidvalidity(AGENT.address)

    again, fresh_client = reading()
    again.take_new(fresh_client)

    assert [m.subject for m in inbound()] == ["Order 1", "Order 2"]
