"""protege: AI colleagues that live in a Python application and are reached by email.

This module is the front of the public API: the tool contract, the hooks' contracts and the
application object (``Installation``, made by ``open_installation``). The public modules and
the names each exports are listed once, in docs/api.md; every other module is internal and
may change between versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Names load on first use, so `import protege` (and so `protege --help`) stays cheap.
_EXPORTS = {
    "BlobStore": "protege.blobs.stores",
    "CommittedEvent": "protege.harness.events",
    "Config": "protege.config",
    "DashboardView": "protege.dashboard",
    "Envelope": "protege.transports",
    "InboundMail": "protege.gateway.inspection",
    "Ingress": "protege.ingresses",
    "IngressRefused": "protege.ingresses",
    "Installation": "protege.installation",
    "InstallationClosed": "protege.installation",
    "InstallationServing": "protege.installation",
    "Intake": "protege.ingresses",
    "MailRefused": "protege.transports",
    "MailScope": "protege.context",
    "NoActiveApplication": "protege.dbroute",
    "Outcome": "protege.transports",
    "Part": "protege.result",
    "PromptSection": "protege.sections",
    "ProtegeError": "protege.errors",
    "Resolver": "protege.sections",
    "Result": "protege.result",
    "RunContext": "protege.context",
    "RunSnapshot": "protege.harness.listeners",
    "Tool": "protege.tool",
    "Transport": "protege.transports",
    "Trust": "protege.result",
    "failure": "protege.result",
    "hookimpl": "protege.hookspecs",
    "load_config": "protege.config",
    "open_installation": "protege.installation",
    "success": "protege.result",
}

__all__ = [
    "BlobStore",
    "CommittedEvent",
    "Config",
    "DashboardView",
    "Envelope",
    "InboundMail",
    "Ingress",
    "IngressRefused",
    "Installation",
    "InstallationClosed",
    "InstallationServing",
    "Intake",
    "MailRefused",
    "MailScope",
    "NoActiveApplication",
    "Outcome",
    "Part",
    "PromptSection",
    "ProtegeError",
    "Resolver",
    "Result",
    "RunContext",
    "RunSnapshot",
    "Tool",
    "Transport",
    "Trust",
    "failure",
    "hookimpl",
    "load_config",
    "open_installation",
    "success",
]

if TYPE_CHECKING:
    from protege.blobs.stores import BlobStore
    from protege.config import Config, load_config
    from protege.context import MailScope, RunContext
    from protege.dashboard import DashboardView
    from protege.dbroute import NoActiveApplication
    from protege.errors import ProtegeError
    from protege.gateway.inspection import InboundMail
    from protege.harness.events import CommittedEvent
    from protege.harness.listeners import RunSnapshot
    from protege.hookspecs import hookimpl
    from protege.ingresses import Ingress, IngressRefused, Intake
    from protege.installation import (
        Installation,
        InstallationClosed,
        InstallationServing,
        open_installation,
    )
    from protege.result import Part, Result, Trust, failure, success
    from protege.sections import PromptSection, Resolver
    from protege.tool import Tool
    from protege.transports import Envelope, MailRefused, Outcome, Transport


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'protege' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
