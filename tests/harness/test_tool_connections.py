"""Connections handed from tool call to tool call, seen from whole runs. A tool of one run
leaves session state on its PostgreSQL connection; the connection is handed to a tool call
of another run, whose send_email (protege's own lease renewal, pending mail and delivery
event, written on the tool thread) runs on it: the reply goes out all the same."""

import json
import os

import attrs
import pytest

from protege import Tool
from protege.db import close_idle_connections, database
from protege.mail import record_inbound
from protege.models import Message, Toolkit
from protege.queue import queue_reply
from protege.testing import say, tool_call
from protege.worker import drain
from tests.harness.conftest import agent_granted, manifest_of

pytestmark = pytest.mark.skipif(
    not os.environ.get("PROTEGE_TEST_DATABASE_URL"),
    reason="PostgreSQL only (SQLite connections are closed); make test-postgres runs it",
)


class ScratchTableTool(Tool):
    """A report tool that works in a temp table, named like what it holds."""

    description = "Summarises messages."

    def use(self, context):
        database.execute_sql("CREATE TEMP TABLE message (LIKE message INCLUDING ALL)")
        return self.success(done=True)


class ReadOnlyReportTool(Tool):
    """A report tool that makes its session read-only, as a safety measure."""

    description = "Reads a report."

    def use(self, context):
        database.execute_sql("SET default_transaction_read_only = on")
        return self.success(done=True)


TOOLS = [ScratchTableTool, ReadOnlyReportTool]


@pytest.fixture
def agent(protege_db):
    close_idle_connections()
    agent = agent_granted(TOOLS)
    agent.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    yield agent
    close_idle_connections()


@pytest.fixture
def app(config):
    from protege.installation import open_installation
    from protege.plugins import PluginHost
    from protege.registry import build_manifest

    mail = build_manifest(config, PluginHost())
    manifest = manifest_of(TOOLS)
    everything = attrs.evolve(
        manifest, tools=tuple(sorted([*manifest.tools, mail.get("send_email")], key=lambda e: e.id))
    )
    return open_installation(config, manifest=everything, connect=False)


def _reply(body):
    return tool_call("send_email", mode="reply", body=body)


def _two_runs(agent, app, scripted_model, tool_id):
    scripted_model.script_for("first", tool_call(tool_id), say("ok"))
    scripted_model.script_for("second", _reply("Your order ships Friday."), say("sent"))
    first = queue_reply(record_inbound(agent, sender="jane@acme.com", body="first"))
    drain(app)
    second = queue_reply(record_inbound(agent, sender="mara@acme.com", body="second"))
    drain(app)
    return first, second


def test_a_temp_table_one_run_left_does_not_swallow_another_runs_reply(agent, app, scripted_model):
    _, second = _two_runs(agent, app, scripted_model, "scratch_table")
    second = type(second).get_by_id(second.id)
    results = [e.payload for e in second.timeline() if e.kind == "tool_result"]
    print("second run:", second.status, json.dumps(results)[:300])
    outgoing = Message.select().where(Message.run == second.id).count()
    assert outgoing == 1, f"run {second.id} was told its reply was queued; {outgoing} stored"


def test_a_read_only_session_one_run_left_does_not_fail_another_runs_reply(
    agent, app, scripted_model
):
    _, second = _two_runs(agent, app, scripted_model, "read_only_report")
    second = type(second).get_by_id(second.id)
    results = [e.payload for e in second.timeline() if e.kind == "tool_result"]
    print("second run:", second.status, json.dumps(results)[:400])
    assert Message.select().where(Message.run == second.id).count() == 1
