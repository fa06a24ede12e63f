"""TFLite's 8-bit AVERAGE_POOL_2D, imported as vkinfer:TFLiteAveragePool (TFLite's integer average, rounding half
away from zero, fused activation bounds; cpu/average_pool.py, vulkan/tflite_average_pool.py) between two
Transposes (NHWC <-> NCHW), against ai-edge-litert on every device, where every node must run. Filter x stride
crossed (ncnn style) with SAME and VALID padding, odd sizes and channel counts, batch 2, non-square filters and
strides, every fused activation, a window past 16 x 16; inputs near the type's ends, where ties are common.
Randomised shapes: tests/importers/test_tflite.py."""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from vkinfer.testing import tflite_zoo

from ._build import check_vs_litert, cross, qrand, refused

ACTS = [None, "relu", "relu6", "relu_n1_to_1"]


def _table() -> list[tuple]:
    """(id, NHWC shape, filter, stride, padding, activation, dtype)."""
    cases = []
    for i, c in enumerate(cross(f=[1, 2, 3, 5], s=[1, 2, 3])):
        f, s = c["f"], c["s"]
        pad = ["SAME", "VALID"][i % 2]
        shape = (1 + (i % 5 == 0), f + 2 + i % 3, f + 4 + i % 4, [3, 5, 8, 17][i % 4])
        cases.append((f"f{f}s{s}-{pad}-{ACTS[i % 4]}", shape, f, s, pad, ACTS[i % 4], ["int8", "uint8"][i % 2]))
    cases += [
        ("rect_filter_stride", (2, 9, 7, 5), (2, 3), (1, 2), "SAME", "relu6", "int8"),
        ("window_17", (1, 17, 17, 4), 17, 1, "VALID", None, "uint8"),
        ("mobilenet_v1_head", (1, 7, 7, 64), 7, 2, "VALID", None, "int8"),
    ]
    return cases


TABLE = _table()


def _ties(rng, shape, dt):
    """Values in a window of 4 near an end of the type (window averages land on .5 often), or anywhere."""
    info = np.iinfo(dt)
    base = int(rng.choice([info.min, info.max - 3]))
    return (base + rng.integers(0, 4, shape)).astype(dt)


@pytest.mark.parametrize("cid,shape,f,s,pad,act,dt", TABLE, ids=[c[0] for c in TABLE])
def test_tflite_average_pool_equals_litert_on_every_device(cid, shape, f, s, pad, act, dt):
    blob = tflite_zoo.op_model("average_pool", len(cid), dtype=dt, shape=shape, filter=f, stride=s, padding=pad,
                               activation=act)
    rng = np.random.default_rng(len(cid))
    check_vs_litert(blob, [{"x": _ties(rng, shape, np.dtype(dt))}, {"x": qrand(rng, shape, np.dtype(dt))}])


@pytest.mark.parametrize("fw,out_scale,culprit", [(0, 0.1, "FilterWidth"), (2, 0.2, "scale")],
                         ids=["filter0", "rescaling"])
def test_bad_tflite_average_pool_refused_naming_the_op(fw, out_scale, culprit):
    m = tflite_zoo.ModelBuilder()
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    x = m.tensor("x", (1, 4, 4, 2), np.int8, scale=0.1, zero_point=0)
    y = m.tensor("y", (1, 2, 2, 2), np.int8, scale=out_scale, zero_point=0)
    m.op(B.AVERAGE_POOL_2D, [x], [y], A.Pool2DOptions, Padding=1, StrideW=2, StrideH=2, FilterWidth=fw,
         FilterHeight=2)
    refused(m.finish([x], [y]), {"x": np.zeros((1, 4, 4, 2), np.int8)}, culprit, name="op 0 (AVERAGE_POOL_2D)")
