"""A tool call's arguments checked against the tool's input schema, within bounds.

A schema may come from outside the process (an MCP server's), so checking must not be
a way to stall a run: a ``pattern`` is matched with a deadline (a pattern such as
``^(a|aa)+$`` takes exponential time on some strings, and Python's ``re`` holds the
interpreter while it works), and a ``$ref`` that cannot be resolved fails the call
rather than the run.
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
# How long checking one call's arguments may spend matching patterns, in all.
PATTERN_SECONDS = 0.5

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_deadline")


class ArgumentsUncheckable(Exception):
    """The arguments could not be checked against the schema (the message says why)."""


def schema_problems(tool_class: type[Tool], arguments: dict[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` under the tool's input schema (empty if nothing).
    ``ArgumentsUncheckable`` when the schema cannot be used to tell."""
    token = _deadline.set(time.monotonic() + PATTERN_SECONDS)
    try:
        errors = sorted(_validator(tool_class).iter_errors(arguments), key=lambda e: list(e.path))
    except _PatternTooSlow:
        raise ArgumentsUncheckable(
            f"matching the schema's patterns took longer than {PATTERN_SECONDS:g} s"
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


class _PatternTooSlow(Exception):
    pass


def _search(pattern: str, text: str) -> bool:
    left = _deadline.get(time.monotonic() + PATTERN_SECONDS) - time.monotonic()
    if left <= 0:
        raise _PatternTooSlow
    try:
        return regex.search(pattern, text, timeout=left) is not None
    except TimeoutError:
        raise _PatternTooSlow from None


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

    schema = tool_class.input_schema
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = jsonschema.validators.extend(
        base, {"pattern": _pattern, "patternProperties": _pattern_properties}
    )
    return cls(schema, format_checker=base.FORMAT_CHECKER)
