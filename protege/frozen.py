"""Read-only copies of settings, so that what one run reads no other can change."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn

import attrs

__all__ = ["ReadOnlyDict", "ReadOnlyList", "is_frozen", "mutable_parts", "read_only"]


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        f"these settings are read-only ({type(self).__name__}): every run reads the same "
        "ones; copy them (dict(...), list(...), copy.deepcopy(...)) to change a copy"
    )


class ReadOnlyDict(dict):
    """A table of settings: a ``dict`` (as TOML, JSON and validators expect) that refuses
    to be changed. A copy (``dict(...)``, ``copy.copy``, ``copy.deepcopy``) is a plain,
    changeable one."""

    __slots__ = ()
    __init__ = __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (_read_only_dict, (dict(self),))

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}


class ReadOnlyList(list):
    """A list of settings: a ``list`` that refuses to be changed (a copy is a plain one)."""

    __slots__ = ()
    __init__ = __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (_read_only_list, (list(self),))

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list:
        return [copy.deepcopy(item, memo) for item in self]


def _read_only_dict(items: Mapping[Any, Any]) -> ReadOnlyDict:
    made = dict.__new__(ReadOnlyDict)
    dict.__init__(made, items)  # the one way in: ReadOnlyDict's own __init__ refuses
    return made


def _read_only_list(items: Any) -> ReadOnlyList:
    made = list.__new__(ReadOnlyList)
    list.__init__(made, items)
    return made


def read_only(value: Any) -> Any:
    """``value`` with every table and list in it made read-only (still a ``dict``, a
    ``list``); a frozen attrs instance is copied with its fields made so too. Other values
    as they are."""
    if isinstance(value, ReadOnlyDict | ReadOnlyList):
        return value
    if isinstance(value, Mapping):
        return _read_only_dict({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list):
        return _read_only_list(read_only(item) for item in value)
    if isinstance(value, tuple):
        return tuple(read_only(item) for item in value)
    if isinstance(value, set):
        return frozenset(value)
    if attrs.has(type(value)) and is_frozen(value):
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
        changed = {name: read_only(item) for name, item in fields.items()}
        if all(changed[name] is fields[name] for name in fields):
            return value
        made = copy.copy(value)
        for name, item in changed.items():
            object.__setattr__(made, name, item)  # the copy is ours until it is returned
        return made
    return value


def is_frozen(instance: Any) -> bool:
    """Whether every field of the attrs ``instance`` refuses to be set."""
    for field in attrs.fields(type(instance)):
        try:
            setattr(instance, field.name, getattr(instance, field.name))  # the same value
        except attrs.exceptions.FrozenError:
            continue
        return False
    return True


def mutable_parts(value: Any, where: str) -> list[str]:
    """Where in ``value`` (an attrs instance, perhaps holding others, in tables, lists and
    tuples) an attrs instance can have its fields set, each as ``where.field...``."""
    found: list[str] = []
    if attrs.has(type(value)):
        if not is_frozen(value):
            found.append(where)
        for field in attrs.fields(type(value)):
            found += mutable_parts(getattr(value, field.name), f"{where}.{field.name}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found += mutable_parts(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found += mutable_parts(item, f"{where}[{index}]")
    return found
