"""plain() (plugins/plugin_utils/gpuhost_plain.py): what the filter and action plugins hand
the pure module_utils instead of Ansible's lazy, tagged containers and scalars."""

from __future__ import annotations

import datetime
from pathlib import Path

from ansible_collections.gpuhost.gpu.plugins.plugin_utils.gpuhost_plain import plain

ROOT = Path(__file__).resolve().parents[1]


class TaggedStr(str):
    """Stands in for Ansible's _AnsibleTaggedStr."""


class TaggedInt(int):
    pass


class TaggedFloat(float):
    pass


class LazyDict(dict):
    pass


class LazyList(list):
    pass


def _exact_types(value):
    """Every type in value, walked: plain() must leave no subclass behind."""
    if isinstance(value, dict):
        return (
            {type(value)}
            | {type(k) for k in value}
            | set().union(*(_exact_types(v) for v in value.values()))
        )
    if isinstance(value, list):
        return {type(value)} | set().union(*(_exact_types(v) for v in value))
    return {type(value)}


def test_nested_containers_become_dicts_and_lists():
    value = LazyDict(
        a=LazyList([1, (2, 3), LazyDict(b=(TaggedStr("x"),))]),
        c=(LazyList([]), {}),
    )
    got = plain(value)
    assert got == {"a": [1, [2, 3], {"b": ["x"]}], "c": [[], {}]}
    assert _exact_types(got) <= {dict, list, str, int}


def test_keys_become_str():
    assert plain({1: "one", TaggedStr("k"): 2, None: 3}) == {"1": "one", "k": 2, "None": 3}
    assert all(type(k) is str for k in plain({TaggedStr("k"): 1}))


def test_bool_stays_bool_and_none_stays_none():
    got = plain([True, False, None, {"x": True}])
    assert got == [True, False, None, {"x": True}]
    assert [type(v) for v in got[:3]] == [bool, bool, type(None)]
    assert type(got[3]["x"]) is bool


def test_scalar_subclasses_become_their_plain_type():
    got = plain([TaggedStr("abc"), TaggedInt(7), TaggedFloat(0.5), 2, 1.5, "s"])
    assert got == ["abc", 7, 0.5, 2, 1.5, "s"]
    assert [type(v) for v in got] == [str, int, float, int, float, str]


def test_anything_else_becomes_its_str():
    # A YAML date in the inventory reaches a plugin as a (tagged) datetime.date.
    assert plain({"when": datetime.date(2024, 1, 2)}) == {"when": "2024-01-02"}


def test_the_input_is_not_changed():
    value = {"a": [1, {"b": 2}]}
    got = plain(value)
    got["a"][1]["b"] = 3
    assert value == {"a": [1, {"b": 2}]}
