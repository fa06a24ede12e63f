"""The op-level API's cache of prepared layers (packed weights, pipelines, buffers).

A hit needs equal parameters *and* equal constant arrays. The arrays are compared against copies
kept in the cache (memcmp speed), not hashed: hashing a 1 MB weight tensor on every call costs more
than running the layer, and comparing copies also catches weights edited in place.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np


class LayerCache:
    """LRU of prepared layers keyed by a parameter tuple, verified by the constant arrays' contents."""

    def __init__(self, size: int = 16):
        self.size = size
        self._entries: OrderedDict[int, tuple[tuple, list[np.ndarray], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._next = 0

    def get(self, params: tuple, arrays: list[np.ndarray], make: Callable[[], Any]) -> Any:
        """The prepared layer for (params, arrays), made by `make()` on a miss."""
        with self._lock:
            for slot, (p, arrs, op) in self._entries.items():
                if p == params and all(a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
                                       for a, b in zip(arrs, arrays, strict=True)):
                    self._entries.move_to_end(slot)
                    return op
            op = make()
            self._entries[self._next] = (params, [np.array(a, copy=True) for a in arrays], op)
            self._next += 1
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return op
