"""The helpers plugin authors test their tools with."""

import pytest

from protege import Tool
from protege.config import Config
from protege.context import CallOver
from protege.models import Responsibility
from protege.registry import Manifest, Origin, ToolEntry
from protege.testing import make_context, run_tool


class GreetTool(Tool):
    description = "Greets whoever wrote."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["greeting"],
        "properties": {"greeting": {"type": "string"}},
    }

    def use(self, context, greeting):
        context.queue_mail({"to": [context.message.sender], "body": greeting})
        return self.success(to=context.message.sender, agent=context.agent.name)


class ExplodeTool(Tool):
    description = "Explodes."

    def use(self, context):
        raise RuntimeError("kaboom")


KEPT = []


class KeepContextTool(Tool):
    description = "Keeps its context, to use it after the call."

    def use(self, context):
        KEPT.append(context)
        return self.success()


MANIFEST = Manifest(
    tools=(
        ToolEntry(ExplodeTool, Origin.PLUGIN, "tests"),
        ToolEntry(GreetTool, Origin.PLUGIN, "tests"),
        ToolEntry(KeepContextTool, Origin.PLUGIN, "tests"),
    )
)


def test_make_context_needs_no_database_and_records_the_mail_queued(tmp_path):
    queued = []
    context = make_context(sender="jane@acme.com", queued=queued, config=Config.defaults(tmp_path))
    result = run_tool("greet", context=context, manifest=MANIFEST, greeting="Hello!")
    assert result.data == {"to": "jane@acme.com", "agent": "Test Agent"}
    assert queued == [{"mail": {"to": ["jane@acme.com"], "body": "Hello!"}, "attachments": []}]


def test_run_tool_checks_the_schema_like_dispatch(tmp_path):
    result = run_tool(
        "greet",
        context=make_context(config=Config.defaults(tmp_path)),
        manifest=MANIFEST,
        greeting=3,
    )
    assert not result.ok
    assert result.reason == (
        "the arguments do not fit the input schema: greeting: 3 is not of type 'string'"
    )


def test_run_tool_turns_exceptions_into_failures(tmp_path):
    result = run_tool(
        "explode", context=make_context(config=Config.defaults(tmp_path)), manifest=MANIFEST
    )
    assert result.reason == "RuntimeError: kaboom"


def test_run_tool_names_a_missing_tool(tmp_path):
    with pytest.raises(LookupError, match="no tool 'nope' in the manifest"):
        run_tool("nope", context=make_context(config=Config.defaults(tmp_path)), manifest=MANIFEST)


def test_make_context_for_a_scheduled_run(tmp_path):
    context = make_context(
        responsibility=Responsibility(name="report", prompt="Report."),
        config=Config.defaults(tmp_path),
    )
    assert context.message is None
    assert context.responsibility.name == "report"


def test_make_context_takes_its_old_names_deliver_and_deliveries_with_a_warning(tmp_path):
    recorded, answered = [], []

    def queue(mail, attachments=()):
        answered.append(mail["body"])
        return {"status": "recorded"}

    config = Config.defaults(tmp_path)
    with pytest.warns(DeprecationWarning, match="make_context's deliveries= is deprecated"):
        context = make_context(sender="jane@acme.com", deliveries=recorded, config=config)
    assert run_tool("greet", context=context, manifest=MANIFEST, greeting="Hi").ok
    assert [entry["mail"]["body"] for entry in recorded] == ["Hi"]
    with pytest.warns(DeprecationWarning, match="make_context's deliver= is deprecated"):
        context = make_context(sender="jane@acme.com", deliver=queue, config=config)
    assert run_tool("greet", context=context, manifest=MANIFEST, greeting="Hey").ok
    assert answered == ["Hey"]


def test_make_context_refuses_a_name_given_twice(tmp_path):
    with pytest.raises(TypeError, match="queued= or its old name deliveries=, not both"):
        make_context(queued=[], deliveries=[], config=Config.defaults(tmp_path))


def test_run_tool_refuses_mail_queued_after_the_call_returned(tmp_path):
    queued, KEPT[:] = [], []
    context = make_context(queued=queued, config=Config.defaults(tmp_path))
    assert run_tool("keep_context", context=context, manifest=MANIFEST).ok
    (kept,) = KEPT
    assert (kept.call.tool, kept.call.running) == ("keep_context", False)
    with pytest.raises(CallOver, match="only while the tool call that queues it is running"):
        kept.queue_mail({"to": ["jane@acme.com"], "body": "late"})
    assert queued == []
    # The context as made (for calling use() directly) belongs to no call: it records.
    direct = context.queue_mail({"to": ["jane@acme.com"], "body": "direct"})
    assert (direct, len(queued)) == ({"status": "recorded"}, 1)
