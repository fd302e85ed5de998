"""protege's own inbound inspector (an internal plugin): what sender authentication's
verdict means for a stored mail.

A failed DNS lookup is flagged (nothing was proven, and the mail is answered as from an
unproven sender); mail failing DMARC at a domain whose policy asks receivers to reject or
quarantine it is held when ``[mail.authentication]`` enforces, since answering would mail
the forged domain's people, and only flagged in report mode.
"""

from __future__ import annotations

from typing import Any

from protege.authentication import Verdict
from protege.config import AuthenticationSettings
from protege.hookspecs import hookimpl


@hookimpl
def inspect_inbound(app: Any, message: Any) -> None:
    """Flag or hold ``message`` as its sender verdict and ``[mail.authentication]`` say."""
    settings = app.config.mail.authentication
    for flag in authentication_flags(message.verdict, settings):
        message.flag(flag)
    verdict = message.verdict
    if verdict.refused_by_policy and settings.enforced:
        message.hold(f"fails DMARC for {verdict.from_domain} (policy {verdict.policy}): no run")


def authentication_flags(verdict: Verdict, settings: AuthenticationSettings) -> list[str]:
    """The flags a mail with ``verdict`` carries under ``settings``: none for a proven
    sender, nor for the many unproven ones that fail nothing."""
    if verdict.authenticated or settings.mode == "off":
        return []
    if verdict.temporary:
        return ["sender authentication: temperror (a DNS lookup failed; nothing was proven)"]
    if verdict.refused_by_policy:
        outcome = "no run" if settings.enforced else "report mode: run anyway"
        return [
            f"sender authentication: fails DMARC for {verdict.from_domain}, whose policy is "
            f"{verdict.policy} ({outcome})"
        ]
    return []
