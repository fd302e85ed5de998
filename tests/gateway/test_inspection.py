"""``inspect_inbound``: inspectors flag or hold stored mail, every decision audited; a
raising inspector holds the mail, and no inspector can undo another's flag or hold."""

from __future__ import annotations

import contextlib
import time

from protege import hookimpl
from protege.gateway import inspection
from protege.gateway.inbound import ingest
from protege.installation import open_installation
from protege.models import AuditEntry, Message, Run
from protege.plugins import PluginHost
from protege.registry import Manifest

from .conftest import make_mail
from .test_sender_verdicts import configured


class Inspector:
    """Flags mail that mentions money; holds mail from a competitor."""

    @hookimpl
    def inspect_inbound(self, app, message):
        if "refund" in message.body.lower():
            message.flag("mentions money")
        if message.sender_address.endswith("@competitor.example"):
            message.hold("mail from a competitor waits for an operator")


class Broken:
    """An inspector with a bug, which flagged before it failed."""

    @hookimpl
    def inspect_inbound(self, app, message):
        message.flag("looked at it")
        raise RuntimeError("the inspector has a bug")


class Undoer:
    """Tries every way to take back what was decided before it, then returns normally."""

    def __init__(self):
        self.saw = None

    @hookimpl(trylast=True)
    def inspect_inbound(self, app, message):
        self.saw = (message.held, message.holds, message.flags)
        for attempt in (
            lambda: object.__setattr__(message, "holds", ()),
            lambda: object.__setattr__(message, "flags", ()),
            lambda: object.__setattr__(message, "gateway_flags", ()),
            lambda: message._decided().clear(),
        ):
            with contextlib.suppress(Exception):
                attempt()


def app_with(config, **inspectors):
    host = PluginHost(sources=())
    for name, inspector in inspectors.items():
        host.add(inspector, name)
    return open_installation(config, manifest=Manifest(tools=()), plugins=host, connect=False)


def decisions(message):
    entries = (
        AuditEntry.select().where(AuditEntry.subject_kind == "message").order_by(AuditEntry.id)
    )
    return [
        (entry.actor, entry.action, entry.after)
        for entry in entries
        if entry.after["message"] == message.id
    ]


def test_an_inspector_flags_and_holds_a_mail_with_its_reason_in_the_audit_log(config, sundae):
    app = app_with(config, inspector=Inspector())
    mail = make_mail(sender="Rival <rival@competitor.example>", body="A refund for SCP-1042?")
    (delivered,) = ingest(mail, config=config, app=app)
    assert (delivered.status, delivered.run) == ("ignored", None)
    assert delivered.reason == "mail from a competitor waits for an operator"
    stored = Message.get_by_id(delivered.message.id)  # as listings and the dashboard read it
    assert stored.status == "ignored"
    assert "mentions money" in stored.flags
    assert "held: mail from a competitor waits for an operator" in stored.flags
    assert Run.select().count() == 0
    assert decisions(stored) == [
        (
            "inspector:inspector",
            "inbound mail flagged",
            {"message": stored.id, "flag": "mentions money"},
        ),
        (
            "inspector:inspector",
            "inbound mail held",
            {"message": stored.id, "hold": "mail from a competitor waits for an operator"},
        ),
    ]


def test_a_flag_alone_lets_the_run_start(config, sundae):
    app = app_with(config, inspector=Inspector())
    (delivered,) = ingest(make_mail(body="A refund, please."), config=config, app=app)
    assert delivered.status == "accepted"
    assert delivered.run is not None
    assert "mentions money" in delivered.message.flags


def test_an_inspector_that_raises_holds_the_mail_it_was_asked_about(config, sundae, caplog):
    app = app_with(config, broken=Broken())
    (delivered,) = ingest(make_mail(), config=config, app=app)
    assert (delivered.status, delivered.run) == ("ignored", None)  # stored, no run
    stored = Message.get_by_id(delivered.message.id)
    assert "looked at it" in stored.flags  # what it decided before it failed stands
    held = [flag for flag in stored.flags if flag.startswith("held: inspection_failed")]
    assert held
    assert "RuntimeError: the inspector has a bug" in held[0]
    assert decisions(stored)[-1][:2] == ("inspector:broken", "inbound mail held")
    assert any("inspect_inbound of plugin broken failed" in r.message for r in caplog.records)


def test_no_inspector_can_undo_another_s_hold_or_the_authentication_flags(config, sundae):
    undoer = Undoer()
    app = app_with(configured(config), inspector=Inspector(), undoer=undoer)
    mail = make_mail(sender="Rival <rival@competitor.example>")
    (held,) = ingest(mail, config=app.config, app=app)
    assert undoer.saw[0] is True  # it saw the hold it then tried to take back
    assert held.status == "ignored"
    assert "held: mail from a competitor waits for an operator" in held.message.flags
    assert Run.select().count() == 0

    # Mail failing DMARC at a reject domain: protege's own inspector holds it.
    forged = make_mail(sender="Bank <alerts@bank.example>").replace(b"Jane.1", b"Bank.2")
    (refused,) = ingest(forged, config=app.config, app=app)
    assert undoer.saw[0] is True
    assert any("fails DMARC" in flag for flag in undoer.saw[2])
    stored = Message.get_by_id(refused.message.id)
    assert stored.status == "ignored"
    assert refused.reason == "fails DMARC for bank.example (policy reject): no run"
    assert any("fails DMARC for bank.example" in flag for flag in stored.flags)
    assert Run.select().count() == 0
    actors = {actor for actor, _, _ in decisions(stored)}
    assert actors == {"inspector:protege.gateway.sender_decision"}


def test_the_hook_collects_every_inspector_s_decision_never_the_first_result(config):
    caller = PluginHost(sources=()).manager.hook.inspect_inbound
    assert not caller.spec.opts.get("firstresult")


def test_an_installed_inspector_that_raises_holds_the_mail_though_its_guard_caught_it(
    config, sundae, site
):
    site.add(
        "shaky-inspector",
        "from protege import hookimpl\n\n"
        "@hookimpl\n"
        "def inspect_inbound(app, message):\n"
        "    raise LookupError('the spam service did not answer')\n",
    )
    app = open_installation(config, manifest=Manifest(tools=()), plugins=site.host(), connect=False)
    (first,) = ingest(make_mail(), config=config, app=app)
    (second,) = ingest(make_mail().replace(b"Jane.1", b"Jane.2"), config=config, app=app)
    for delivered in (first, second):  # the guard logs only the first: both are held
        assert (delivered.status, delivered.run) == ("ignored", None)
        assert any(
            flag.startswith("held: inspection_failed: the inspection by shaky-inspector")
            and "LookupError: the spam service did not answer" in flag
            for flag in delivered.message.flags
        )


class Vetting:
    """A wrapper inspector: holds, after the others, mail none of them flagged."""

    @hookimpl(wrapper=True)
    def inspect_inbound(self, app, message):
        result = yield
        if not message.flags:
            message.hold("no inspector vouched for it")
        return result


def test_a_wrapper_inspector_sees_what_the_others_decided(config, sundae):
    app = app_with(config, vetting=Vetting(), inspector=Inspector())
    (vouched,) = ingest(make_mail(body="A refund, please."), config=config, app=app)
    assert vouched.status == "accepted"
    (unvouched,) = ingest(make_mail(body="Hello there."), config=config, app=app)
    assert (unvouched.status, unvouched.reason) == ("ignored", "no inspector vouched for it")
    assert decisions(Message.get_by_id(unvouched.message.id))[-1][:2] == (
        "inspector:vetting",
        "inbound mail held",
    )


class RaisingWrapper:
    """A wrapper inspector whose own check fails after the others ran."""

    @hookimpl(wrapper=True)
    def inspect_inbound(self, app, message):
        result = yield
        raise RuntimeError("the scanner is down")
        return result


def test_a_wrapper_inspector_that_raises_holds_the_mail(config, sundae):
    app = app_with(config, scanner=RaisingWrapper())
    (delivered,) = ingest(make_mail(), config=config, app=app)
    assert (delivered.status, delivered.run) == ("ignored", None)
    stored = Message.get_by_id(delivered.message.id)
    assert any("the scanner is down" in flag for flag in stored.flags)


class BadQuery:
    """An inspector whose query fails, which it catches and carries on from."""

    @hookimpl
    def inspect_inbound(self, app, message):
        from protege.db import database

        try:
            database.execute_sql("SELECT missing_column FROM no_such_table")
        except Exception:
            message.flag("could not look the sender up")


def test_an_inspector_s_failed_query_does_not_lose_the_mail(config, sundae):
    # On PostgreSQL a failed statement spoils the transaction it is in, caught or not: it
    # must stay inside the inspection's savepoint, not take the storing transaction down.
    app = app_with(config, lookup=BadQuery())
    (delivered,) = ingest(make_mail(), config=config, app=app)
    stored = Message.get_by_id(delivered.message.id)
    assert "could not look the sender up" in stored.flags
    assert AuditEntry.select().where(AuditEntry.subject_kind == "message").count() >= 1


class Slow:
    """An inspector that takes longer than inspection should."""

    @hookimpl
    def inspect_inbound(self, app, message):
        time.sleep(inspection.SLOW_SECONDS + 0.05)  # at least that long, whatever the load


def test_a_slow_inspector_is_logged_by_name(config, sundae, caplog):
    app = app_with(config, sluggish=Slow())
    (delivered,) = ingest(make_mail(), config=config, app=app)
    assert delivered.status == "accepted"  # slow is not failed
    assert any("inspect_inbound of plugin sluggish took" in r.message for r in caplog.records)
