"""float32 LayerNormalization (ONNX opset 17) with ONNX Runtime 1.31's CPU bits, and vkinfer:LayerNormChain (the
decomposed layer norm that vkinfer/model/layer_norm_fuse.py fuses), in numpy: the reference device's kernels and the
specification cpu_fallback/src/ops/layer_norm.c follows.

LayerNormalization: X viewed as (rows, n), n = prod(X.shape[axis:]); ORT 1.31 (layer_norm_impl.cc, MLAS
layernorm.cpp / layernorm_kernel_avx2.cpp) takes one of three paths per row, measured bit for bit against the
installed onnxruntime (tests/ops/test_layer_normalization.py):

- `welford` (its scalar ComputeJob, n < 8, where MLAS declines the row): float32 Welford, for h = 0..n-1:
  d = x - mean; mean += d / (float)(h + 1); m2 += d * (x - mean) (unfused); den = sqrtf(m2 / n + eps);
  y = (x - mean) / den * scale (+ bias); InvStdDev = 1 / den.
- `avx2` (MLAS's AVX2 kernel, n >= 8 on an AVX2 machine): the mean from a float64 sum in 4 lanes (elements i % 4,
  blocks of 4; lanes folded (l0 + l2) + (l1 + l3); the n % 4 tail added in turn) divided by n in float64, rounded
  to float32; the variance from 8 float32 lanes of fused d * d + v over blocks of 8 (lanes folded as
  ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))), then the n % 8 tail in turn: its first 4 elements (when it has 4 or
  more) unfused (v + d * d, the compiler's 4-wide epilogue multiplies), the rest fused; inv = 1 / sqrtf(v / n +
  eps); y = fma((x - mean) * inv, scale, bias), or (x - mean) * inv * scale without a bias; InvStdDev = inv.
  The lane order is MLAS's and fixed, so vkinfer reproduces it on every machine (the C kernel calls fmaf).
  ORT on an x86 machine without AVX2 (or ARM) runs `welford` for every n: its bits differ there by the rounding
  of the mean and variance (bounded in the tests).
- `double` (its ComputeJobGeneric: scale or bias whose size is not n, or that varies along the outer axes): mean
  and mean of squares summed in float64 in order, den = sqrt(msq / n - mean^2 + eps) in float64,
  y = (float)(((x - mean) / den) * scale + bias) (bias 0.0 when absent), InvStdDev = (float)(1 / den).

Mean and InvStdDev have X's shape with the axes from `axis` on set to 1. stash_type must be 1 (float32).

vkinfer:LayerNormChain (inputs X, eps, gamma, beta; gamma/beta optional; attributes `axes` as the ReduceMeans had
them, `eps_first`, `gamma_first`, `beta_first`: the operand order of the Add/Mul/Add) is the chain
ReduceMean(X) -> Sub(X, mean) -> Pow(d, 2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(d, std) [-> Mul(gamma)
-> Add(beta)] computed as vkinfer runs those ops one by one: both means in ReduceMean's order
(vkinfer/reference/float_reduce.py reduce_ort: over the last axes ORT's FastReduceKR, Eigen's 4-lane sum of each
row, one division by (float)count), d * d for the Pow, then one IEEE operation per element in the chain's order,
so fusing never changes an output's bits.
"""

from __future__ import annotations

import numpy as np

from ._float32 import fma32
from ._opdef import OpDef
from .float_reduce import reduce_ort

F32 = np.float32
F64 = np.float64
CHAIN = "vkinfer:LayerNormChain"
_AVX2_MIN = 8  # MLAS declines rows shorter than this (layernorm.cpp): ORT's scalar Welford runs them


def _f32(what: str, v) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype != F32:
        raise TypeError(f"LayerNormalization: {what} must be float32, got {v.dtype}")
    return v


def _aligned(shape: tuple[int, ...], rank: int, what: str, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` right-aligned to `rank` dims; ValueError unless it broadcasts to X's shape (ORT's CheckInputs)."""
    if len(shape) > rank:
        raise ValueError(f"LayerNormalization: {what} has rank {len(shape)}, more than X's {rank}")
    dims = (1,) * (rank - len(shape)) + tuple(shape)
    if any(d != 1 and d != xd for d, xd in zip(dims, x_shape, strict=True)):
        raise ValueError(f"LayerNormalization: {what} of shape {list(shape)} does not broadcast to X's "
                         f"{list(x_shape)}")
    return dims


def ort_path(x_shape: tuple[int, ...], scale_shape: tuple[int, ...], bias_shape: tuple[int, ...] | None,
             axis: int) -> str:
    """Which of ORT's paths a row takes (module docstring): "welford", "avx2" or "double"; `axis` normalised."""
    rank = len(x_shape)
    n = int(np.prod(x_shape[axis:], dtype=np.int64))
    sdims = _aligned(scale_shape, rank, "scale", x_shape)
    bdims = _aligned(bias_shape, rank, "bias", x_shape) if bias_shape is not None else None
    size = int(np.prod(scale_shape, dtype=np.int64))
    if size != n or (bdims is not None and int(np.prod(bias_shape, dtype=np.int64)) != size):
        return "double"
    if any(d != 1 for d in sdims[:axis]) or (bdims is not None and any(d != 1 for d in bdims[:axis])):
        return "double"  # a parameter varying along the outer axes: ORT's generic broadcast
    return "welford" if n < _AVX2_MIN else "avx2"


def _welford(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: F32):
    rows, n = x.shape
    mean = np.zeros(rows, F32)
    m2 = np.zeros(rows, F32)
    for h in range(n):
        d = x[:, h] - mean
        mean = mean + d / F32(h + 1)
        m2 = m2 + d * (x[:, h] - mean)
    den = np.sqrt(m2 / F32(n) + eps)
    y = (x - mean[:, None]) / den[:, None] * scale
    if bias is not None:
        y = y + bias
    return y, mean, F32(1) / den


def _lanes8(v: np.ndarray) -> np.ndarray:
    """MLAS's horizontal sum of 8 float32 lanes: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))."""
    a = v[:, :4] + v[:, 4:]
    return (a[:, 0] + a[:, 2]) + (a[:, 1] + a[:, 3])


def _avx2(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: F32):
    rows, n = x.shape
    xd = x.astype(F64)
    acc = np.zeros((rows, 4), F64)
    i = 0
    while i + 4 <= n:
        acc = acc + xd[:, i:i + 4]
        i += 4
    dsum = (acc[:, 0] + acc[:, 2]) + (acc[:, 1] + acc[:, 3])
    for j in range(i, n):
        dsum = dsum + xd[:, j]
    mean = (dsum / F64(n)).astype(F32)
    v = np.zeros((rows, 8), F32)
    i = 0
    while i + 8 <= n:
        d = x[:, i:i + 8] - mean[:, None]
        v = fma32(d, d, v)
        i += 8
    var = _lanes8(v)
    unfused = i + (n - i) // 4 * 4
    for j in range(i, n):
        d = x[:, j] - mean
        var = var + d * d if j < unfused else fma32(d, d, var)
    inv = F32(1) / np.sqrt(var / F32(n) + eps)
    t = (x - mean[:, None]) * inv[:, None]
    y = t * scale if bias is None else fma32(t, np.broadcast_to(scale, t.shape), np.broadcast_to(bias, t.shape))
    return y, mean, inv


def _double(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: F32):
    rows, n = x.shape
    xd = x.astype(F64)
    mean = np.zeros(rows, F64)
    msq = np.zeros(rows, F64)
    for h in range(n):
        mean = mean + xd[:, h]
        msq = msq + xd[:, h] * xd[:, h]
    mean = mean / F64(n)
    den = np.sqrt(msq / F64(n) - mean * mean + F64(eps))
    b = np.zeros((), F64) if bias is None else bias.astype(F64)
    y = ((xd - mean[:, None]) / den[:, None]) * scale.astype(F64) + b
    return y.astype(F32), mean.astype(F32), (F64(1) / den).astype(F32)


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None, axis: int = -1,
               epsilon: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ORT 1.31's float32 LayerNormalization (module docstring): (Y, Mean, InvStdDev)."""
    x, scale = _f32("X", x), _f32("Scale", scale)
    bias = None if bias is None else _f32("B", bias)
    rank = x.ndim
    if not -rank <= int(axis) < rank:
        raise ValueError(f"LayerNormalization: axis {axis} is out of range for rank {rank}")
    axis = int(axis) % rank
    path = ort_path(x.shape, scale.shape, None if bias is None else bias.shape, axis)
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    stat_shape = x.shape[:axis] + (1,) * (rank - axis)
    if n == 0:
        raise ValueError(f"LayerNormalization: X.shape[axis:] = {list(x.shape[axis:])} is empty")
    eps = F32(epsilon)
    x2 = x.reshape(rows, n)
    if path == "double":  # parameters broadcast to X, one row each
        sc = np.broadcast_to(scale, x.shape).reshape(rows, n)
        bi = None if bias is None else np.broadcast_to(bias, x.shape).reshape(rows, n)
    else:
        sc = scale.reshape(1, n)
        bi = None if bias is None else bias.reshape(1, n)
    with np.errstate(all="ignore"):
        y, mean, inv = {"welford": _welford, "avx2": _avx2, "double": _double}[path](x2, sc, bi, eps)
    return (np.asarray(y, F32).reshape(x.shape), np.asarray(mean, F32).reshape(stat_shape),
            np.asarray(inv, F32).reshape(stat_shape))


def _kernel(node, x: list, memo: dict) -> list:
    """A LayerNormalization node (the interpreter's kernel): Y, and Mean / InvStdDev where the node names them."""
    if int(node.attrs.get("stash_type", 1)) != 1:
        raise ValueError(f"stash_type {node.attrs.get('stash_type')} is not supported (ONNX Runtime computes in "
                         "float32: stash_type 1)")
    bias = x[2] if len(x) > 2 else None
    y, mean, inv = layer_norm(x[0], x[1], bias, int(node.attrs.get("axis", -1)),
                              float(node.attrs.get("epsilon", 1e-5)))
    return [y, mean, inv][:max(1, len(node.outputs))]


def chain_parts(node) -> tuple[list[int], bool, bool, bool]:
    """A vkinfer:LayerNormChain node's (axes, eps_first, gamma_first, beta_first)."""
    axes = [int(a) for a in node.attrs.get("axes") or []]
    if not axes:
        raise ValueError("vkinfer:LayerNormChain needs its ReduceMeans' axes")
    return (axes, bool(int(node.attrs.get("eps_first", 0))), bool(int(node.attrs.get("gamma_first", 0))),
            bool(int(node.attrs.get("beta_first", 0))))


def layer_norm_chain(x: np.ndarray, eps: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None,
                     axes: list[int], eps_first: bool = False, gamma_first: bool = False,
                     beta_first: bool = False) -> np.ndarray:
    """The unfused chain's bits (module docstring): each step one numpy float32 operation, in the chain's order."""
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"vkinfer:LayerNormChain: X must be float32, got {x.dtype}")
    eps = np.asarray(eps, F32)
    with np.errstate(all="ignore"):
        mean = reduce_ort("ReduceMean", x, axes)
        d = x - mean
        var = reduce_ort("ReduceMean", d * d, axes)
        std = np.sqrt(eps + var if eps_first else var + eps)
        y = d / std
        if gamma is not None:
            g = np.asarray(gamma, F32)
            y = g * y if gamma_first else y * g
        if beta is not None:
            b = np.asarray(beta, F32)
            y = b + y if beta_first else y + b
    return np.asarray(y, F32)


def _chain_kernel(node, x: list, memo: dict) -> list:
    """A vkinfer:LayerNormChain node (the interpreter's kernel)."""
    axes, ef, gf, bf = chain_parts(node)
    gamma = x[2] if len(x) > 2 else None
    beta = x[3] if len(x) > 3 else None
    return [layer_norm_chain(x[0], x[1], gamma, beta, axes, ef, gf, bf)]


DEFINITIONS = (OpDef("LayerNormalization", _kernel, "elementwise", (2, (0, 1))),
               OpDef(CHAIN, _chain_kernel, "elementwise", (2, (0, 1))))
