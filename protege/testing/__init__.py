"""Test support for host apps and plugin authors (public API).

Installed as a pytest plugin (entry point ``pytest11``), so these fixtures are available in
any project that has protege installed:

- ``protege_db``: a fresh, migrated database for one test (SQLite in the test's temporary
  folder, or a throwaway schema on the PostgreSQL server named by
  ``PROTEGE_TEST_DATABASE_URL``); ``PROTEGE_DATABASE_URL`` points at it for the test.
- ``scripted_model``: a Chat Completions server on loopback answering from a script of
  ``tool_call``, ``tool_calls``, ``say`` and ``http_error`` steps, set as the model.

and these functions: ``make_context`` and ``run_tool`` to call a tool as dispatch would,
``run_reply`` and ``run_scheduled`` to run an agent end to end, ``attach_files`` to give
stored mail attachments, ``with_plugin_settings`` to try a plugin's ``[plugins.NAME]``
settings; ``DkimKey`` to sign mail so that it proves its sender, and ``free_port`` for a
server on loopback. docs/api.md lists every name this module exports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names load on first use: pytest imports this package for its plugin
# (``protege.testing.plugin``) in every session, whether a test asks for any of them or not.
_EXPORTS = {
    "DkimKey": "protege.testing.signing",
    "ScriptedModel": "protege.testing.model",
    "Step": "protege.testing.model",
    "TestDatabase": "protege.testing.database",
    "attach_files": "protege.testing.runs",
    "free_port": "protege.gateway.smtp",
    "fresh_database": "protege.testing.database",
    "http_error": "protege.testing.model",
    "make_context": "protege.testing.runs",
    "raw_answer": "protege.testing.model",
    "raw_tool_call": "protege.testing.model",
    "run_reply": "protege.testing.runs",
    "run_scheduled": "protege.testing.runs",
    "run_tool": "protege.testing.runs",
    "say": "protege.testing.model",
    "tool_call": "protege.testing.model",
    "tool_calls": "protege.testing.model",
    "with_plugin_settings": "protege.testing.runs",
}

if TYPE_CHECKING:
    from protege.gateway.smtp import free_port
    from protege.testing.database import TestDatabase, fresh_database
    from protege.testing.model import (
        ScriptedModel,
        Step,
        http_error,
        raw_answer,
        raw_tool_call,
        say,
        tool_call,
        tool_calls,
    )
    from protege.testing.runs import (
        attach_files,
        make_context,
        run_reply,
        run_scheduled,
        run_tool,
        with_plugin_settings,
    )
    from protege.testing.signing import DkimKey

__all__ = [
    "DkimKey",
    "ScriptedModel",
    "Step",
    "TestDatabase",
    "attach_files",
    "free_port",
    "fresh_database",
    "http_error",
    "make_context",
    "raw_answer",
    "raw_tool_call",
    "run_reply",
    "run_scheduled",
    "run_tool",
    "say",
    "tool_call",
    "tool_calls",
    "with_plugin_settings",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'protege.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
