"""Checking a call's arguments against its tool's schema cannot stall or break a run, even
with a schema from outside the process (an MCP server's)."""

from __future__ import annotations

import re

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
    with pytest.raises(ArgumentsUncheckable, match="took longer than"):
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


def test_a_schema_whose_checking_grows_exponentially_is_cut_off():
    # a0 -> allOf[a1, a1] -> ... : 2**40 checks of one argument, in a schema of 40 lines.
    depth = 40
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2} for i in range(depth)}
    defs[f"a{depth}"] = {"type": "string"}
    tool = tool_with({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/a0"}}})
    with pytest.raises(ArgumentsUncheckable, match="took longer than"):
        schema_problems(tool, {"x": 1})


def test_additional_properties_match_pattern_properties_with_the_deadline_too():
    tool = tool_with(
        {
            "type": "object",
            "additionalProperties": False,
            "patternProperties": {"^(a|aa)+$": {}},
        }
    )
    assert schema_problems(tool, {"aaa": 1}) == []
    assert schema_problems(tool, {"b": 1}) == [
        "(arguments): 'b' does not match any of the regexes: '^(a|aa)+$'"
    ]
    with pytest.raises(ArgumentsUncheckable):
        schema_problems(tool, {"a" * 80 + "b": 1})


def test_nothing_outside_the_schema_is_fetched_even_past_the_registration_walk():
    import http.server
    import threading

    asked = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = {"$ref": f"http://127.0.0.1:{server.server_address[1]}/str.json"}
        tool = tool_with({"type": "object", "properties": {"x": remote}})
        with pytest.raises(ArgumentsUncheckable):
            schema_problems(tool, {"x": 1})
    finally:
        server.shutdown()
        server.server_close()
    assert asked == []


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            {"type": "object", "allOf": [{}], "properties": {"x": {"$ref": "#/allOf/²"}}},
            "points at nothing in the schema",
        ),
        ({"type": "object", "$schema": 5}, "$schema must be the URI"),
        (
            {
                "type": "object",
                "patternProperties": {"^a": {}},
                "unevaluatedProperties": False,
            },
            "cannot be checked within bounds",
        ),
    ],
)
def test_schemas_that_would_break_the_checker_are_refused_as_tools(schema, why):
    with pytest.raises(InvalidTool, match=re.escape(why)):
        check_tool_class(tool_with(schema))


def test_a_schema_nested_past_what_registration_can_look_through_is_refused():
    node = {"type": "string"}
    for _ in range(80):
        node = {"allOf": [node]}
    with pytest.raises(InvalidTool, match="nested deeper than 64 levels"):
        check_tool_class(tool_with({"type": "object", "properties": {"x": node}}))
