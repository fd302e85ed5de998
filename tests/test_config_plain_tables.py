"""A table of plain values is read directly, to exactly what cattrs would make of it; every
other table is left to cattrs (bench/config.py: the direct reading saves a command cattrs'
import and converter)."""

import math
import random
import typing
from collections.abc import Mapping
from typing import Any

import attr
import attrs
import pytest
from cattrs.errors import CattrsError

from protege.config import (
    _UNSURE,
    BlobSettings,
    FileSettings,
    MailSettings,
    ModelSettings,
    _converter,
    _plainly_structured,
    structure_settings,
)
from protege.errors import ConfigError

CASES = 3000
ODD = 0.1  # how often a value is drawn from values of the wrong type rather than the right one

INTS = [0, 1, 3, 20, 64, 2525, 65535, -1, 99999, 2**53 + 1, 10**400]
FLOATS = [0.5, 1.0, 60.0, 0.0, -1.0, 1e300, math.inf, -math.inf, math.nan]
STRINGS = [
    "",
    "x",
    "UTC",
    "Europe/Berlin",
    "Mars/Olympus",
    "outbox",
    "smtp",
    "s3",
    "report",
    "enforce",
    "text",
    "pdf",
    "mail.example.com",
    "[192.0.2.7]",
    "192.0.2.0/24",
    "ops@example.com",
    "max_tokens",
    "https://s3.example.com",
    "bucket-1",
    "Not A Name",
    "false",
    "3",
]
ODD_VALUES = [True, False, "false", "3", 2.7, 3, -1, 10**400, None, [], ["a", 1], {"a": 1}]
SECRETS = {ModelSettings: ["api_key"], MailSettings: ["smtp_password"], BlobSettings: ["bucket"]}


@attrs.frozen
class _Inner:
    depth: int = 1
    name: str = "inner"


@attrs.frozen(kw_only=True)
class _PluginSettings:
    """Settings a plugin may declare, with types beyond protege's own."""

    count: int = attrs.field(default=1, validator=attrs.validators.ge(0))
    ratio: float = 0.5
    flag: bool = False
    names: tuple[str, ...] = ()
    label: str | None = None
    limits: dict[str, int] = attrs.field(factory=dict)
    table: Mapping[str, Any] = attrs.field(factory=dict)
    inner: _Inner = _Inner()
    _private: int = 0


@attrs.frozen
class _Unsupported:
    """A field of a type cattrs cannot structure (a union of two types)."""

    either: int | str = 0
    count: int = 1


@attrs.frozen
class _Listed:
    """A field of a type cattrs structures and the direct reading leaves to it."""

    numbers: list[int] = attrs.field(factory=list)
    count: int = 1


@attr.s(frozen=True)
class _OldStyle:
    retries = attr.ib(type=int, default=1)
    label = attr.ib(default="x")


CLASSES = [FileSettings, _PluginSettings, _OldStyle, _Listed, _Unsupported]


def _toml_value(rng: random.Random, depth: int = 0) -> Any:
    """Any value a TOML file may hold."""
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.choice(INTS)
    if kind == 1:
        return rng.choice(FLOATS)
    if kind == 2:
        return rng.choice(STRINGS)
    if kind == 3:
        return rng.choice([True, False])
    if kind in (4, 5):
        return [_toml_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(STRINGS): _toml_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _value(rng: random.Random, type_: Any) -> Any:
    """A value for ``type_``: mostly one of that type, now and then one of another."""
    if rng.random() < ODD:
        return rng.choice(ODD_VALUES)
    if type_ is Any or type_ is None:
        return _toml_value(rng)
    if type_ is bool:
        return rng.choice([True, False])
    if type_ is int:
        return rng.choice(INTS)
    if type_ is float:
        return rng.choice(FLOATS + INTS)
    if type_ is str:
        return rng.choice(STRINGS)
    if isinstance(type_, type) and attrs.has(type_):
        return _table(rng, type_)
    origin, arguments = typing.get_origin(type_), typing.get_args(type_)
    if origin in (tuple, list):
        return [_value(rng, arguments[0]) for _ in range(rng.randint(0, 3))]
    if origin in (dict, Mapping):
        return {rng.choice(STRINGS): _value(rng, arguments[1]) for _ in range(rng.randint(0, 3))}
    if arguments:  # a union: any of its members (None among them)
        member = rng.choice(arguments)
        return None if member is type(None) else _value(rng, member)
    raise AssertionError(f"no values for {type_!r}")


def _table(rng: random.Random, cls: type) -> dict[str, Any]:
    """A table for the attrs class ``cls``: some of its keys, now and then one it lacks."""
    hints = typing.get_type_hints(cls)
    fields = [field for field in attrs.fields(cls) if field.init]
    chosen = rng.sample(fields, rng.randint(0, min(len(fields), 6)))
    table = {field.name: _value(rng, hints.get(field.name, field.type)) for field in chosen}
    if rng.random() < ODD:
        table[rng.choice(["unknown", "smtp_startls", *SECRETS.get(cls, ["x"])])] = "value"
    return table


def _shape(value: Any) -> Any:
    """``value`` with the type of every part of it, so that 60 and 60.0 differ."""
    if attrs.has(type(value)):
        return (
            type(value),
            [(f.name, _shape(getattr(value, f.name))) for f in attrs.fields(type(value))],
        )
    if isinstance(value, Mapping):
        return (type(value), [(key, _shape(item)) for key, item in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_shape(item) for item in value])
    return (type(value), repr(value))


def _by_cattrs(table: dict[str, Any], cls: type) -> Any:
    try:
        return _converter().structure(table, cls)
    except Exception as error:  # cattrs' and the validators' refusals alike
        return error


def test_a_table_read_directly_is_what_cattrs_makes_of_it_and_anything_else_is_left_to_it():
    rng = random.Random(20261202)
    direct = refused = 0
    for _ in range(CASES):
        cls = rng.choice(CLASSES)
        table = _table(rng, cls)
        plain = _plainly_structured(table, cls)
        library = _by_cattrs(table, cls)
        if plain is _UNSURE:
            refused += isinstance(library, Exception)
            continue
        direct += 1
        assert not isinstance(library, Exception), (cls, table, library)
        assert _shape(plain) == _shape(library), (cls, table)
    # The generator has to reach both paths, and refusals, for the comparison to mean anything.
    assert CASES // 5 < direct < CASES * 4 // 5
    assert refused > CASES // 10


def test_structure_settings_agrees_with_cattrs_on_every_table_it_reads_or_refuses():
    rng = random.Random(7)
    for _ in range(CASES // 3):
        cls = rng.choice(CLASSES)
        table = _table(rng, cls)
        library = _by_cattrs(table, cls)
        if isinstance(library, Exception):
            with pytest.raises((ConfigError, CattrsError)):
                structure_settings(table, cls, "plugins.x")
        else:
            assert _shape(structure_settings(table, cls, "plugins.x")) == _shape(library)


def test_a_class_cattrs_cannot_structure_is_never_read_directly():
    # Even a table leaving out the field of the unsupported type: cattrs refuses the class.
    assert _plainly_structured({"count": 2}, _Unsupported) is _UNSURE
    with pytest.raises(CattrsError, match=r"int \| str"):
        structure_settings({"count": 2}, _Unsupported, "plugins.x")
