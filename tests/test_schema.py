import jsonschema
import pytest

from protege.schema import flat_2020_12_metaschema, is_plainly_valid, schema_problem

SCHEMAS = [
    {"type": "object"},
    {"type": ["object", "null"]},
    {"type": []},
    {"type": ["string", "string"]},
    {"type": "nope"},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}},
    {"type": "object", "properties": {"n": {"minimum": "0"}}},
    {"properties": {"s": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}}},
    {"properties": {"s": {"pattern": "("}}},
    {"properties": {"s": {"minLength": -1}}},
    {"properties": {"s": {"minLength": 1.5}}},
    {"properties": {"s": {"maxLength": True}}},
    {"required": ["a", "b"]},
    {"required": ["a", "a"]},
    {"required": "a"},
    {"required": [1]},
    {"enum": ["a", 1, None]},
    {"enum": "a"},
    {"const": {"any": "thing"}},
    {"default": None, "examples": [1, 2]},
    {"items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
    {"items": [{"type": "string"}]},
    {"uniqueItems": "yes"},
    {"additionalProperties": False},
    {"additionalProperties": {"type": "number", "multipleOf": 0.5}},
    {"multipleOf": 0},
    {"exclusiveMinimum": 1, "exclusiveMaximum": 2.5},
    {"exclusiveMinimum": True},
    {"format": "email", "title": "Address", "description": "Where to write."},
    {"description": 3},
    {"properties": []},
    {"properties": {"x": 3}},
    {"properties": {"x": True, "y": False}},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"anyOf": []},
    {"oneOf": [{"type": "string"}], "$defs": {"a": {"type": "string"}}},
    {"$ref": "#/$defs/a", "$defs": {"a": {"type": "bogus"}}},
    {"not": {"type": "string"}, "x-vendor": "ignored"},
    {"dependentRequired": {"a": ["b"]}},
    {"dependentRequired": {"a": "b"}},
]


def metaschema_says_valid(schema):
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


@pytest.mark.parametrize("schema", SCHEMAS)
def test_agrees_with_the_metaschema(schema):
    assert (schema_problem(schema) is None) == metaschema_says_valid(schema)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_plain_check_never_accepts_what_the_metaschema_rejects(schema):
    if is_plainly_valid(schema):
        assert metaschema_says_valid(schema)


def test_plain_check_covers_the_usual_tool_schema():
    assert is_plainly_valid(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["order_number"],
            "properties": {"order_number": {"type": "string", "description": "e.g. SCP-1042"}},
        }
    )


@pytest.mark.parametrize("schema", SCHEMAS)
def test_flat_metaschema_means_the_same_as_the_published_one(schema):
    flat = jsonschema.Draft202012Validator(
        flat_2020_12_metaschema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    assert flat.is_valid(schema) == metaschema_says_valid(schema)


def test_problem_names_where_the_schema_is_wrong():
    problem = schema_problem({"type": "object", "properties": {"x": {"type": "nope"}}})
    assert problem == "'nope' is not valid under any of the given schemas (at properties/x/type)"


def test_declared_draft_is_used():
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "minimum": 1,
        "exclusiveMinimum": True,
    }
    assert schema_problem(draft4) is None
    assert schema_problem({"exclusiveMinimum": True}) is not None
