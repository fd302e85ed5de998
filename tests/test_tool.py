import functools
import inspect

import pytest

from protege import Tool, Trust
from protege.errors import InvalidTool
from protege.tool import _use_parameters, check_tool_class, is_async, tool_id_for

ORDER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["order_number"],
    "properties": {"order_number": {"type": "string"}},
}


@pytest.mark.parametrize(
    ("class_name", "tool_id"),
    [
        ("LookupOrderTool", "lookup_order"),
        ("LookupOrder", "lookup_order"),
        ("HTTPFetchTool", "http_fetch"),
        ("GetV2DataTool", "get_v2_data"),
        ("SendEmailTool", "send_email"),
        ("WebSearch", "web_search"),
        ("ToolboxTool", "toolbox"),
        ("CheckFlavorStockTool", "check_flavor_stock"),
    ],
)
def test_id_derives_from_the_class_name(class_name, tool_id):
    assert tool_id_for(class_name) == tool_id


def declare(name="LookupOrderTool", bases=(Tool,), **attributes):
    attributes.setdefault("description", "Looks up an order by its number. Then reports it.")
    attributes.setdefault("input_schema", ORDER_SCHEMA)
    if "use" not in attributes:

        def use(self, context, order_number):
            return self.success(order_number=order_number)

        attributes["use"] = use
    return type(name, bases, attributes)


def test_a_valid_tool_passes_with_its_derived_metadata():
    tool_class = declare()
    check_tool_class(tool_class)
    assert tool_class.id == "lookup_order"
    assert tool_class.display_name == "Lookup Order"
    assert tool_class.summary == "Looks up an order by its number."
    assert tool_class.timeout == 30.0
    assert not is_async(tool_class)


def test_explicit_display_name_and_summary_are_kept():
    tool_class = declare(display_name="Order lookup", summary="Find an order.")
    assert (tool_class.display_name, tool_class.summary) == ("Order lookup", "Find an order.")


def test_subclass_of_a_tool_gets_its_own_id_and_name():
    parent = declare()
    child = declare("RushOrderTool", bases=(parent,))
    assert (child.id, child.display_name) == ("rush_order", "Rush Order")


def test_abstract_base_is_not_a_tool_but_its_subclasses_are():
    base = declare("SharedBase", abstract=True)
    with pytest.raises(InvalidTool, match="abstract"):
        check_tool_class(base)
    concrete = declare("FindOrderTool", bases=(base,))
    assert not concrete.abstract
    check_tool_class(concrete)


def test_async_use_is_recognised():
    async def use(self, context, order_number):
        return self.success()

    tool_class = declare(use=use)
    check_tool_class(tool_class)
    assert is_async(tool_class)


def test_kwargs_accepts_every_property():
    def use(self, context, **input):
        return self.success(**input)

    check_tool_class(declare(use=use))


def test_optional_parameters_need_not_be_required():
    schema = {**ORDER_SCHEMA, "properties": {**ORDER_SCHEMA["properties"], "verbose": {}}}

    def use(self, context, order_number, verbose=False):
        return self.success()

    check_tool_class(declare(input_schema=schema, use=use))


def test_a_tool_without_input_takes_only_the_context():
    class PingTool(Tool):
        description = "Answers pong."

        def use(self, context):
            return self.success(answer="pong")

    check_tool_class(PingTool)
    assert PingTool.input_schema["type"] == "object"


def test_untrusted_tools_mark_their_results():
    tool_class = declare(trust=Trust.UNTRUSTED)
    assert tool_class().use(None, order_number="1").trust is Trust.UNTRUSTED
    assert tool_class().failure("no").trust is Trust.UNTRUSTED
    assert declare()().success().trust is Trust.TRUSTED


def _use_without_context(self, order_number):
    return None


def _use_needing_a_note(self, context, order_number, note):
    return None


def _use_positional_only(self, context, order_number, /):
    return None


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"description": ""}, "description must be a non-empty string"),
        ({"description": None}, "description must be a non-empty string"),
        (
            {"input_schema": {"type": "object", "properties": {"x": {"type": "nope"}}}},
            "not valid JSON Schema",
        ),
        ({"input_schema": {"type": "string"}}, 'must describe an object ("type": "object")'),
        ({"input_schema": ["order_number"]}, "must be a dict"),
        (
            {"input_schema": {**ORDER_SCHEMA, "properties": {"order_number": {}, "qty": {}}}},
            "property 'qty' is not a parameter of use()",
        ),
        ({"use": _use_needing_a_note}, "parameter 'note' has no default"),
        ({"use": _use_without_context}, "named 'context'"),
        ({"use": _use_positional_only}, "positional-only"),
        (
            {"input_schema": {"type": "object", "properties": {"context": {}}}},
            "property named 'context'",
        ),
        ({"timeout": 0}, "positive"),
        ({"timeout": "soon"}, "number of seconds"),
        ({"trust": "sometimes"}, "trust must be"),
        ({"requires_approval": "false"}, "requires_approval must be True or False"),
        ({"preload": "httpx"}, "preload must be a tuple of module names"),
        ({"preload": ("httpx", "")}, "preload must be a tuple of module names"),
        ({"use": Tool.use}, "does not define use()"),
    ],
)
def test_broken_declarations_are_rejected_with_the_reason(attributes, reason):
    with pytest.raises(InvalidTool) as raised:
        check_tool_class(declare(**attributes))
    assert reason in str(raised.value)
    assert str(raised.value).startswith("LookupOrderTool: ")


@pytest.mark.parametrize(
    "class_name", ["_PrivateTool", "ÜberTool", "Tool", "A" * 70 + "Tool", "Lookup OrderTool"]
)
def test_invalid_ids_are_rejected(class_name):
    tool_class = declare(class_name)
    with pytest.raises(InvalidTool, match="must match"):
        check_tool_class(tool_class)


def test_every_problem_is_named_at_once():
    with pytest.raises(InvalidTool) as raised:
        check_tool_class(declare("_BadTool", description="", timeout=-1))
    message = str(raised.value)
    assert "must match" in message
    assert "description" in message
    assert "timeout" in message


def test_something_that_is_not_a_tool_class_is_rejected():
    with pytest.raises(InvalidTool, match=r"not a subclass of protege\.Tool"):
        check_tool_class(object)
    with pytest.raises(InvalidTool, match=r"not a subclass of protege\.Tool"):
        check_tool_class(declare()())


def test_schema_draft_is_taken_from_the_schema():
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "required": ["order_number"],
        "properties": {"order_number": {"type": "string"}},
        "definitions": {"unused": {"type": "string"}},
    }
    check_tool_class(declare(input_schema=draft7))


def _plain(self, context): ...
def _defaults(self, context, a, b=1, *, c, d=2): ...
def _everything(self, p, /, q, r=3, *args, s, t=4, **kwargs): ...
def _only_args(self, *args): ...
def _only_kwargs(self, **kwargs): ...
async def _asynchronous(self, context, *, query="x"): ...
def _locals_after(self, context, n):
    total = n + 1
    return total


def _wrapped(self, context, n): ...


@functools.wraps(_wrapped)
def _decorated(*args, **kwargs): ...


def _no_self(*args, context): ...


@pytest.mark.parametrize(
    "use",
    [
        _plain,
        _defaults,
        _everything,
        _only_args,
        _only_kwargs,
        _asynchronous,
        _locals_after,
        _decorated,
        _no_self,
        functools.partial(_defaults, None),
    ],
)
def test_use_parameters_are_read_as_inspect_reads_them(use):
    # The contract check reads a plain use() from its code object, for speed.
    expected = [
        (p.name, p.kind, p.default is not p.empty)
        for p in list(inspect.signature(use).parameters.values())[1:]
    ]
    assert _use_parameters(use) == expected


def test_annotations_and_server_are_checked_and_carried_by_the_entry():
    from protege.registry.entries import Origin, ToolEntry

    class DeleteRecordTool(Tool):
        description = "Deletes a record."
        annotations = {"destructive": True, "read_only": False}
        server = "crm"

        def use(self, context):
            return self.success()

    check_tool_class(DeleteRecordTool)
    entry = ToolEntry(DeleteRecordTool, Origin.PLUGIN, "protege-mcp", "0.1.0")
    assert entry.as_dict()["annotations"] == {"destructive": True, "read_only": False}
    assert entry.as_dict()["server"] == "crm"
    assert entry.describe_source() == "plugin protege-mcp 0.1.0 (server crm)"


@pytest.mark.parametrize(
    ("annotations", "server"),
    [
        ({"dangerous": True}, None),  # a hint nobody defines
        ({"destructive": "yes"}, None),  # a hint that is not True or False
        (["read_only"], None),
        ({}, ""),
        ({}, 7),
    ],
)
def test_annotations_or_server_of_the_wrong_shape_break_the_contract(annotations, server):
    class OddTool(Tool):
        description = "Odd."

        def use(self, context):
            return self.success()

    OddTool.annotations = annotations
    OddTool.server = server
    with pytest.raises(InvalidTool, match=r"annotations must map|server must be"):
        check_tool_class(OddTool)
