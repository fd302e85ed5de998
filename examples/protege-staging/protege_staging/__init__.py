"""protege-staging: let an agent work for real while a person reads what it would send.

Choose the transport in ``protege.toml``::

    [mail]
    transport = "staging"

    [plugins.protege-staging]
    folder = "staging"        # under the data directory, or an absolute path

Then every mail an agent sends is delivered into a Maildir (``staging/mail``) instead of to
its recipients, and any mail reader opens it; the agent is told so at the start of each run,
so it does not promise a customer anything it believes it sent; and each run that ends adds
one line to ``staging/runs.jsonl`` (when, which agent, how it ended, how many tool calls).

It shows three of protege's hooks working together: ``register_transports``,
``prompt_sections`` and ``on_event``. Like any plugin it imports only ``protege``.
"""

from __future__ import annotations

import json
import mailbox
import threading
from pathlib import Path
from typing import Any

import attrs

from protege import Outcome, PromptSection, Transport, hookimpl

DISTRIBUTION = "protege-staging"
TRANSPORT = "staging"
NOTICE = (
    "This installation is a staging one: the mail you send is kept for a person to review "
    "and reaches none of its recipients. Work as you would for real, and do not tell anyone "
    "that they will hear from you by mail."
)


@attrs.frozen(kw_only=True)
class StagingSettings:
    """``[plugins.protege-staging]``: where the staged mail and the run journal are kept."""

    folder: str = "staging"


def staging_folder(config: Any) -> Path:
    """The folder of the staged mail and the journal for ``config`` (an installation's)."""
    settings = config.plugin_settings(DISTRIBUTION) or StagingSettings()
    folder = Path(settings.folder)
    return folder if folder.is_absolute() else Path(config.data_dir) / folder


def staging_in_use(config: Any) -> bool:
    """Whether ``config`` sends its mail through this plugin's transport."""
    return config.mail.transport == TRANSPORT


class StagingTransport(Transport):
    """Delivers each mail into a Maildir instead of to its recipients."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        # The standard library's Maildir writes each message to tmp/ and renames it into
        # new/, so a reader never sees half a mail and several threads may add at once.
        self.maildir = mailbox.Maildir(staging_folder(config) / "mail", create=True)

    def send(self, message: bytes, envelope: Any) -> list[Outcome]:
        """Keep ``message``, exactly as it would have gone out, for every recipient."""
        self.maildir.add(message)
        return [Outcome.delivered(address) for address in envelope.recipients]


class RunJournal:
    """Appends one JSON line per ended run; listeners are called from one thread, the lock
    is for the case of two applications in one process sharing a folder."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self.tool_calls: dict[int, int] = {}

    def hear(self, config: Any, run: Any, event: Any) -> None:
        """Count a run's tool calls, and write its line when it ends."""
        if event.kind == "tool_call":
            self.tool_calls[run.id] = self.tool_calls.get(run.id, 0) + 1
        if run.status not in ENDED or event.kind not in ENDING_EVENTS:
            return
        line = {
            "run": run.id,
            "agent": run.agent,
            "status": run.status,
            "tool_calls": self.tool_calls.pop(run.id, 0),
        }
        folder = staging_folder(config)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock, (folder / "runs.jsonl").open("a", encoding="utf-8") as journal:
            journal.write(json.dumps(line, sort_keys=True) + "\n")


ENDED = frozenset({"done", "failed", "cancelled"})
ENDING_EVENTS = frozenset({"run_done", "run_failed", "run_cancelled"})
journal = RunJournal()


@hookimpl
def plugin_settings() -> type[StagingSettings]:
    return StagingSettings


@hookimpl
def register_transports(register: Any) -> None:
    register(TRANSPORT, StagingTransport)


@hookimpl
def prompt_sections(app: Any, context: Any) -> PromptSection | None:
    if not staging_in_use(app.config):
        return None
    return PromptSection("staging", NOTICE)


@hookimpl
def on_event(app: Any, run: Any, event: Any) -> None:
    if staging_in_use(app.config):
        journal.hear(app.config, run, event)
