"""The demo: The Scoop's thread from the toolkits seed, end to end, on the embedded defaults.

Three emails go through the real SMTP gateway on loopback; the runs they queue use the real
harness and model client; the replies land in the outbox. Everything lives in a fresh folder
(SQLite, local files). The story itself is ``the_scoop.scenario``; ``protege demo`` (see
``the_scoop.commands``) plays it.
"""

from __future__ import annotations

import datetime
import email
import importlib.resources
import os
import smtplib
import sys
import tempfile
import zoneinfo
from email import policy
from email.message import EmailMessage
from pathlib import Path

import attrs
import click

from protege import Config, Installation, blobs, open_installation
from protege.admin import (
    AuthenticationSettings,
    Scheduler,
    load_config,
    start_gateway,
)
from protege.models import Agent, Blob, Message, Responsibility, Run, Toolkit
from protege.testing import DkimKey, ScriptedModel, Step, free_port
from the_scoop import scenario as story

DEFAULT_REAL_MODEL = "gpt-4.1-mini"


def run_demo(folder: Path | None = None) -> Path:
    """Play the scenario in ``folder`` (default: a new temporary folder) and print it."""
    folder = Path(folder or tempfile.mkdtemp(prefix="the-scoop-"))
    folder.mkdir(parents=True, exist_ok=True)
    config, scripted = demo_config(folder)
    signer = DkimKey.from_pem(story.SHOP_DOMAIN, DEMO_KEY_SELECTOR, demo_key(folder))
    pinned = AuthenticationSettings(offline=True, dns={signer.name: signer.record})
    config = attrs.evolve(config, mail=attrs.evolve(config.mail, authentication=pinned))
    model = ScriptedModel().start() if scripted else None
    if model is not None:
        config = attrs.evolve(config, model=attrs.evolve(config.model, base_url=model.base_url))
        os.environ.setdefault("OPENAI_API_KEY", "scripted")
        click.echo("The Scoop demo, with the scripted model (no model is configured: set")
        click.echo("[model] in protege.toml, or OPENAI_API_KEY, to use a real one).")
    else:
        where = config.model.base_url or os.environ.get("OPENAI_BASE_URL") or "OpenAI"
        click.echo(f"The Scoop demo, with the model {config.model.model} at {where}.")
    click.echo(f"Everything is kept in {folder}\n")
    try:
        _run(config, model, signer)
    finally:
        if model is not None:
            model.stop()
    _say_how_to_open(folder, config, signer)
    return folder


def demo_key(folder: Path) -> bytes:
    """The demo's DKIM signing key for The Scoop (PEM), made once per demo folder."""
    path = folder / "data" / "demo-dkim.pem"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(DkimKey.generate(story.SHOP_DOMAIN, DEMO_KEY_SELECTOR).private_key)
        path.chmod(0o600)
    return path.read_bytes()


DEMO_SETTINGS = """# Written by `protege demo`: protege's commands run here open the demo's data.
tool_modules = ["the_scoop.tools"]
data_dir = "data"

# The Scoop's mail server signs its people's mail; the demo's key is pinned here, and no
# DNS server is asked, so senders are authenticated as in the demo.
[mail.authentication]
offline = true

[mail.authentication.dns]
"{name}" = "{record}"
"""
DEMO_KEY_SELECTOR = "demo"


def _say_how_to_open(folder: Path, config: Config, signer: DkimKey) -> None:
    """Leave a protege.toml naming the demo's data in ``folder`` (unless one is there), and
    say how to look at it all in the dashboard."""
    settings = folder / "protege.toml"
    written = DEMO_SETTINGS.format(name=signer.name, record=signer.record)
    if not settings.exists():
        settings.write_text(written)
    click.echo("\n=== See it all in the dashboard (runs, events, toolkits, who may use what):")
    for line in _hints(folder, config, settings.read_text() == written):
        click.echo(f"    {line}")


def _hints(folder: Path, config: Config, ours: bool) -> list[str]:
    """Shell lines that open the demo's data in the dashboard, from a fresh shell: the
    ``protege`` this demo ran is found by activating its environment (``make demo`` runs
    it from .venv without activating it)."""
    lines = []
    activate = Path(sys.prefix) / "bin" / "activate"
    if sys.prefix != sys.base_prefix and activate.exists():
        lines.append(f". {activate}  # protege's environment")
    if ours:
        lines.append(f"cd {folder}")
    else:  # the folder has settings of its own: name the demo's data instead
        lines.append(f"export PROTEGE_DATABASE_URL={config.database_url}")
        lines.append(f"export PROTEGE_DATA_DIR={config.data_dir}")
    lines.append("protege operators add admin  # asks for a password")
    lines.append("protege dashboard  # then open http://127.0.0.1:8025/")
    return lines


def demo_config(folder: Path) -> tuple[Config, bool]:
    """The demo's configuration in ``folder``, and whether it plays with the scripted model
    (when neither protege.toml's [model] nor the API key variable names a real one)."""
    settings = load_config().model
    key = os.environ.get(settings.api_key_env)
    scripted = not settings.model and not key
    model = settings.model or ("scripted" if scripted else DEFAULT_REAL_MODEL)
    if not settings.model:  # the scripted model and gpt-4.1-mini both read images and PDFs
        settings = attrs.evolve(settings, input=("text", "image", "pdf"))
    data = folder / "data"
    config = attrs.evolve(
        Config.defaults(folder),
        tool_modules=("the_scoop.tools",),
        data_dir=data,
        database_url=f"sqlite:///{data / 'protege.db'}",
        model=attrs.evolve(settings, model=model),
    )
    return config, scripted


def _run(config: Config, model: ScriptedModel | None, signer: DkimKey) -> None:
    with open_installation(config) as installation, installation.activated():
        installation.sync()
        _play(installation, config, model, signer)


def _play(
    installation: Installation, config: Config, model: ScriptedModel | None, signer: DkimKey
) -> None:
    sundae = Agent.create(name="Sundae", address=story.SUNDAE, instructions=story.INSTRUCTIONS)
    for name, description, members, rules, approval in story.TOOLKITS:
        grant = sundae.grant(
            Toolkit.create(name=name, description=description, member_tool_ids=members)
        )
        for kind, pattern in rules:
            grant.add_rule(kind, pattern)
        gate = ", ".join(f"{kind} {pattern}" for kind, pattern in rules) or "open to everyone"
        if approval is not None:
            grant.require_approval(*approval)
            approvers, mailed = approval
            gate += f"; each call waits for approval by {', '.join(approvers)}"
            gate += f" (requests mailed to {', '.join(mailed)})"
        click.echo(f"Sundae holds {name} ({', '.join(members)}): {gate}")
    default_tools = Toolkit.default_tools()
    defaults = default_tools.member_tool_ids if default_tools is not None else []
    click.echo(f"and Default Tools ({', '.join(defaults)}): open to everyone.\n")
    gateway = start_gateway(config, "127.0.0.1", free_port(), app=installation)
    try:
        previous: Message | None = None
        for number, (sender, subject, body) in enumerate(story.EMAILS):
            if sender in (story.ANSWER, story.FORGED):
                raw = _answer(subject or "", body, _latest_request(), config)
            else:
                raw = _compose(story.SUNDAE, sender, subject, body, previous, photo=number == 0)
            data = raw.as_bytes()
            if sender != story.FORGED and _domain(str(raw["From"])) == story.SHOP_DOMAIN:
                data = signer.sign(data)  # as The Scoop's mail server signs its people's mail
            with smtplib.SMTP(gateway.hostname, gateway.port, timeout=30) as client:
                client.sendmail(story.ENVELOPE_SENDER, [str(raw["To"])], data)
            _show_email(number + 1, raw)
            _show_verdict()
            if model is not None:  # scripted once the mail is in: it names its photo
                model.script(*_with_photo(story.SCRIPT[number]))
            for run in installation.run_queued():
                _show_run(run)
            previous = (
                Message.select()
                .where(
                    (Message.direction == "outbound")
                    & ~Message.subject.startswith(APPROVAL_SUBJECT)
                )
                .order_by(Message.id.desc())
                .first()
            )
    finally:
        gateway.stop()
    _show_outbox(config)
    _scouts_morning(installation, model)


APPROVAL_SUBJECT = "Approval needed"


def _with_photo(steps: list[Step]) -> list[Step]:
    """``steps`` with the photo's token where the story names it."""
    photo = Blob.select().where(Blob.filename == story.PHOTO).order_by(Blob.id).first()
    if photo is None:
        return steps
    return [
        attrs.evolve(
            step,
            calls=tuple(
                (name, arguments.replace(story.PHOTO_BLOB_ID, photo.token))
                for name, arguments in step.calls
            ),
        )
        for step in steps
    ]


def _latest_request() -> Message:
    found = (
        Message.select()
        .where((Message.direction == "outbound") & Message.subject.startswith(APPROVAL_SUBJECT))
        .order_by(Message.id.desc())
        .first()
    )
    if found is None:
        raise click.ClickException("the story answers an approval request nobody sent")
    return found


def _answer(sender: str, body: str, request: Message, config: Config) -> EmailMessage:
    """An approver's reply to an approval request, as a mail client writes it: to its
    Reply-To, threaded under its Message-ID, the request quoted below."""
    sent = email.message_from_bytes(blobs.read(request.raw_blob, config), policy=policy.default)
    message = EmailMessage()
    message["From"] = sender
    message["To"] = str(sent["Reply-To"] or sent["From"])
    message["Subject"] = f"Re: {request.subject}"
    message["In-Reply-To"] = request.message_id
    message["References"] = request.message_id
    message["Message-ID"] = email.utils.make_msgid(domain=sender.split("@")[1].rstrip(">"))
    quoted = "\n".join(f"> {line}" for line in request.body_text.splitlines())
    message.set_content(f"{body}\n\n{quoted}\n")
    return message


def _compose(
    to: str,
    sender: str,
    subject: str | None,
    body: str,
    previous: Message | None,
    photo: bool = False,
) -> EmailMessage:
    """An email as the person's mail client would write it: replies thread under the last
    message the agent sent; ``photo`` attaches the picture of the melted order."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    if previous is None:
        message["Subject"] = subject
    else:  # reply-all, as people do
        me = email.utils.parseaddr(sender)[1].lower()
        others = [a for a in [*previous.to_addresses, *previous.cc_addresses] if a.lower() != me]
        if others:
            message["Cc"] = ", ".join(others)
        message["Subject"] = f"Re: {previous.subject.removeprefix('Re: ')}"
        message["In-Reply-To"] = previous.message_id
        message["References"] = " ".join([*previous.reference_ids, previous.message_id])
    message["Message-ID"] = email.utils.make_msgid(domain=sender.split("@")[1].rstrip(">"))
    message.set_content(body)
    if photo:
        picture = importlib.resources.files("the_scoop").joinpath(story.PHOTO).read_bytes()
        message.add_attachment(picture, maintype="image", subtype="png", filename=story.PHOTO)
    return message


def _domain(mailbox: str) -> str:
    return email.utils.parseaddr(mailbox)[1].rpartition("@")[2].lower()


def _show_verdict() -> None:
    """What the gateway made of the mail just sent: who it proved, and what it did."""
    stored = Message.select().where(Message.direction == "inbound").order_by(-Message.id).get()
    verdict = stored.verdict
    if verdict.authenticated:
        proof = f"proves it is from {verdict.domain} ({verdict.method})"
    else:
        proof = f"does NOT prove it is from {verdict.from_domain}: no valid signature"
    click.echo(f"    protege: the mail {proof}; {stored.status}")
    for flag in stored.flags:
        if flag.startswith("approval answer"):
            click.echo(f"    protege: {flag.removeprefix('approval answer: ')}")


def _show_email(number: int, message: EmailMessage) -> None:
    copied = f", cc {message['Cc']}" if message["Cc"] else ""
    click.echo(f"=== Email {number}: {message['From']} -> {message['To']}{copied}")
    click.echo(f"    Subject: {message['Subject']}")
    body = message.get_body(("plain",))
    text = body.get_content().strip() if body is not None else ""
    said = text.split("\n\n>", 1)[0]  # what they wrote, not the request they quoted
    click.echo(f"    {said}")
    if said != text:
        click.echo("    (the approval request quoted below)")
    for attachment in message.iter_attachments():
        click.echo(f"    Attached: {attachment.get_filename()}")


def _show_run(run: Run) -> None:
    timeline = run.timeline()
    offered: list[str] = next(
        (e.payload["tools"] for e in timeline if e.kind == "model_request"), []
    )
    sender = run.message.sender if run.message is not None else "a responsibility"
    resumed = " (resumed: an approval was answered)" if _answered(timeline) else ""
    click.echo(f"--- run {run.id} for {sender}{resumed}: {run.status}")
    click.echo(f"    tools offered: {', '.join(offered) or 'none'}")
    results: dict[str, list] = {}
    for event in (e for e in timeline if e.kind == "tool_result"):
        results.setdefault(event.payload["call_id"], []).append(event.payload)
    refused = {e.payload["call_id"] for e in timeline if e.kind == "tool_refused"}
    answers = {e.payload["call_id"]: e.payload for e in timeline if _answered([e])}
    asked = {e.payload["call_id"]: e.payload for e in timeline if e.kind == "approval_requested"}
    for event in (e for e in timeline if e.kind == "tool_call"):
        call_id, tool = event.payload["call_id"], event.payload["tool"]
        found = results.get(call_id, [])
        result = found[-1] if found else None
        if call_id in refused and not (result and result.get("awaiting_approval")):
            state = "REFUSED (not granted for this sender)"
        elif result is None:
            state = "not run"
        elif result.get("awaiting_approval"):
            state = f"waits for approval (asked {', '.join(asked[call_id]['notified'])})"
        elif result.get("after_approval"):
            answer = answers.get(call_id, {})
            decided = f"{answer.get('decision', 'answered')} by {answer.get('by', '?')}"
            ran = "ran" if answer.get("decision") == "approved" else "not run"
            failed = ran == "ran" and not result["ok"]
            state = f"{decided}, {ran}" + (", failed" if failed else "")
        else:
            state = "ran" if result["ok"] else "ran, failed"
            shown = [part["filename"] for part in result.get("parts") or []]
            state += f", showed {', '.join(shown)} to the model" if shown else ""
        if call_id in answers and answers[call_id].get("approval") is None:
            state = f"approved at once ({answers[call_id]['by']} asked), {state}"
        click.echo(f"    {tool}: {state}")
    if run.error:
        click.echo(f"    error: {run.error}")
    click.echo("")


def _answered(timeline: list) -> bool:
    return any(e.kind in ("approval_answered", "approval_expired") for e in timeline)


def _show_outbox(config: Config) -> None:
    outbox = sorted(Path(config.data_dir, "outbox").glob("*.eml"), key=_sent_order)
    click.echo(f"=== The outbox: {len(outbox)} mails")
    for path in outbox:
        sent = email.message_from_bytes(path.read_bytes(), policy=policy.default)
        copied = f", cc {sent['Cc']}" if sent["Cc"] else ""
        click.echo(f"--- {sent['From']} -> {sent['To']}{copied}")
        click.echo(f"    Subject: {sent['Subject']}")
        for line in sent.get_content().strip().splitlines():
            click.echo(f"    {line}")


def _sent_order(path: Path) -> int:
    return path.stat().st_mtime_ns  # the order they were sent in


def _scouts_morning(installation: Installation, model: ScriptedModel | None) -> None:
    """Scout's morning stock report: one responsibility, queued by the scheduler at its due
    time (a Monday, 07:00 in Berlin, on the scheduler's clock) and run by a worker."""
    scout = Agent.create(name="Scout", address=story.SCOUT, instructions=story.SCOUT_INSTRUCTIONS)
    for kind, pattern in story.SCOUT_ACCESS:
        scout.add_access_rule(kind, pattern)
    for name, description, members, proactive in story.SCOUT_TOOLKITS:
        toolkit = Toolkit.get_or_none(Toolkit.name == name) or Toolkit.create(
            name=name, description=description, member_tool_ids=members
        )
        scout.grant(toolkit, allow_proactive=proactive)
    due = datetime.datetime(2026, 3, 2, 7, tzinfo=zoneinfo.ZoneInfo(story.STOCK_REPORT_TIMEZONE))
    report = Responsibility.create(
        agent=scout,
        name=story.STOCK_REPORT,
        prompt=story.STOCK_REPORT_INSTRUCTIONS,
        schedule=story.STOCK_REPORT_SCHEDULE,
        timezone=story.STOCK_REPORT_TIMEZONE,
        scheduled_from=(due - datetime.timedelta(hours=1))
        .astimezone(datetime.UTC)
        .replace(tzinfo=None),
    )
    click.echo(
        f"\n=== A responsibility: Scout's {report.name!r}, {report.schedule} ({report.timezone})"
    )
    click.echo("    Operations (check_flavor_stock, send_email) allows scheduled runs;")
    click.echo("    Finance (process_refund) does not.")
    if model is not None:
        model.script(*story.SCOUT_SCRIPT)
    clock = due + datetime.timedelta(seconds=30)
    for queued in Scheduler(installation, clock=lambda: clock).tick().queued:
        click.echo(f"    the scheduler, at {clock:%a %d %b %H:%M %Z}, queued run {queued.id}")
    for run in installation.run_queued():
        _show_run(run)
    report_mail = (
        Message.select()
        .where((Message.direction == "outbound") & (Message.agent == scout))
        .order_by(Message.id.desc())
        .first()
    )
    if report_mail is not None:
        click.echo(f"--- {report_mail.sender} -> {', '.join(report_mail.to_addresses)}")
        click.echo(f"    Subject: {report_mail.subject}")
        for line in report_mail.body_text.strip().splitlines():
            click.echo(f"    {line}")
