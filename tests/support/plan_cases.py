"""Graphs that send every layer kind of a compiled plan (vkinfer/compiler/plan.py) through one recorded run:
convolution, max pool, TFLite's average pool, lookup-table ops (leaky relu, sigmoid, add, mul; equal
shapes and a broadcast row), channel concat with and without requantization, channel shuffle (5-D alias +
channel gather), repack (a transpose of size-1 axes), global average pool, flatten (alias) and QGemm.
Used by test_plan.py and, under the validation layer, by vk_validation_run.py."""

from __future__ import annotations

import numpy as np

from vkinfer.model.graph import Graph, Node, TensorInfo


class _B:
    def __init__(self, rng: np.random.Generator, dtype):
        self.rng, self.dt = rng, np.dtype(dtype)
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.k = 0

    def name(self, s: str) -> str:
        self.k += 1
        return f"{s}{self.k}"

    def const(self, v) -> str:
        n = self.name("c")
        self.consts[n] = np.asarray(v)
        return n

    def q(self):
        """A random (scale, zero point) pair of the activation type, as constant names."""
        lo, hi = (0, 255) if self.dt == np.uint8 else (-128, 127)
        scale = np.float32(self.rng.uniform(0.01, 0.1))
        zp = self.dt.type(self.rng.integers(lo + 20, hi - 20))
        return self.const(scale), self.const(zp)

    def node(self, op: str, ins: list[str], **attrs) -> str:
        out = self.name("t")
        self.nodes.append(Node(op, self.name(op.split(":")[-1] + "_"), ins, [out], attrs))
        return out

    def conv(self, x, xq, c, m, k=3, group=1, pads=1, stride=1):
        w = self.rng.integers(-60, 61, (m, c // group, k, k)).astype(np.int8)
        yq = self.q()
        bias = self.rng.integers(-2000, 2000, m).astype(np.int32)
        y = self.node("QLinearConv", [x, *xq, self.const(w), self.const(np.float32(0.004)), self.const(np.int8(0)),
                                      *yq, self.const(bias)],
                      pads=[pads] * 4, strides=[stride] * 2, group=group, kernel_shape=[k, k])
        return y, yq


def build(rng: np.random.Generator, c: int, h: int, w: int, dtype=np.uint8, classes: int = 7) -> Graph:
    """The graph over an 8-bit (1, c, h, w) input `x` (c >= 2, any odd sizes)."""
    b = _B(rng, dtype)
    xq = b.q()
    a, aq = b.conv("x", xq, c, 6)
    a = b.node("MaxPool", [a], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    lo, hi = (0, 255) if b.dt == np.uint8 else (-128, 127)
    a = b.node("vkinfer:TFLiteAveragePool", [a], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
               activation_min=lo + 3, activation_max=hi - 5)  # border windows of 4 and 6: ties
    leaky = b.node("com.microsoft:QLinearLeakyRelu", [a, *aq, *aq], alpha=0.1)
    sig_q = b.q()
    sig = b.node("com.microsoft:QLinearSigmoid", [a, *aq, *sig_q])
    add_q = b.q()
    s = b.node("com.microsoft:QLinearAdd", [leaky, *aq, sig, *sig_q, *add_q])
    row = rng.integers(0, 256, (1, 6, 1, 1)).astype(np.uint8).view(b.dt)  # a per-channel operand, broadcast
    mul_q = b.q()
    s = b.node("com.microsoft:QLinearMul", [s, *add_q, b.const(row), *b.q(), *mul_q])
    d, dq = b.conv(s, mul_q, 6, 5, group=1)  # odd channel count: concat offsets mid-word
    cat_q = b.q()
    cat = b.node("com.microsoft:QLinearConcat", [*cat_q, s, *mul_q, d, *dq, s, *cat_q], axis=1)  # 6 + 5 + 6
    plain = b.node("Concat", [cat, cat], axis=1)  # 34 channels, same parameters: a copy
    _, ch, hh, ww = 1, 34, -(-h // 2), -(-w // 2)
    r5 = b.node("Reshape", [plain, b.const(np.array([1, 2, ch // 2, hh, ww], np.int64))])
    tr = b.node("Transpose", [r5], perm=[0, 2, 1, 3, 4])
    sh = b.node("Reshape", [tr, b.const(np.array([1, ch, hh, ww], np.int64))])
    gap_q = b.q()
    g = b.node("com.microsoft:QLinearGlobalAveragePool", [sh, *cat_q, *gap_q], channels_last=0)
    t = b.node("Transpose", [g], perm=[0, 2, 3, 1])  # (1, 1, 1, 34): a repack, not an alias
    f = b.node("Flatten", [t], axis=1)
    wgt = rng.integers(-60, 61, (classes, ch)).astype(np.int8)
    y = b.node("com.microsoft:QGemm", [f, *gap_q, b.const(wgt), b.const(np.float32(0.003)), b.const(np.int8(0)),
                                       b.const(rng.integers(-500, 500, classes).astype(np.int32)), *b.q()],
               transB=1)
    b.nodes[-1].outputs = ["y"]
    del y
    for n in b.nodes:
        n.attrs["_static"] = all(not i or i in b.consts for i in n.inputs[1:])
    return Graph(b.nodes, [TensorInfo("x", (1, c, h, w), b.dt)], [TensorInfo("y", None, b.dt)], b.consts)
