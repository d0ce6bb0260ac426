"""The values checks take out of a child's answer: each of the type it claims, or nothing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_setup.probing import answer_values as A

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=10)


@pytest.mark.parametrize("value, limit, expected", [
    ("libcudnn.so.9", 300, "libcudnn.so.9"),
    ("", 300, ""),
    ("x" * 500, 300, "x" * 300),
    ("abcdef", 3, "abc"),
    (None, 300, None),
    (7, 300, None),
    (True, 300, None),
    (["a"], 300, None),
    ({"a": "b"}, 300, None),
    (b"bytes", 300, None),
])
def test_text(value, limit, expected):
    assert A.text(value, limit) == expected


@pytest.mark.parametrize("value, limit, expected", [
    ("NVML", None, "NVML"),
    ("x" * 5000, None, "x" * 5000),
    ("x" * 5000, 100, "x" * 100),
    ("", None, None),
    ("", 100, None),
    (0, None, None),
    (False, 100, None),
    (["NVML"], 100, None),
])
def test_nonempty(value, limit, expected):
    assert A.nonempty(value, limit) == expected


@pytest.mark.parametrize("value, limit, expected", [
    ("undefined symbol: cudnnFoo", 300, "undefined symbol: cudnnFoo"),
    ("y" * 300, 300, "y" * 300),
    ("y" * 301, 300, "y" * 300 + "…"),
    (None, 300, "None"),
    ({"k": 1}, 300, "{'k': 1}"),
    (12345, 3, "123…"),
])
def test_shown(value, limit, expected):
    assert A.shown(value, limit) == expected


@pytest.mark.parametrize("value, expected", [
    ({"a": 1}, {"a": 1}), ({}, {}), (None, {}), ([("a", 1)], {}), ("{}", {}), (1, {}),
])
def test_mapping(value, expected):
    assert A.mapping(value) == expected


@pytest.mark.parametrize("value, low, high, expected", [
    (13000, 1000, 100000, 13000),
    (999, 1000, 100000, None),
    (1000, 1000, 100000, 1000),
    (100000, 1000, 100000, None),  # the upper bound is left out
    (True, None, None, None),  # JSON's true is not a number
    (False, 0, 10, None),
    (3.0, None, None, None),
    ("13000", 1000, 100000, None),
    (-5, None, None, -5),
    (90100, 1, 10**7, 90100),
    (0, 1, 10**7, None),
])
def test_integer(value, low, high, expected):
    assert A.integer(value, low, high) == expected


@pytest.mark.parametrize("value, limit, expected", [
    (["/usr/lib/libcudnn.so.9", "relative/lib.so", 3, None, "/a\0b", "/" + "p" * 5000, "/ok"],
     4000, ["/usr/lib/libcudnn.so.9", "/ok"]),
    ("/usr/lib/libcudnn.so.9", 4000, []),
    ({"/a": 1}, 4000, []),
    (["/a", "/b", "/c"], 2, ["/a", "/b"]),  # only the first `limit` entries are looked at
    (["x", "/b"], 1, []),
])
def test_paths(value, limit, expected):
    assert A.paths(value, limit) == expected


def test_paths_default_bound():
    assert len(A.paths(["/lib"] * (A.MAX_PATHS + 10))) == A.MAX_PATHS


@settings(deadline=None, database=None)  # a busy machine is no failure
@given(JSON)
def test_every_coercer_takes_any_answer(value):
    """Whatever a child sends, each gives its own type or nothing, and never raises."""
    assert A.text(value) is None or (isinstance(value, str) and A.text(value) == value[:300])
    got = A.nonempty(value, 50)
    assert got is None or (isinstance(got, str) and got and len(got) <= 50)
    assert isinstance(A.shown(value), str) and len(A.shown(value)) <= 301
    assert isinstance(A.mapping(value), dict)
    number = A.integer(value, 0, 100)
    assert number is None or (type(number) is int and 0 <= number < 100)
    assert all(isinstance(p, str) and p.startswith("/") for p in A.paths(value))
