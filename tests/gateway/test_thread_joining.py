"""A mail joins a thread only if its proven sender took part in it: threading headers are
the sender's to write, and whoever joins a thread has the agent see its history."""

import attrs
import pytest

from protege.config import AuthenticationSettings
from protege.gateway.inbound import ingest
from protege.gateway.outbound import queue_mail
from protege.mail import reply_headers
from protege.testing import DkimKey

from .conftest import make_mail

ACME = DkimKey.generate("acme.com", "mail")
EVIL = DkimKey.generate("evil.example", "mail")
SCOOP = DkimKey.generate("thescoop.com", "mail")
JANES_ROOT = "<Jane.1@Acme.COM>"


@pytest.fixture
def proving(config):
    """The configuration, with the senders' DKIM keys pinned."""
    pinned = {key.name: key.record for key in (ACME, EVIL, SCOOP)}
    settings = AuthenticationSettings(offline=True, dns=pinned)
    return attrs.evolve(config, mail=attrs.evolve(config.mail, authentication=settings))


def arrive(config, agent, key, **fields):
    raw = make_mail(**fields)
    (delivered,) = ingest(key.sign(raw) if key else raw, config=config, recipients=[agent.address])
    return delivered


@pytest.fixture
def janes_thread(sundae, proving):
    first = arrive(proving, sundae, ACME, headers={"Cc": "Mara <mara@thescoop.com>"})
    assert first.message.sender_authenticated
    assert first.message.thread_key == JANES_ROOT
    return first.message


def replying_to(message_id, own_id, **headers):
    return {
        "In-Reply-To": message_id,
        "References": message_id,
        "Message-ID": own_id,
        **headers,
    }


def test_a_stranger_naming_anothers_thread_starts_his_own(sundae, proving, janes_thread):
    eve = arrive(
        proving,
        sundae,
        EVIL,
        sender="eve@evil.example",
        headers=replying_to(JANES_ROOT, "<eve.1@evil.example>"),
    )
    assert eve.message.sender_authenticated
    assert eve.message.thread_key == "<eve.1@evil.example>"
    assert eve.message.earlier_in_thread(10) == []  # the agent is shown none of Jane's mail


def test_a_stranger_taking_the_threads_own_id_starts_his_own(sundae, proving, janes_thread):
    eve = arrive(
        proving, sundae, EVIL, sender="eve@evil.example", headers={"Message-ID": JANES_ROOT}
    )
    assert eve.message.thread_key not in (JANES_ROOT, "")
    assert eve.message.earlier_in_thread(10) == []


def test_the_people_on_a_thread_join_it(sundae, proving, janes_thread):
    jane = arrive(proving, sundae, ACME, headers=replying_to(JANES_ROOT, "<jane.2@acme.com>"))
    assert jane.message.thread_key == JANES_ROOT
    mara = arrive(  # copied on Jane's first mail
        proving,
        sundae,
        SCOOP,
        sender="Mara <mara@thescoop.com>",
        headers=replying_to(JANES_ROOT, "<mara.1@thescoop.com>"),
    )
    assert mara.message.thread_key == JANES_ROOT
    assert [m.id for m in mara.message.earlier_in_thread(10)] == [janes_thread.id, jane.message.id]


def test_a_forged_sender_joins_nothing(sundae, proving, janes_thread):
    forged = arrive(proving, sundae, None, headers=replying_to(JANES_ROOT, "<jane.3@acme.com>"))
    assert not forged.message.sender_authenticated
    assert forged.message.thread_key == "<jane.3@acme.com>"


def test_the_agents_answer_stays_in_the_strangers_thread_and_he_can_continue_it(
    sundae, proving, janes_thread
):
    eve = arrive(
        proving,
        sundae,
        EVIL,
        sender="eve@evil.example",
        headers=replying_to(JANES_ROOT, "<eve.1@evil.example>"),
    )
    mail = {"to": ["eve@evil.example"], "subject": "Re: Melted", "body": "Hello."}
    outcome = queue_mail(
        agent=sundae,
        run=eve.run,
        config=proving,
        mail={**mail, **reply_headers(eve.message)},
    )
    answer = next(m for m in sundae.messages if m.message_id == outcome["message_id"])
    # Its References start with Jane's root, but it is filed in Eve's thread: Eve, being
    # on it, would otherwise become one of the people on Jane's.
    assert answer.thread_key == "<eve.1@evil.example>"
    again = arrive(
        proving,
        sundae,
        EVIL,
        sender="eve@evil.example",
        headers={
            "In-Reply-To": outcome["message_id"],
            "References": f"{JANES_ROOT} <eve.1@evil.example> {outcome['message_id']}",
            "Message-ID": "<eve.2@evil.example>",
        },
    )
    assert again.message.thread_key == "<eve.1@evil.example>"
    assert [m.id for m in again.message.earlier_in_thread(10)] == [eve.message.id]
