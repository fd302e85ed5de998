"""Running agents and tools in tests, through the same paths production uses."""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from protege import blobs
from protege.config import Config
from protege.context import Call, RunContext, queueing
from protege.delivery import send_pending
from protege.errors import ConfigError
from protege.harness import execute
from protege.harness.dispatch import Dispatcher
from protege.harness.fence import Fence
from protege.installation import Installation, open_installation
from protege.mail import record_inbound, reply_headers
from protege.models import Agent, Message, MessageAttachment, Responsibility, Run
from protege.plugins import normalize
from protege.queue import queue_reply, queue_scheduled
from protege.registry import Manifest
from protege.result import Result

T = TypeVar("T")


def run_reply(
    agent: Agent,
    *,
    sender: str,
    body: str,
    subject: str = "",
    reply_to: Message | None = None,
    attachments: Sequence[tuple[str, str, bytes]] = (),
    cc: Sequence[str] = (),
    installation: Installation | None = None,
    config: Config | None = None,
    manifest: Manifest | None = None,
    send_mail: bool = True,
) -> Run:
    """Deliver an email from ``sender`` to ``agent`` and run the agent on it to the end,
    then send the mail the run queued (unless ``send_mail`` is false: it stays pending).

    ``reply_to`` threads the email as a reply to an earlier message (it joins that thread
    only if ``sender`` took part in it); ``attachments`` are (filename, declared content
    type, bytes), stored as the gateway stores them; ``cc`` copies others on it. The run uses
    ``installation`` (the ``protege_app`` fixture), or one made of ``config`` and
    ``manifest``; nothing is read from the working directory.
    """
    app = _installation(installation, config, manifest, "run_reply")
    headers = reply_headers(reply_to) if reply_to is not None else {}
    message = record_inbound(agent, sender=sender, body=body, subject=subject, cc=cc, **headers)
    attach_files(message, attachments, app.config)
    run = execute(queue_reply(message), app)
    if send_mail:
        send_pending(app.config, transport=app.transport)
    return run


def attach_files(message: Message, files: Sequence[tuple[str, str, bytes]], config: Config) -> list:
    """Store ``files`` (filename, declared content type, bytes) as attachments of
    ``message``, in order, as the gateway does with mail that arrives; returns their blobs."""
    stored = []
    start = MessageAttachment.select().where(MessageAttachment.message == message.id).count()
    for position, (filename, content_type, data) in enumerate(files, start):
        blob = blobs.store(data, filename=filename, content_type=content_type, config=config)
        MessageAttachment.create(message=message, blob=blob, position=position)
        stored.append(blob)
    return stored


def run_scheduled(
    responsibility: Responsibility,
    *,
    installation: Installation | None = None,
    config: Config | None = None,
    manifest: Manifest | None = None,
    send_mail: bool = True,
) -> Run:
    """Run ``responsibility`` once, to the end, and send its mail (with an installation
    and ``send_mail`` as ``run_reply``)."""
    app = _installation(installation, config, manifest, "run_scheduled")
    run = execute(queue_scheduled(responsibility), app)
    if send_mail:
        send_pending(app.config, transport=app.transport)
    return run


def _installation(
    installation: Installation | None,
    config: Config | None,
    manifest: Manifest | None,
    caller: str,
) -> Installation:
    if installation is not None:
        return installation
    if config is None or manifest is None:
        raise TypeError(
            f"{caller} needs installation= (the protege_app fixture), or config= and manifest="
        )
    # The database is the fixture's, already connected: only the rest is made here.
    return open_installation(config, manifest=manifest, connect=False)


def make_context(
    agent: Agent | None = None,
    *,
    sender: str | None = "someone@example.test",
    subject: str = "",
    body: str = "",
    message: Message | None = None,
    responsibility: Responsibility | None = None,
    config: Config,
    queue_mail: Callable[..., Any] | None = None,
    queued: list[dict[str, Any]] | None = None,
    authenticated: bool = True,
    whole_archive: Iterable[str] = (),
    deliver: Callable[..., Any] | None = None,
    deliveries: list[dict[str, Any]] | None = None,
) -> RunContext:
    """A run context for calling a tool directly: a reply run from ``sender`` (or to
    ``message``) by default, a scheduled run when ``responsibility`` is given. Records need
    no database: an agent and message that are not saved do. ``config`` is what the tool
    sees as ``context.config`` (``protege_app.config`` in a test).

    Mail the tool queues (``context.queue_mail``) is appended to ``queued`` as
    ``{"mail": ..., "attachments": [...]}`` and answered ``{"status": "recorded"}``, unless
    ``queue_mail`` is given: it is called as ``queue_mail(mail, attachments=...)`` and its
    answer is the tool's. Through ``run_tool``, mail queued once the call has returned or
    timed out is refused (``CallOver``), as in a run. ``deliver`` and ``deliveries`` are
    the deprecated names of ``queue_mail`` and ``queued``.

    The made-up message's sender counts as proven (the test speaks for them) unless
    ``authenticated`` is false. Mail tools show the mail that sender took part in; the
    tools named in ``whole_archive`` show all of the agent's mail, as through a grant
    that opens the whole archive."""
    agent = agent or Agent(name="Test Agent", address="agent@example.test")
    if responsibility is None and message is None:
        message = Message(
            agent=agent,
            direction="inbound",
            sender=sender,
            to_addresses=[agent.address],
            subject=subject,
            body_text=body,
            message_id="<test@example.test>",
            thread_key="<test@example.test>",
            sender_authenticated=authenticated,
        )
    queue_mail = _renamed(queue_mail, deliver, "deliver", "queue_mail")
    queued = _renamed(queued, deliveries, "deliveries", "queued")
    recorded = queued if queued is not None else []

    def record(mail: Any, attachments: Any = ()) -> dict[str, Any]:
        recorded.append({"mail": mail, "attachments": list(attachments)})
        return {"status": "recorded"}

    given = queue_mail or record

    def queue(mail: Any, attachments: Any = (), *, call: Call | None = None) -> Any:
        if call is None:
            return given(mail, attachments=attachments)
        with queueing(call):  # called through run_tool: held to the rule dispatch keeps
            return given(mail, attachments=attachments)

    return RunContext(
        agent=agent,
        message=message,
        responsibility=responsibility,
        mail_queue=queue,
        config=config,
        logger=logging.getLogger("protege.testing"),
        correlation_id="test",
        whole_archive=frozenset(whole_archive),
    )


def _renamed(value: T | None, old: T | None, old_name: str, name: str) -> T | None:
    """``value``, or what was given by its deprecated name ``old_name`` (with a warning)."""
    if old is None:
        return value
    if value is not None:
        raise TypeError(f"make_context takes {name}= or its old name {old_name}=, not both")
    warnings.warn(
        f"make_context's {old_name}= is deprecated: pass {name}=",
        DeprecationWarning,
        stacklevel=3,
    )
    return old


def run_tool(tool_id: str, *, context: RunContext, manifest: Manifest, **input: Any) -> Result:
    """Call one tool as dispatch would: schema checked, timeout applied, errors turned into
    failures. The tool is looked up in ``manifest`` (``protege_app.manifest`` in a test)."""
    entry = manifest.get(tool_id)
    if entry is None:
        raise LookupError(f"no tool {tool_id!r} in the manifest (see `protege tools`)")
    dispatcher = Dispatcher([entry], context, Fence(), max_result_bytes=64 * 1024)
    call = {"id": "call_test", "function": {"name": tool_id, "arguments": _json(input)}}
    return asyncio.run(dispatcher.dispatch(call)).result


def _json(values: dict[str, Any]) -> str:
    return json.dumps(values, default=str)


def with_plugin_settings(
    installation: Installation, distribution: str, settings: Mapping[str, Any]
) -> Installation:
    """``installation`` as it would be with ``settings`` as the ``[plugins.DISTRIBUTION]``
    table of ``protege.toml``: checked as protege checks the file, so a test sees what its
    tools get through ``context.config.plugin_settings(DISTRIBUTION)``. Raises
    ``ConfigError`` (a ``ProtegeError``) with protege's message when the plugin refuses
    them."""
    name = normalize(distribution)
    config = attrs.evolve(
        installation.config, plugins={**installation.config.plugins, name: dict(settings)}
    )
    built = open_installation(config, connect=False, plugins=installation.plugins)
    report = next(
        (r for r in built.manifest.plugins if normalize(r.plugin.source.distribution) == name),
        None,
    )
    if report is None:
        raise LookupError(f"no installed plugin is named {distribution} (see `protege plugins`)")
    if report.error is not None:
        raise ConfigError(report.error)
    return built
