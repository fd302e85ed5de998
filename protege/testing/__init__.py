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
