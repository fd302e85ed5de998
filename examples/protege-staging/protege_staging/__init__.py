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

import collections
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
        folder = staging_folder(config)
        folder.mkdir(parents=True, exist_ok=True)
        self.maildir = mailbox.Maildir(folder / "mail", create=True)

    def send(self, message: bytes, envelope: Any) -> list[Outcome]:
        """Keep ``message``, exactly as it would have gone out, for every recipient."""
        self.maildir.add(message)
        return [Outcome.delivered(address) for address in envelope.recipients]


class RunJournal:
    """Writes one JSON line per run that ends. protege calls listeners from one thread per
    application, in commit order; the lock is for two applications in one process."""

    _lock = threading.Lock()
    REMEMBERED = 10_000  # ended runs remembered, so that each is written once

    def __init__(self) -> None:
        # By journal file and run: two applications in one process keep apart.
        self.tool_calls: dict[tuple[Path, int], int] = {}
        self.written: collections.OrderedDict[tuple[Path, int], None] = collections.OrderedDict()

    def hear(self, config: Any, run: Any, event: Any) -> None:
        """Count a run's tool calls, and write its line on the first event that shows it
        ended (every event of the batch that ends a run carries the final status)."""
        folder = staging_folder(config)
        key = (folder, run.id)
        if event.kind == "tool_call":
            self.tool_calls[key] = self.tool_calls.get(key, 0) + 1
            if len(self.tool_calls) > self.REMEMBERED:  # runs whose end was never heard
                del self.tool_calls[next(iter(self.tool_calls))]
        if run.status not in ENDED or key in self.written:
            return
        self.written[key] = None
        while len(self.written) > self.REMEMBERED:
            self.written.popitem(last=False)
        line = {
            "run": run.id,
            "agent": run.agent,
            "status": run.status,
            "tool_calls": self.tool_calls.pop(key, 0),
        }
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock, (folder / "runs.jsonl").open("a", encoding="utf-8") as journal:
            journal.write(json.dumps(line, sort_keys=True) + "\n")


ENDED = frozenset({"done", "failed", "cancelled"})
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
