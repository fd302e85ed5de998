"""Read-only settings: still a dict and a list to every reader, refusing every change, and
copied into plain changeable ones."""

import copy
import json
import pickle

import attrs
import pytest

from protege.frozen import ReadOnlyDict, ReadOnlyList, is_frozen, mutable_parts, read_only

CHANGES = [
    lambda d: d.__setitem__("a", 1),
    lambda d: d.update(a=1),
    lambda d: d.__init__(a=1),
    lambda d: d.pop("zones"),
    lambda d: d.setdefault("b", 2),
    lambda d: d.clear(),
    lambda d: d["zones"].append("moon"),
    lambda d: d["zones"].__init__(["moon"]),
    lambda d: d["zones"].extend(["moon"]),
    lambda d: d["zones"].__setitem__(0, "moon"),
    lambda d: d["nested"]["deep"].__setitem__("x", 2),
    lambda d: d["pairs"][0]["k"].append(2),
]


@pytest.mark.parametrize("change", CHANGES)
def test_no_change_gets_through(change):
    settings = read_only({"zones": ["north"], "nested": {"deep": {"x": 1}}, "pairs": ({"k": [1]},)})
    before = copy.deepcopy(settings)
    with pytest.raises(TypeError, match="these settings are read-only"):
        change(settings)
    assert settings == before


def test_readers_see_a_dict_and_a_list():
    settings = read_only({"zones": ["north"], "n": 1})
    assert isinstance(settings, dict)
    assert isinstance(settings["zones"], list)
    assert json.loads(json.dumps(settings)) == {"zones": ["north"], "n": 1}
    assert settings == {"zones": ["north"], "n": 1}
    again = pickle.loads(pickle.dumps(settings))
    assert type(again) is ReadOnlyDict
    assert type(again["zones"]) is ReadOnlyList


def test_a_copy_is_plain_and_changeable():
    settings = read_only({"zones": ["north"]})
    for made in (copy.copy(settings), copy.deepcopy(settings), dict(settings)):
        made["extra"] = 1
    deep = copy.deepcopy(settings)
    deep["zones"].append("south")
    assert type(deep) is dict
    assert type(deep["zones"]) is list
    assert settings == {"zones": ["north"]}


@attrs.frozen
class Frozen:
    n: int = 1


@attrs.define
class Loose:
    n: int = 1


@attrs.define
class HalfFrozen:
    fixed: int = attrs.field(default=1, on_setattr=attrs.setters.frozen)
    loose: int = 2


@attrs.frozen
class Holder:
    inner: object = attrs.Factory(Loose)
    items: tuple = ()


def test_frozen_means_every_field_refuses():
    assert is_frozen(Frozen())
    assert not is_frozen(Loose())
    assert not is_frozen(HalfFrozen())  # its first field refuses; the second does not


def test_a_settable_instance_anywhere_inside_is_named():
    assert mutable_parts(Frozen(), "S") == []
    assert mutable_parts(Holder(), "S") == ["S.inner"]
    assert mutable_parts(Holder(inner=Frozen(), items=(Loose(),)), "S") == ["S.items[0]"]
