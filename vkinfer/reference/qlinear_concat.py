"""com.microsoft QLinearConcat, bit-exact with ONNX Runtime 1.31 (contrib_ops/cpu/quantization/qlinear_concat.cc).

Each input whose scale and zero point equal the output's (bitwise float compare) is copied; any other is
requantized through a 256-entry table (see _lookup) of the identity:
    table[i] = MlasQuantizeLinear(x_scale * float(int(T(i)) - x_zp), y_scale, y_zp)
i.e. y = clamp(rne(float32(float32(x_scale * (x - x_zp)) / y_scale)), qmin - y_zp, qmax - y_zp) + y_zp.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._lookup import apply_table, build_table
from ._opdef import OpDef, attr


def qlinear_concat(y_scale, y_zero_point, inputs, axis: int) -> np.ndarray:
    """inputs: a sequence of (x, x_scale, x_zero_point) triples, all of the output's dtype."""
    if not isinstance(y_zero_point, np.ndarray | np.generic):
        raise TypeError("y_zero_point must be a numpy uint8/int8 scalar or array (it sets the dtype)")
    dtype = np.asarray(y_zero_point).dtype
    if dtype not in qc.QRANGE:
        raise TypeError(f"y_zero_point must be uint8 or int8, got {dtype}")
    ys, yz = qc.scale("y_scale", y_scale), qc.zero_point("y_zero_point", y_zero_point, dtype)
    if not isinstance(inputs, list | tuple) or len(inputs) == 0:
        raise ValueError("inputs must be a non-empty sequence of (x, x_scale, x_zero_point) triples")
    checked = []
    for j, t in enumerate(inputs):
        if not isinstance(t, list | tuple) or len(t) != 3:
            raise ValueError(f"inputs[{j}] must be a (x, x_scale, x_zero_point) triple")
        x = qc.qtensor(f"inputs[{j}].x", t[0])
        if x.dtype != dtype:
            raise TypeError(f"inputs[{j}].x must be {dtype}, got {x.dtype}")
        checked.append((x, qc.scale(f"inputs[{j}].x_scale", t[1]),
                        qc.zero_point(f"inputs[{j}].x_zero_point", t[2], dtype)))
    nd = checked[0][0].ndim
    if not isinstance(axis, int) or not -nd <= axis < nd:
        raise ValueError(f"axis {axis!r} is out of range for {nd}-D inputs")
    # The shapes before any requantization: a mismatch of a 1 GiB input took 4 s of table lookups to report
    # (fuzz finding tflite slow-unit-612cda7d).
    k = axis % nd
    for j, (x, _, _) in enumerate(checked):
        if x.ndim != nd or x.shape[:k] + x.shape[k + 1:] != checked[0][0].shape[:k] + checked[0][0].shape[k + 1:]:
            raise ValueError(f"inputs cannot be concatenated on axis {axis}: inputs[{j}] has shape {list(x.shape)}, "
                             f"inputs[0] {list(checked[0][0].shape)}")
    parts = [x if xs == ys and xz == yz else apply_table(x, build_table(dtype, xs, xz, ys, yz, lambda v: v))
             for x, xs, xz in checked]
    return np.concatenate(parts, axis=axis)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    if (len(x) - 2) % 3 or any(x[i] is None for i in range(2, len(x), 3)) or any(
            x[i] is None for i in range(3, len(x), 3)):
        raise ValueError(f"inputs must be y_scale, y_zero_point, then (x, x_scale, x_zero_point) triples, got "
                         f"{len(x)} inputs")
    triples = [tuple(x[i:i + 3]) for i in range(2, len(x), 3)]
    return [qlinear_concat(x[0], x[1], triples, axis=int(attr(node, "axis")))]


DEFINITIONS = (OpDef("com.microsoft:QLinearConcat", _kernel, "move", (5, (0, 1, 2, 3)), y_params=(0, 1)),)
