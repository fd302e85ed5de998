"""Checking a call's arguments against its tool's schema cannot stall or break a run, even
with a schema from outside the process (an MCP server's)."""

from __future__ import annotations

import pytest

from protege import Tool
from protege.errors import InvalidTool
from protege.harness.arguments import ArgumentsUncheckable, schema_problems
from protege.harness.dispatch import _arguments
from protege.registry import Origin, ToolEntry
from protege.tool import check_tool_class


def tool_with(schema):
    class LookupTool(Tool):
        description = "Looks something up."
        input_schema = schema

        def use(self, context, **arguments):
            return self.success()

    return LookupTool


def test_a_pattern_is_checked_as_before():
    tool = tool_with({"type": "object", "properties": {"code": {"pattern": "^[A-Z]{3}$"}}})
    assert schema_problems(tool, {"code": "ABC"}) == []
    assert schema_problems(tool, {"code": "abc"}) == ["code: 'abc' does not match '^[A-Z]{3}$'"]


def test_a_pattern_that_backtracks_forever_fails_the_call_in_bounded_time():
    # ^(a|aa)+$ on "aaa...a!" takes exponential time; re would hold the interpreter for
    # hours at this length, and with it every run of the process.
    tool = tool_with({"type": "object", "properties": {"q": {"pattern": "^(a|aa)+$"}}})
    with pytest.raises(ArgumentsUncheckable, match="patterns took longer than"):
        schema_problems(tool, {"q": "a" * 80 + "!"})


def test_pattern_properties_are_matched_with_the_same_deadline():
    tool = tool_with({"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "integer"}}})
    assert schema_problems(tool, {"aaa": 1}) == []
    assert schema_problems(tool, {"aa": "x"}) == ["aa: 'x' is not of type 'integer'"]
    with pytest.raises(ArgumentsUncheckable):
        schema_problems(tool, {"a" * 80 + "!": 1})


def test_a_schema_that_cannot_be_used_fails_the_call_not_the_run():
    tool = tool_with({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}})
    entry = ToolEntry(tool, Origin.PLUGIN, "protege-mcp")
    refused = _arguments(entry, '{"x": 1}')
    assert refused.ok is False
    assert refused.reason.startswith("the arguments could not be checked: the tool's input")


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("https://example.invalid/schema.json", "points outside the schema"),
        ("other.json#/x", "points outside the schema"),
        ("#/$defs/missing", "points at nothing in the schema"),
        ("#nowhere", "names no anchor of the schema"),
    ],
)
def test_a_ref_that_leads_nowhere_is_refused_when_the_tool_registers(reference, why):
    tool = tool_with({"type": "object", "properties": {"x": {"$ref": reference}}})
    with pytest.raises(InvalidTool, match=why):
        check_tool_class(tool)


def test_refs_inside_the_schema_are_accepted():
    tool = tool_with(
        {
            "type": "object",
            "$defs": {"code": {"type": "string"}, "tag": {"$anchor": "tag", "type": "string"}},
            "properties": {"a": {"$ref": "#/$defs/code"}, "b": {"$ref": "#tag"}},
        }
    )
    check_tool_class(tool)
    assert schema_problems(tool, {"a": "x", "b": 1}) == ["b: 1 is not of type 'string'"]
