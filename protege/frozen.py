"""Read-only copies of settings, so that what one run reads no other can change."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn

import attrs

__all__ = ["ReadOnlyDict", "ReadOnlyList", "is_frozen", "read_only"]


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        f"these settings are read-only ({type(self).__name__}): every run reads the same "
        "ones; copy them (dict(...), list(...)) to change a copy of your own"
    )


class ReadOnlyDict(dict):
    """A table of settings: a ``dict`` (as TOML, JSON and validators expect) that refuses
    to be changed."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyDict:
        return self  # nothing in it can change


class ReadOnlyList(list):
    """A list of settings: a ``list`` that refuses to be changed."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyList:
        return self


def read_only(value: Any) -> Any:
    """``value`` with every table and list in it made read-only (still a ``dict``, a
    ``list``); a frozen attrs instance is copied with its fields made so too. Other values
    as they are."""
    if isinstance(value, ReadOnlyDict | ReadOnlyList):
        return value
    if isinstance(value, Mapping):
        return ReadOnlyDict({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(read_only(item) for item in value)
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
    """Whether the attrs ``instance`` refuses to have its fields set."""
    fields = attrs.fields(type(instance))
    if not fields:
        return True
    name = fields[0].name
    try:
        setattr(instance, name, getattr(instance, name))  # the same value: nothing changes
    except attrs.exceptions.FrozenInstanceError:
        return True
    return False
