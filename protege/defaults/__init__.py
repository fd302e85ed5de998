"""protege's own implementations of its hooks (mail transports, blob stores, the current
time as a prompt section), each module an internal plugin registered before the installed
ones, as datasette registers its defaults.

They stay light: each names what it offers and imports it only when the installation makes
it, so loading the plugins (``protege tools``) imports no database, mail or HTTP library.
"""

from __future__ import annotations

import importlib
from typing import Any


def imported(module: str, name: str) -> Any:
    """``module.name``, imported when it is made rather than when the plugins load."""
    return getattr(importlib.import_module(module), name)
