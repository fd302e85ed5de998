"""``protege doctor``: every problem with the configuration, plugins, tools and toolkits."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from protege.cli.output import echo_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protege.config import Config
    from protege.plugins import PluginHost
    from protege.registry.offered import Offered

NO_MODEL = (
    "no model is set: runs cannot answer anyone until [model] model in protege.toml (or "
    "PROTEGE_MODEL) names one, with its endpoint and key"
)
NO_REPLY = (
    "no send_email tool is installed: agents cannot answer anyone; install the built-in "
    'tools with `pip install "protege[builtins]"` (or `protege install protege-mail`)'
)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(as_json: bool) -> None:
    """Report broken plugins, rejected tool classes, shadowed tools, plugin settings,
    toolkit members nothing offers and a missing send_email; exit 1 if any."""
    import attrs

    from protege.cli.state import manifest
    from protege.cli.state import plugins as plugin_host
    from protege.config import load_config
    from protege.plugins import normalize

    config = load_config()
    found = manifest()
    transports, stores = _offered(plugin_host())
    # A plugin's store is made as the installation makes it: with its checked settings.
    refused = {
        normalize(report.plugin.source.distribution): report.settings_error
        for report in found.plugins
        if report.settings_error
    }
    blobs, blob_problem = _blob_store(attrs.evolve(config, plugins=found.settings), stores, refused)
    problems = [{"kind": "blobs", "message": blob_problem}] if blob_problem else []
    transport_problem = transports.refusal(config.mail.transport)
    if transport_problem:
        problems.append({"kind": "mail", "message": transport_problem})
    problems += [
        {"kind": kind, "message": line}
        for kind, offered in (("mail", transports), ("blobs", stores))
        for line in offered.problems
    ]
    if not config.model.model:
        problems.append({"kind": "model", "message": NO_MODEL})
    problems += [_problem("limits", line) for line in _unpriced(config)]
    problems += [{"kind": "tools", "message": line} for line in found.problems()]
    if not found.can_reply:
        problems.append({"kind": "mail", "message": NO_REPLY})
    problems += [{"kind": "commands", "message": line} for line in command_clashes()]
    database = _database(config.database_url, found)
    problems += database.pop("problems")
    if database["state"] == "current":
        problems += [_problem("limits", line) for line in _limit_strays(config)]
    warnings = database.pop("warnings")
    mail_servers = _mail_servers(config, database["state"] == "current")
    for found_at in (*mail_servers["mailboxes"], mail_servers["submission"] or {}):
        problems += [_problem("mail", line) for line in found_at.pop("problems", ())]
        warnings += [_problem("mail", line) for line in found_at.pop("warnings", ())]
    report = {
        "config": str(config.path) if config.path else None,
        "database": database,
        "blobs": blobs,
        "senders": _senders(config),
        "tools": len(found),
        "plugins": len(found.plugins),
        **mail_servers,
        "problems": problems,
        "warnings": warnings,
    }
    if os.environ.get("PROTEGE_DEBUG"):
        print_tracebacks(found)
    if as_json:
        echo_json(report)
    else:
        click.echo(f"config: {config.path or 'none found (embedded defaults)'}")
        click.echo(f"database: {database['url']}: {database['state']}")
        click.echo(f"blobs: {blobs}")
        click.echo(f"senders: {report['senders']}")
        click.echo(f"tools: {len(found)} offered, from {len(found.plugins)} plugin(s)")
        for box in mail_servers["mailboxes"]:
            click.echo(f"mailbox: {_mailbox_line(box)}")
        if mail_servers["submission"] is not None:
            click.echo(f"submission: {_submission_line(mail_servers['submission'])}")
        for problem in problems:
            click.echo(f"problem: {problem['message']}")
        for warning in warnings:
            click.echo(f"warning: {warning['message']}")
        if not problems:
            click.echo("No problems found.")
    if problems:
        raise click.exceptions.Exit(1)


def command_clashes() -> list[str]:
    """Plugin commands hidden by a built-in command of the same name, one line each."""
    from protege.cli import cli

    group: Any = cli
    group.plugin_commands()
    return list(group.clashes)


def print_tracebacks(found: Any) -> None:
    """Print on standard error the traceback of each plugin that failed (PROTEGE_DEBUG=1)."""
    for report in found.plugins:
        plugin = report.plugin
        traces = [plugin.traceback, *(f.traceback for f in plugin.failures.values())]
        for trace in dict.fromkeys(t for t in traces if t):  # in order, each once
            click.echo(
                f"traceback of plugin {plugin.source.distribution}:\n{trace.rstrip()}",
                err=True,
            )


def _database(url: str, found: Any) -> dict[str, Any]:
    from protege import db
    from protege.migrations import applied_versions, pending
    from protege.toolkits import describe_stale, stale_members

    shown = db.redacted(url)
    nothing: dict[str, Any] = {"problems": [], "warnings": []}
    if not db.exists(url):
        return {"url": shown, "state": "none yet (run `protege sync`)", **nothing}
    try:
        db.connect(url)
    except db.DatabaseError as error:
        unreachable = [_problem("database", error)]
        return {"url": shown, "state": "unreachable", "problems": unreachable, "warnings": []}
    if not applied_versions(db.database):
        return {"url": shown, "state": "none yet (run `protege sync`)", **nothing}
    waiting = pending(db.database)
    if waiting:
        message = [_problem("database", f"{len(waiting)} migration(s) pending: run `protege sync`")]
        return {"url": shown, "state": "out of date", "problems": message, "warnings": []}
    stale = [
        _problem("toolkits", describe_stale(name, ids, found))
        for name, ids in stale_members(found).items()
    ]
    withheld, bypassed = _approval_findings(found)
    return {"url": shown, "state": "current", "problems": stale + withheld, "warnings": bypassed}


def _unpriced(config: Config) -> list[str]:
    """Money limits that cannot count what the configured model costs."""
    if not config.limits.money_limited():
        return []
    if config.model.highest_price() is None:
        return [
            "a money limit is set but no model has a price: set [model.prices] "
            "(per million tokens), or the limit counts nothing"
        ]
    if config.model.model and config.model.price_of(config.model.model) is None:
        return [
            f"a money limit is set but the model {config.model.model!r} has no price in "
            "[model.prices]: its answers are charged at the highest prices there"
        ]
    return []


def _limit_strays(config: Config) -> list[str]:
    from protege.models import Agent

    return config.limits.strays([agent.name for agent in Agent.select(Agent.name)])


def _approval_findings(found: Any) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Tools that must wait for approval but have no approver (a problem: they are never
    offered); grants whose approval another grant lets a sender skip, and grants opening
    the whole mail archive to strangers (warnings: either may be meant)."""
    from protege.models import Agent
    from protege.models.resolution import bypassed_approvals, unapprovable

    withheld, bypassed = [], []
    for agent in Agent.select().order_by(Agent.name):
        withheld += [_problem("approvals", line) for line in unapprovable(agent, found)]
        bypassed += [
            _problem("approvals", bypass.describe(agent.name))
            for bypass in bypassed_approvals(agent, found)
        ]
        for grant in sorted(agent.grants, key=lambda g: g.toolkit.name):
            if grant.whole_archive and not any(rule.kind == "allow" for rule in grant.rules):
                bypassed.append(
                    _problem(
                        "mail",
                        f"{agent.name}: {grant.toolkit.name} opens the whole mail archive and "
                        "its gate has no allow rule: anyone who writes to "
                        f"{agent.name} can have its mail tools reach all of its mail",
                    )
                )
    return withheld, bypassed


SENDER_MODES = {
    "enforce": "allow rules and approvers admit only mail that proves its sender (enforce)",
    "report": "verdicts are shown but not used: allow rules take From as written (report)",
    "off": "not checked: allow rules take From as written (off)",
}


def _senders(config: Config) -> str:
    """How sender authentication decides, in a line (``[mail.authentication]``)."""
    settings = config.mail.authentication
    line = SENDER_MODES[settings.mode]
    if settings.trusted_relays:
        line += f"; relays trusted: {', '.join(settings.trusted_relays)}"
    return line


def _problem(kind: str, message: object) -> dict[str, str]:
    return {"kind": kind, "message": str(message)}


def _offered(host: PluginHost) -> tuple[Offered, Offered]:
    """The mail transports and blob stores the plugins (protege's own included) register."""
    from protege.installation import offered_stores, offered_transports

    return offered_transports(host), offered_stores(host)


def _blob_store(
    config: Config, stores: Offered, refused: Mapping[str, str]
) -> tuple[str, str | None]:
    """Where files are kept, and for S3 (or a plugin's store) whether it can be reached."""
    from protege.config import LOCAL, S3
    from protege.errors import ProtegeError
    from protege.plugins import error_line

    settings = config.blobs
    refusal = stores.refusal(settings.store)
    if refusal is not None:
        return f"{settings.store}, unknown", refusal
    if settings.store == LOCAL:
        return f"local, in {config.data_dir / 'blobs'}", None
    where = f"the {settings.store} store"
    if settings.store == S3:
        where = f"s3://{settings.bucket}/{settings.prefix}"
        if settings.endpoint_url:
            where += f" at {settings.endpoint_url}"
    try:
        stores.build(settings.store, config, refused).check()
    except ProtegeError as error:
        return f"{where}, not reachable", f"blob store: {error}"
    except Exception as error:  # a plugin's store, failing in its own way
        return f"{where}, not reachable", f"blob store: {error_line(error)}"
    return f"{where}, reachable", None


def _mail_servers(config: Config, migrated: bool) -> dict[str, Any]:
    """Each mailbox and the submission server, logged in to and left as they were."""
    from protege.gateway.probe import probe_mailbox, probe_submission

    checkpoints: dict[str, Any] = {}
    if migrated and config.mail.imap:
        from protege.models.mailboxes import MailboxCheckpoint

        checkpoints = {row.name: row for row in MailboxCheckpoint.select()}
    boxes = [
        probe_mailbox(name, settings, config.root, checkpoints.get(name))
        for name, settings in sorted(config.mail.imap.items())
    ]
    if migrated:
        from protege.gateway.inbound import agent_for

        for box in boxes:
            if agent_for(box["agent"]) is None:
                box["problems"].append(
                    f"mailbox {box['mailbox']} is for {box['agent']}, which is no agent's "
                    "address (`protege agents create`)"
                )
    submission = None
    if config.mail.transport == "submission":
        from protege.delivery.submission import SubmissionTransport
        from protege.errors import ConfigError

        try:
            submission = probe_submission(SubmissionTransport(config))
        except ConfigError as error:
            submission = {"problems": [str(error)]}
    return {"mailboxes": boxes, "submission": submission}


def _mailbox_line(box: dict[str, Any]) -> str:
    if "folders" not in box:
        return f"{box['mailbox']} ({box['server']}): could not log in"
    waits = ""
    checkpoint = box.get("checkpoint")
    if checkpoint is not None:
        waits = f", checkpoint UID {checkpoint['last_uid']}"
        if "waiting" in checkpoint:
            waits += f", {checkpoint['waiting']} waiting"
    else:
        waits = ", not read yet"
    return (
        f"{box['mailbox']} for {box['agent']} ({box['server']}): logged in; "
        f"{len(box['folders'])} folder(s); IDLE {'yes' if box.get('idle') else 'no'}; "
        f"{box.get('messages', '?')} message(s) in the folder read{waits}"
    )


def _submission_line(found: dict[str, Any]) -> str:
    if "auth" not in found:
        return "could not log in" if "server" in found else "not usable"
    return (
        f"{found['server']}: logged in as {found['username']} "
        f"(AUTH {' '.join(found['auth']) or '?'})"
    )
