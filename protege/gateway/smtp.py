"""The SMTP gateway (aiosmtpd): takes mail for known agents, answers only once it is stored."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from protege.config import Config
from protege.gateway.inbound import MailRejected, agent_for, ingest
from protege.models.messages import REFUSED

logger = logging.getLogger(__name__)

SMTP_OVERHEAD = 64 * 1024  # headers and encoding around the message itself


class GatewayHandler:
    """aiosmtpd handler: 550 for unknown recipients and refused senders, 552 over limits."""

    def __init__(self, config: Config) -> None:
        self.config = config

    async def handle_RCPT(self, server, session, envelope, address: str, rcpt_options) -> str:
        agent = await asyncio.to_thread(agent_for, address)
        if agent is None:
            return f"550 5.1.1 <{address}>: no agent has this address"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:
        raw = envelope.original_content or envelope.content
        try:
            delivered = await asyncio.to_thread(
                ingest,
                raw,
                config=self.config,
                recipients=list(envelope.rcpt_tos),
                envelope_sender=envelope.mail_from,
            )
        except MailRejected as rejection:
            return f"{rejection.code} 5.3.4 {rejection}"
        except Exception:
            logger.exception("could not store inbound mail")
            return "451 4.3.0 the message could not be stored; try again later"
        if all(d.status == REFUSED for d in delivered):
            return f"550 5.7.1 {delivered[0].reason}"
        return "250 OK stored"


def start_gateway(config: Config, host: str | None = None, port: int | None = None) -> Any:
    """Start the SMTP gateway in a thread of its own; returns the running controller."""
    from aiosmtpd.controller import Controller

    controller = Controller(
        GatewayHandler(config),
        hostname=host or config.mail.listen_host,
        port=config.mail.listen_port if port is None else port,
        data_size_limit=config.mail.max_message_bytes + SMTP_OVERHEAD,
        decode_data=False,
    )
    controller.start()
    return controller


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for demos and tests)."""
    import socket

    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
