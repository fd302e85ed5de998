"""protege: AI colleagues that live in a Python application and are reached by email.

This module is the public API for tool and plugin authors; everything it does not export
(other than ``protege.models``, ``protege.blobs``, ``protege.mail``, ``protege.testing``,
and ``protege.serving`` and ``protege.supervisor`` for hosts serving an installation) is
internal.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Names load on first use, so `import protege` (and so `protege --help`) stays cheap.
_EXPORTS = {
    "BlobStore": "protege.blobs.stores",
    "CommittedEvent": "protege.harness.events",
    "DashboardView": "protege.dashboard",
    "Envelope": "protege.transports",
    "InboundMail": "protege.gateway.inspection",
    "Ingress": "protege.ingresses",
    "IngressRefused": "protege.ingresses",
    "Intake": "protege.ingresses",
    "MailRefused": "protege.transports",
    "MailScope": "protege.context",
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
    "success": "protege.result",
}

__all__ = [
    "BlobStore",
    "CommittedEvent",
    "DashboardView",
    "Envelope",
    "InboundMail",
    "Ingress",
    "IngressRefused",
    "Intake",
    "MailRefused",
    "MailScope",
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
    "success",
]

if TYPE_CHECKING:
    from protege.blobs.stores import BlobStore
    from protege.context import MailScope, RunContext
    from protege.dashboard import DashboardView
    from protege.errors import ProtegeError
    from protege.gateway.inspection import InboundMail
    from protege.harness.events import CommittedEvent
    from protege.harness.listeners import RunSnapshot
    from protege.hookspecs import hookimpl
    from protege.ingresses import Ingress, IngressRefused, Intake
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
