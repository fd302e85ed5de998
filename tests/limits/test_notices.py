"""Telling of held mail: the sender once per window, in the thread, only when the mail
proved who sent it; the operators once per agent, limit and window; both off by default."""

from __future__ import annotations

import datetime
import email
from email import policy
from email.message import EmailMessage
from pathlib import Path

import attrs
import pytest

from protege.config import AuthenticationSettings, load_config
from protege.delivery import send_pending
from protege.gateway.inbound import ingest
from protege.installation import open_installation
from protege.limit_settings import LimitSettings
from protege.limits.admission import admission
from protege.limits.holding import release_due
from protege.limits.notices import tell_of_hold
from protege.mail import record_inbound
from protege.models import Agent, Run
from protege.models.limits import LimitNotice
from protege.registry import Manifest
from protege.testing import DkimKey

KEY = DkimKey.generate("acme.com", "mail")
AGENT = "sundae@thescoop.example"
NOON = datetime.datetime(2026, 3, 2, 12, 5, tzinfo=datetime.UTC)


class Clock:
    """A clock the test sets; it never moves by itself."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


def installation(tmp_path, **limits):
    """An installation whose mail goes to the outbox, Acme's DKIM key pinned, and
    ``[limits]`` as given (one run per sender an hour unless said otherwise)."""
    config = attrs.evolve(load_config(tmp_path), data_dir=tmp_path / "data")
    pinned = AuthenticationSettings(offline=True, dns={KEY.name: KEY.record})
    settings = {"sender_runs_per_hour": 1, **limits}
    return open_installation(
        attrs.evolve(
            config,
            mail=attrs.evolve(config.mail, authentication=pinned),
            limits=LimitSettings(**settings),
        ),
        manifest=Manifest(tools=()),
        connect=False,
    )


@pytest.fixture
def sundae(protege_db):
    return Agent.create(name="Sundae", address=AGENT)


class Post:
    """Mail from outside, stored by the real gateway at the clock's time."""

    def __init__(self, app, clock: Clock) -> None:
        self.app = app
        self.clock = clock
        self.count = 0

    def send(self, sender="Jane <jane@acme.com>", subject="Melted", sign=True, headers=None):
        self.count += 1
        message = EmailMessage()
        message["From"] = sender
        message["To"] = AGENT
        message["Subject"] = subject
        message["Message-ID"] = f"<m{self.count}@acme.com>"
        for name, value in (headers or {}).items():
            message[name] = value
        message.set_content(f"message {self.count}")
        raw = KEY.sign(message.as_bytes()) if sign else message.as_bytes()
        (delivered,) = ingest(raw, config=self.app.config, app=self.app, clock=self.clock)
        return delivered

    def outbox(self) -> list[EmailMessage]:
        send_pending(self.app.config, transport=self.app.transport)
        folder = Path(self.app.config.data_dir) / "outbox"
        return [
            email.message_from_bytes(path.read_bytes(), policy=policy.default)
            for path in sorted(folder.glob("*.eml"), key=lambda p: p.stat().st_mtime_ns)
        ]


def post(tmp_path, **limits) -> Post:
    return Post(installation(tmp_path, **limits), Clock(NOON))


def test_a_held_sender_is_told_once_per_window_in_the_thread(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    first = mail.send()
    assert first.run.status == "queued"
    assert mail.outbox() == []  # answered in turn: nothing to tell
    held = mail.send(subject="Re: Melted")
    assert Run.get_by_id(held.run.id).status == "held"
    (notice,) = mail.outbox()
    assert notice["To"] == "jane@acme.com"
    assert notice["From"] == f"Sundae <{AGENT}>"
    assert notice["Subject"] == "Re: Melted"
    assert notice["In-Reply-To"] == "<m2@acme.com>"
    assert "<m2@acme.com>" in notice["References"]
    body = notice.get_content()
    assert "after 2026-03-02 13:00 UTC" in body
    assert "no need to send it again" in body
    mail.send(subject="Still melted")  # held behind the first, same window: no second notice
    mail.send()
    assert len(mail.outbox()) == 1
    assert LimitNotice.select().count() == 1


def test_a_sender_held_again_in_a_later_window_is_told_again(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    mail.send()
    mail.send()
    assert len(mail.outbox()) == 1
    mail.clock.now = NOON + datetime.timedelta(days=1)
    (released,) = release_due(mail.clock.now, mail.app.config.limits).queued  # the scheduler's
    assert Run.get_by_id(released).status == "queued"
    held = mail.send(subject="Again")
    assert held.run.status == "held"
    notices = mail.outbox()
    assert [n["Subject"] for n in notices] == ["Re: Melted", "Re: Again"]
    assert "after 2026-03-03 13:00 UTC" in notices[1].get_content()


def test_an_unauthenticated_sender_is_never_told(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    mail.send(sign=False)
    held = mail.send(sign=False)  # a forged From: telling it would be backscatter
    assert held.run.status == "held"
    assert not held.message.sender_authenticated
    assert mail.outbox() == []
    assert LimitNotice.select().count() == 0


def test_nobody_is_told_when_notify_held_is_off(tmp_path, sundae):
    mail = post(tmp_path)  # the default: notify_held off, no alert_to
    mail.send()
    assert mail.send().run.status == "held"
    assert mail.outbox() == []
    assert LimitNotice.select().count() == 0


def test_a_from_naming_several_mailboxes_gets_no_notice(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    many = "jane@acme.com, victim@elsewhere.example"
    mail.send()
    ignored = mail.send(sender=many)  # the gateway answers nobody for such a From
    assert ignored.run is None
    assert mail.outbox() == []
    # Even stored as proven and held (as no gateway stores it), it tells nobody.
    stored = record_inbound(sundae, sender=many, body="hi", subject="Hello")
    assert stored.sender_authenticated
    hold = admission(sundae.id, sundae.name, "jane@acme.com", NOON, mail.app.config.limits)
    assert hold is not None
    tell_of_hold(mail.app, sundae, stored, hold, NOON, mail.app.config)
    assert mail.outbox() == []
    assert LimitNotice.select().count() == 0


def test_mail_claiming_to_come_from_an_agent_gets_no_notice(tmp_path, sundae):
    Agent.create(name="Scout", address="scout@acme.com")  # an agent on the signed domain
    mail = post(tmp_path, notify_held=True)
    mail.send(sender="Scout <scout@acme.com>")
    held = mail.send(sender="Scout <scout@acme.com>")
    assert held.run.status == "held"
    assert mail.outbox() == []
    # Even stored as proven, unflagged (as no gateway stores it), an agent is never told.
    stored = record_inbound(sundae, sender="Scout <scout@acme.com>", body="hi", subject="Hi")
    assert stored.sender_authenticated
    hold = admission(
        sundae.id, sundae.name, "unproven:scout@acme.com", NOON, mail.app.config.limits
    )
    assert hold is not None
    tell_of_hold(mail.app, sundae, stored, hold, NOON, mail.app.config)
    assert mail.outbox() == []
    assert LimitNotice.select().count() == 0


def test_operators_are_alerted_once_per_limit_and_window(tmp_path, sundae):
    mail = post(tmp_path, alert_to="ops@thescoop.com")
    mail.send()
    mail.send()  # sender_runs_per_hour reached
    mail.send(sender="Bob <bob@acme.com>")
    mail.send(sender="Bob <bob@acme.com>")  # the same limit by another sender: no alert
    (alert,) = mail.outbox()
    assert alert["To"] == "ops@thescoop.com"
    assert alert["Subject"] == "Limit reached: sender_runs_per_hour (Sundae)"
    body = alert.get_content()
    assert "jane@acme.com" in body
    assert "1 of 1" in body
    assert "until 2026-03-02 13:00 UTC" in body
    assert "protege runs list --held" in body
    assert "protege runs release" in body
    mail.clock.now = NOON + datetime.timedelta(hours=1)  # a new hour: a new window
    mail.send(sender="Carol <carol@acme.com>")
    mail.send(sender="Carol <carol@acme.com>")
    mail.send(sender="Carol <carol@acme.com>")
    alerts = mail.outbox()
    assert [a["Subject"] for a in alerts] == [
        "Limit reached: sender_runs_per_hour (Sundae)",
        "Limit reached: sender_runs_per_hour (Sundae)",
    ]
    assert "carol@acme.com" in alerts[1].get_content()
    assert "until 2026-03-02 14:00 UTC" in alerts[1].get_content()


def test_an_alert_to_an_agents_address_is_not_sent(tmp_path, sundae):
    mail = post(tmp_path, alert_to=AGENT)
    mail.send()
    assert mail.send().run.status == "held"
    assert mail.outbox() == []


def test_mail_stored_without_an_installation_still_tells_the_sender(tmp_path, sundae):
    app = installation(tmp_path, notify_held=True)
    mail = Post(app, Clock(NOON))  # for its outbox: ingest below is given no app at all
    for number in (1, 2):
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = "jane@acme.com", AGENT, "Melted"
        message["Message-ID"] = f"<alone{number}@acme.com>"
        message.set_content("hello")
        ingest(KEY.sign(message.as_bytes()), config=app.config, clock=mail.clock)
    (notice,) = mail.outbox()  # queued by protege's own inspectors' queue_mail
    assert notice["In-Reply-To"] == "<alone2@acme.com>"


def test_a_notice_is_an_automatic_reply_carrying_the_loop_count(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    mail.send(headers={"X-Protege-Loop": "1"})
    assert mail.send(headers={"X-Protege-Loop": "1"}).run.status == "held"
    (notice,) = mail.outbox()
    assert notice["Auto-Submitted"] == "auto-replied"
    assert notice["X-Protege-Loop"] == "2"  # one more: a loop between agents ends


def test_an_alert_is_automatic_mail(tmp_path, sundae):
    mail = post(tmp_path, alert_to="ops@thescoop.com")
    mail.send()
    mail.send()
    (alert,) = mail.outbox()
    assert alert["Auto-Submitted"] == "auto-generated"
    assert alert["X-Protege-Loop"] == "1"


@pytest.mark.parametrize(
    "headers",
    [
        {"List-Id": "Ice cream lovers <icecream.lists.acme.com>"},
        {"List-Post": "<mailto:icecream@lists.acme.com>"},
        {"Precedence": "list"},
        {"Precedence": "Bulk"},
        {"Precedence": "junk"},
        {"Auto-Submitted": "auto-replied"},
    ],
    ids=["List-Id", "List-Post", "list", "bulk", "junk", "auto-submitted"],
)
def test_mail_from_a_list_or_an_automaton_gets_no_notice(tmp_path, sundae, headers):
    mail = post(tmp_path, notify_held=True)
    mail.send(headers=headers)
    second = mail.send(headers=headers)
    if second.run is not None:  # mail the gateway starts no run for is never held at all
        assert second.run.status == "held"
    assert mail.outbox() == []
    assert LimitNotice.select().count() == 0


def test_auto_submitted_no_is_a_person_writing_and_gets_its_notice(tmp_path, sundae):
    mail = post(tmp_path, notify_held=True)
    mail.send(headers={"Auto-Submitted": "no"})
    assert mail.send(headers={"Auto-Submitted": "no"}).run.status == "held"
    assert len(mail.outbox()) == 1
