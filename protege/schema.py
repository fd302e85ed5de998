"""JSON Schema checks for tool input schemas, fast enough to run on every manifest build.

Checking a schema against the Draft 2020-12 metaschema with jsonschema costs over a
millisecond, and importing jsonschema costs more than building a manifest of a hundred
tools. So a schema written in the plain subset most tools use (the keywords in
``_PLAIN_KEYWORDS``, with ordinary values) is recognised as valid directly; anything else
goes to jsonschema. The plain check only ever says "valid": when unsure it defers, so it can
never accept a schema the metaschema rejects.

For the jsonschema path, the 2020-12 metaschema is used in a flattened form (vocabularies
inlined, each ``$dynamicRef`` pointed at the root), which means the same and checks faster.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any
from urllib.parse import unquote, urljoin

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_DEFS = "#/$defs/"
_VOCABULARY_KEYS = ("$schema", "$id", "$vocabulary", "$dynamicAnchor", "$defs", "$comment")


_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_type(value: Any) -> bool:
    if isinstance(value, str):
        return value in _SIMPLE_TYPES
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, str) and item in _SIMPLE_TYPES for item in value)
        and len(set(value)) == len(value)
    )


def _is_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(item, str) for item in value)
        and len(set(value)) == len(value)
    )


def _is_pattern(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        re.compile(value)
    except re.error:
        return False
    return True


def _is_any(value: Any) -> bool:
    return True


_PLAIN_KEYWORDS = {
    "type": _is_type,
    "title": _is_text,
    "description": _is_text,
    "format": _is_text,
    "default": _is_any,
    "const": _is_any,
    "enum": lambda value: isinstance(value, list),
    "examples": lambda value: isinstance(value, list),
    "required": _is_names,
    "pattern": _is_pattern,
    "minLength": _is_count,
    "maxLength": _is_count,
    "minItems": _is_count,
    "maxItems": _is_count,
    "minProperties": _is_count,
    "maxProperties": _is_count,
    "uniqueItems": lambda value: isinstance(value, bool),
    "minimum": _is_number,
    "maximum": _is_number,
    "exclusiveMinimum": _is_number,
    "exclusiveMaximum": _is_number,
    "multipleOf": lambda value: _is_number(value) and value > 0,
}


MAX_ARGUMENT_DEPTH = 64  # levels of objects and arrays a tool call's arguments may nest


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON data nests objects and arrays more than ``limit`` levels deep. Checked
    by protege itself: whether ``json`` raises ``RecursionError`` first differs between
    Python versions."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children)
    return False


def is_plainly_valid(schema: Any) -> bool:
    """True if ``schema`` uses only plain keywords with ordinary values, and so is certainly
    a valid Draft 2020-12 schema; False means "not sure", not "invalid"."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        check = _PLAIN_KEYWORDS.get(key)
        if check is not None:
            if not check(value):
                return False
        elif key == "properties":
            if not isinstance(value, dict) or not all(map(is_plainly_valid, value.values())):
                return False
        elif key in ("items", "additionalProperties"):
            if not is_plainly_valid(value):
                return False
        else:
            return False
    return True


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema of its declared draft (2020-12 if none)."""
    if "$schema" not in schema and is_plainly_valid(schema):
        return None
    import jsonschema  # heavy (~50 ms): loaded only for schemas the fast check cannot pass

    declared = schema.get("$schema")
    if declared is not None and not isinstance(declared, str):
        return "$schema must be the URI of a JSON Schema draft"
    if declared is None or declared.rstrip("#") == DRAFT_2020_12:
        validator = _flat_2020_12_validator()
    else:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = _metaschema_validator(cls)
    error = jsonschema.exceptions.best_match(validator.iter_errors(schema))
    if error is None:
        return reference_problem(schema)
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{error.message} (at {where})" if where else error.message


def reference_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` could not be used within bounds when arguments are checked: a
    ``$ref`` that points outside the schema (it would be fetched, or fail, at the first
    call) or at nothing in it, nesting deeper than can be looked through, or
    ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema matches those
    patterns with ``re``, which no deadline can stop); None when it can."""
    anchors: set[str] = set()
    references: list[str] = []
    keywords: set[str] = set()
    too_deep: list[int] = []

    def walk(node: Any, depth: int) -> None:
        if depth > MAX_ARGUMENT_DEPTH:
            too_deep.append(depth)
            return
        if isinstance(node, dict):
            for key in ("$ref", "$dynamicRef"):
                if isinstance(node.get(key), str):
                    references.append(node[key])
            for key in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(key), str):
                    anchors.add(node[key])
            keywords.update(k for k in node if isinstance(k, str))
            for value in node.values():
                walk(value, depth + 1)
        elif isinstance(node, list):
            for value in node:
                walk(value, depth + 1)

    walk(schema, 0)
    if too_deep:
        return f"it is nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        return (
            "unevaluatedProperties beside patternProperties cannot be checked within bounds "
            "(use additionalProperties)"
        )
    for reference in references:
        if not reference.startswith("#"):
            return f"$ref {reference[:100]!r} points outside the schema"
        fragment = unquote(reference[1:])
        if fragment and not fragment.startswith("/"):
            if fragment not in anchors:
                return f"$ref {reference[:100]!r} names no anchor of the schema"
            continue
        node: Any = schema
        for part in fragment.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif (
                isinstance(node, list)
                and part.isascii()
                and part.isdecimal()
                and int(part) < len(node)
            ):
                node = node[int(part)]
            else:
                return f"$ref {reference[:100]!r} points at nothing in the schema"
    return None


@functools.cache
def _metaschema_validator(cls: Any) -> Any:
    return cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)


@functools.cache
def _flat_2020_12_validator() -> Any:
    import jsonschema  # heavy: see schema_problem

    cls = jsonschema.Draft202012Validator
    return cls(flat_2020_12_metaschema(), format_checker=cls.FORMAT_CHECKER)


def flat_2020_12_metaschema() -> dict[str, Any]:
    """The Draft 2020-12 metaschema with its vocabularies inlined and no dynamic references."""
    import jsonschema  # heavy: see schema_problem
    from jsonschema_specifications import REGISTRY

    root = jsonschema.Draft202012Validator.META_SCHEMA
    definitions: dict[str, Any] = {}
    vocabularies = []
    for reference in (part["$ref"] for part in root["allOf"]):
        prefix = reference.rsplit("/", 1)[-1].replace("-", "_")
        vocabulary = REGISTRY.contents(urljoin(root["$id"], reference))
        for name, definition in vocabulary.get("$defs", {}).items():
            definitions[f"{prefix}_{name}"] = _inline(definition, prefix)
        vocabularies.append(
            {k: _inline(v, prefix) for k, v in vocabulary.items() if k not in _VOCABULARY_KEYS}
        )
    rest = {k: _inline(v, "") for k, v in root.items() if k not in (*_VOCABULARY_KEYS, "allOf")}
    return {"$schema": root["$schema"], **rest, "allOf": vocabularies, "$defs": definitions}


def _inline(node: Any, prefix: str) -> Any:
    if isinstance(node, list):
        return [_inline(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    inlined = {}
    for key, value in node.items():
        if key == "$dynamicRef" and value == "#meta":
            inlined["$ref"] = "#"
        elif key == "$ref" and isinstance(value, str) and value.startswith(_DEFS):
            inlined["$ref"] = f"{_DEFS}{prefix}_{value.removeprefix(_DEFS)}"
        else:
            inlined[key] = _inline(value, prefix)
    return inlined
