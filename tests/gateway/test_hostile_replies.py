"""Hostile mail that is answered: the agent's own reply goes out exactly as protege meant it.

Each message comes in through the SMTP gateway, its run is carried out with a model that
replies, and the reply is read back from the outbox as a mail client would read it.
"""

from __future__ import annotations

import base64
from email import policy
from email.errors import NonASCIILocalPartDefect
from email.parser import Parser

import pytest

from protege.addresses import parse_mailbox
from protege.config import load_config
from protege.installation import open_installation
from protege.models import Agent, Message, Toolkit
from protege.testing import say, tool_call
from protege.worker import drain

from .hostile import AGENT, Case, mail, through_smtp

MEANT = {
    "from",
    "to",
    "subject",
    "date",
    "message-id",
    "in-reply-to",
    "references",
    "x-protege-loop",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
}


def _encoded(text: str) -> str:
    return "=?utf-8?b?" + base64.b64encode(text.encode()).decode() + "?="


ANSWERED = [
    Case(
        "subject-injects-headers-when-decoded-twice",
        mail("Subject: " + _encoded("=?utf-8?q?Hi=0D=0AReply-To:_thief@evil.example=0D=0A?=")),
        "answered",
    ),
    Case(
        "subject-decodes-to-cr-lf",
        mail("Subject: =?utf-8?q?Hi=0D=0ABcc:_thief@evil.example=0D=0A=0D=0Aforged?="),
        "answered",
    ),
    Case(
        "display-name-with-a-header-in-it",
        mail(sender=_encoded("Jane\r\nBcc: thief@evil.example") + " <jane@acme.com>"),
        "ignored",
    ),
    Case(
        "message-id-with-a-header-in-it",
        mail("Message-ID: <a@b>\r\n =?utf-8?q?=0D=0ABcc:_thief@evil.example?="),
        "answered",
    ),
    Case(
        "idn-sender",
        mail(sender="Zoë <zoë@café.example>"),
        "answered",
        smtputf8=True,
        envelope_sender="zoë@café.example",
    ),
]


@pytest.fixture
def replying_sundae(protege_db, data_dir, scripted_model):
    agent = Agent.create(name="Sundae", address=AGENT)
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    scripted_model.script(tool_call("send_email", mode="reply", body="Thanks, noted."), say("ok"))
    return agent


@pytest.mark.parametrize("case", ANSWERED, ids=[case.name for case in ANSWERED])
def test_the_reply_to_hostile_mail_has_exactly_the_headers_meant(case, replying_sundae, data_dir):
    code, said = through_smtp(case.raw, case, data_dir)
    assert code is None, said
    (inbound,) = Message.select().where(Message.direction == "inbound")
    if case.outcome == "ignored":
        assert inbound.status == "ignored"
        assert not (data_dir / "outbox").exists()
        return
    (run,) = drain(open_installation(load_config(), connect=False))
    assert run.status == "done", run.error
    (eml,) = (data_dir / "outbox").glob("*.eml")
    # Read as a mail client does: headers may be UTF-8 (RFC 6532).
    reply = Parser(policy=policy.default).parsestr(eml.read_bytes().decode("utf-8"))
    assert {name.lower() for name in reply} == MEANT
    for name in reply:
        assert all(isinstance(d, NonASCIILocalPartDefect) for d in reply[name].defects)
    assert [a.addr_spec for a in reply["To"].addresses] == [parse_mailbox(inbound.sender).address]
    assert "\r" not in str(reply["Subject"])
    assert "\n" not in str(reply["Subject"])
    assert reply.get_content().replace("\r\n", "\n") == "Thanks, noted.\n"
    assert "thief" not in str(reply["To"])
