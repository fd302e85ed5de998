"""A tool call's arguments checked against the tool's input schema, within bounds.

A schema may come from outside the process (an MCP server's), so checking must not be
a way to stall a run or reach elsewhere: every keyword is checked against one deadline
for the whole call (``$ref`` and ``allOf`` chains can make the work exponential in the
schema's size), patterns are matched with ``regex`` and that deadline (a pattern such as
``^(a|aa)+$`` takes exponential time on some strings, and Python's ``re`` holds the
interpreter while it works), nothing outside the schema is ever fetched, and a schema
that cannot be used fails the call rather than the run.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from collections.abc import Iterator
from typing import Any

import regex

from protege.tool import Tool

MAX_SCHEMA_ERRORS = 10
# How long checking one call's arguments may take, in all.
CHECK_SECONDS = 0.5

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_deadline")


class ArgumentsUncheckable(Exception):
    """The arguments could not be checked against the schema (the message says why)."""


def schema_problems(tool_class: type[Tool], arguments: dict[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` under the tool's input schema (empty if nothing).
    ``ArgumentsUncheckable`` when the schema cannot be used to tell."""
    token = _deadline.set(time.monotonic() + CHECK_SECONDS)
    try:
        errors = sorted(_validator(tool_class).iter_errors(arguments), key=lambda e: list(e.path))
    except _TooSlow:
        raise ArgumentsUncheckable(
            f"checking them against the schema took longer than {CHECK_SECONDS:g} s"
        ) from None
    except Exception as error:  # an unresolvable $ref, a schema jsonschema cannot use
        raise ArgumentsUncheckable(
            f"the tool's input schema cannot be used ({type(error).__name__})"
        ) from None
    finally:
        _deadline.reset(token)
    problems = [
        f"{'/'.join(map(str, error.absolute_path)) or '(arguments)'}: {error.message}"
        for error in errors[:MAX_SCHEMA_ERRORS]
    ]
    if len(errors) > MAX_SCHEMA_ERRORS:
        problems.append(f"and {len(errors) - MAX_SCHEMA_ERRORS} more")
    return problems


class _TooSlow(Exception):
    pass


def _left() -> float:
    left = _deadline.get(time.monotonic() + CHECK_SECONDS) - time.monotonic()
    if left <= 0:
        raise _TooSlow
    return left


def _search(pattern: str, text: str) -> bool:
    try:
        return regex.search(pattern, text, timeout=_left()) is not None
    except TimeoutError:
        raise _TooSlow from None


def _bounded(keyword: Any) -> Any:
    """``keyword`` (a jsonschema keyword function), checking the deadline first."""

    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        _left()
        found = keyword(validator, value, instance, schema)
        if found is not None:
            yield from found

    return checked


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    # jsonschema's own matches patternProperties with re, past any deadline.
    import jsonschema

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = {
        name
        for name in instance
        if name not in properties and not any(_search(p, name) for p in patterns)
    }
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield jsonschema.ValidationError(
                f"{joined} {verb} not match any of the regexes: {listed}"
            )
        else:
            names = sorted(extras, key=str)
            verb = "was" if len(names) == 1 else "were"
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed "
                f"({', '.join(repr(n) for n in names)} {verb} unexpected)"
            )


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    import jsonschema

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


# Weak: the tool classes of a manifest built and dropped (an MCP server's tools, made per
# manifest) take their validators with them.
_VALIDATORS: weakref.WeakKeyDictionary[type[Tool], Any] = weakref.WeakKeyDictionary()


def _validator(tool_class: type[Tool]) -> Any:
    found = _VALIDATORS.get(tool_class)
    if found is None:
        found = _VALIDATORS[tool_class] = _new_validator(tool_class)
    return found


def _new_validator(tool_class: type[Tool]) -> Any:
    import jsonschema  # heavy: loaded at a tool's first call, not when protege starts
    import referencing

    schema = tool_class.input_schema
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    keywords = {
        **base.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    cls = jsonschema.validators.extend(
        base, {name: _bounded(keyword) for name, keyword in keywords.items()}
    )
    # Nothing outside the schema is ever fetched (jsonschema would, over the network).
    registry: Any = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
    return cls(schema, format_checker=base.FORMAT_CHECKER, registry=registry)


def _refuse_retrieval(uri: str) -> Any:
    raise LookupError(f"{uri[:100]!r} is outside the schema: not fetched")
