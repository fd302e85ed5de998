"""The ``outbox`` transport: each mail written as an ``.eml`` file under the data directory,
sent to nobody. The default, so that a new installation mails no one by mistake."""

from __future__ import annotations

import datetime
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from protege.config import Config
from protege.delivery.transports import Envelope, Outcome, Transport

logger = logging.getLogger(__name__)


class OutboxTransport(Transport):
    """Writes each mail once to ``<data_dir>/outbox``; every recipient counts as delivered."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.folder = Path(config.data_dir) / "outbox"

    def send(self, message: bytes, envelope: Envelope) -> Iterable[Outcome]:
        """Put the mail in the outbox (unless it is there already)."""
        write_eml(message, envelope.message_id, envelope.queued_at, self.folder)
        return [Outcome.delivered(address) for address in envelope.recipients]


def write_eml(raw: bytes, message_id: str, queued_at: datetime.datetime, outbox: Path) -> Path:
    """Put ``raw`` in ``outbox`` under a name fixed by the mail's Message-ID and the time it
    was queued, once: a mail whose file is there already (written before a crash) is not
    written again."""
    outbox.mkdir(mode=0o700, parents=True, exist_ok=True)  # names hold approvals' tokens
    # The name sorts in queueing order: the second, then microseconds within it.
    stamp = queued_at.strftime("%Y%m%d-%H%M%S-%f")
    name = re.sub(r"[^\w.@-]+", "_", message_id.strip("<>"))
    path = outbox / f"{stamp}-{name}.eml"
    with tempfile.NamedTemporaryFile(dir=outbox, prefix=".", suffix=".tmp", delete=False) as tmp:
        tmp.write(raw)
    try:
        os.link(tmp.name, path)  # atomic, and refuses to replace what is there
    except FileExistsError:
        logger.info("mail %s was in the outbox already", message_id)
    finally:
        os.unlink(tmp.name)
    return path
