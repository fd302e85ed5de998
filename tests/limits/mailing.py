"""Mail for the limits tests: a question from a sender, a signed verdict proving one, and a
configuration with some limits changed."""

from __future__ import annotations

from email.message import EmailMessage

import attrs

from protege.authentication import Verdict
from protege.config import Config, load_config

AGENT = "sundae@thescoop.example"


def mail(sender: str, number: int, to: str = AGENT) -> bytes:
    """Question ``number`` from ``sender``, as a mail client would send it."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = f"Question {number}"
    message["Message-ID"] = f"<{number}.{sender.split('@')[0]}@acme.example>"
    message.set_content(f"Question number {number}.")
    return message.as_bytes()


def signed(sender: str) -> Verdict:
    """The verdict of mail whose signature proves ``sender``."""
    domain = sender.rpartition("@")[2]
    return Verdict(True, domain, "dkim", "pass", None, (), domain, "signed", sender)


def configured(tmp_path, **limits) -> Config:
    """The configuration of ``tmp_path`` with ``limits`` changed under ``[limits]``."""
    loaded = load_config(tmp_path)
    return attrs.evolve(loaded, limits=attrs.evolve(loaded.limits, **limits))
