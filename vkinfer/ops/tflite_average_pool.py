"""TFLite AVERAGE_POOL_2D's definition shared by the devices' lowerings."""

from __future__ import annotations

from ..reference.requant import QRANGE


def tflite_pool_attrs(node, dt) -> tuple:
    """(kernel, strides, pads, lo, hi) of a vkinfer:TFLiteAveragePool node on a tensor of dtype `dt`."""
    a = node.attrs
    k = tuple(int(v) for v in a["kernel_shape"])
    st = tuple(int(v) for v in a.get("strides") or (1, 1))
    pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
    lo = QRANGE[dt][0] if a.get("activation_min") is None else int(a["activation_min"])
    hi = QRANGE[dt][1] if a.get("activation_max") is None else int(a["activation_max"])
    return k, st, pads, lo, hi
