"""The graph build's fast paths against the general ones they replace: `c_struct_values` (a descriptor's fields
in order, packed at once) against `c_struct` (keyword fields, each checked), and `_ptr` through the plan runner's
`address` against numpy's own array interface."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vkinfer import cpu
from vkinfer.cpu import _Desc, _ptr, c_struct, c_struct_values

_NAMES = [f[0] for f in _Desc._fields_]
_POINTERS = {"weights", "w_zp", "bias", "scale"}
_INTS = {ctypes.c_uint32: (0, 2**32 - 1), ctypes.c_int32: (-2**31, 2**31 - 1), ctypes.c_void_p: (0, 2**64 - 1)}


def _field(name: str):
    t = dict(_Desc._fields_)[name]
    lo, hi = _INTS[t]
    edges = st.sampled_from([lo, hi, lo + 1, hi - 1, 0 if lo <= 0 else lo, lo - 1, hi + 1])
    return st.one_of(edges, st.integers(lo, hi), st.integers(lo - 2**70, hi + 2**70))


def _same(values: tuple) -> None:
    fields = dict(zip(_NAMES, values, strict=True))
    try:
        want = bytes(c_struct(_Desc, "convolution", **fields))
    except Exception as e:  # noqa: BLE001 - the same type and message are wanted of the fast path
        with pytest.raises(type(e)) as got:
            c_struct_values(_Desc, "convolution", values)
        assert str(got.value) == str(e)
        return
    assert bytes(c_struct_values(_Desc, "convolution", values)) == want


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[_field(n) for n in _NAMES]))
def test_values_in_order_pack_as_the_checked_keywords(values):
    _same(values)


def test_numpy_integers_and_odd_pointers_take_the_checked_path():
    base = [1] * len(_NAMES)
    _same(tuple(base))
    for k, name in enumerate(_NAMES):
        for odd in (np.int64(7), np.uint32(7), None, 2.5, True):
            v = list(base)
            v[k] = odd
            _same(tuple(v))
        if name in _POINTERS:
            v = list(base)
            v[k] = -1
            _same(tuple(v))


@pytest.mark.parametrize("make", [
    lambda: np.arange(24, dtype=np.int32).reshape(2, 3, 4),
    lambda: np.frombuffer(bytes(range(16)), np.uint8),  # read-only (an initializer's array)
    lambda: np.zeros(0, np.float32),
    lambda: np.arange(10, dtype=np.int8)[3:],  # an offset view
    lambda: np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],  # strided: the array interface's address
    lambda: np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4)),
])
def test_ptr_is_the_array_interfaces_address(make):
    a = make()
    assert _ptr(a) == a.__array_interface__["data"][0]


def test_ptr_without_the_plan_runner(monkeypatch):
    monkeypatch.setattr(cpu, "_address", None)
    for a in (np.arange(6, dtype=np.int32), np.frombuffer(b"abcd", np.uint8), np.arange(8)[::2]):
        assert _ptr(a) == a.__array_interface__["data"][0]
