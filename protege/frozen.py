"""Read-only copies of settings, so that what one run reads no other can change."""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["is_frozen", "read_only"]


def read_only(value: Any) -> Any:
    """``value`` with every table in it a read-only mapping and every list a tuple; a
    frozen attrs instance is copied with its fields made so too. Other values as they are."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
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
