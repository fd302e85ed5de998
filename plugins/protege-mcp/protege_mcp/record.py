"""What sync records of one MCP server, and how it is read back: the tools it listed (as
the server described them), when, and the error if it did not answer.

One record per server, under the key ``server/NAME``. The record also keeps a fingerprint
of the settings that reach the server (command, arguments, folder, URL; never a secret), so
that tools listed by one server are never offered as another's after the settings change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from protege_mcp.settings import ServerSettings

KEY_PREFIX = "server/"


def key_for(server: str) -> str:
    """The record key of ``server``."""
    return KEY_PREFIX + server


def fingerprint(settings: ServerSettings) -> str:
    """A digest of what decides which server is reached (not its secrets)."""
    reach = {
        "command": settings.command,
        "args": list(settings.args),
        "cwd": settings.cwd,
        "url": settings.url,
    }
    return hashlib.sha256(json.dumps(reach, sort_keys=True).encode()).hexdigest()[:32]


def now() -> str:
    """The current UTC time as the record writes it."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def listed(settings: ServerSettings, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The record of a server that answered with ``tools``."""
    return {
        "fingerprint": fingerprint(settings),
        "listed_at": now(),
        "tools": tools,
        "error": None,
        "failed_at": None,
    }


def failed(
    settings: ServerSettings, error: str, before: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The record of a server that did not answer: the tools an earlier sync listed are
    kept (to be withheld, not forgotten) while the settings still reach the same server."""
    same = before is not None and before.get("fingerprint") == fingerprint(settings)
    return {
        "fingerprint": fingerprint(settings),
        "listed_at": before.get("listed_at") if same and before else None,
        "tools": list(before.get("tools") or []) if same and before else [],
        "error": error,
        "failed_at": now(),
    }
