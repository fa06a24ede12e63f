"""Float (and other non-8-bit) ops on the host: every default-domain ONNX op ORT's quantizer may leave between
the quantized ones, with ONNX Runtime 1.31's CPU numerics where they can be reproduced.

Every op here has a numpy kernel of vkinfer's own (issue 25): ONNX's evaluator never runs a model (it is an oracle
in the tests only), neither at run time nor when a session is created (shape trace, constant folding, the
256-entry tables of vkinfer/model/tables.py all call these kernels). Ops that are one correctly rounded operation
per element (Add, Sub, Mul, Div, Sqrt, Neg, Abs, Floor, Ceil, Round, Reciprocal, Max, Min, Where, Equal, Greater,
LeakyRelu, Relu, Clip, ...) and pure data movement (Concat, Split, Slice, Transpose, Gather, Resize nearest,
DepthToSpace, ...) give ORT's bits. The kernels live in small modules by family: vkinfer/model/host_elementwise.py
(unary math, activations, binary/variadic arithmetic, comparison, logic, bitwise), host_index.py (shape subgraph,
index and selection ops), host_norm.py (reductions and normalizations), host_detect.py (NonMaxSuppression,
Upsample, CenterCropPad), and this module (ORT's MLAS kernels below). An op none of them implements (Attention,
DFT/STFT, windows, losses, GridSample, RNN/GRU, Einsum, ...: REFUSED lists the ones ONNX defines) is not in OPS,
so the importer refuses the model naming the node and the op ("<node> (<op>): op not supported").

- **ORT's kernels reproduced** (exact, tests/numerics/test_host_float.py): Sigmoid (MLAS logistic, FMA3 kernel:
  vkinfer/reference/qlinear_sigmoid.py), Tanh (MLAS's rational tanh: clamp to [-9, 9], odd degree-13 over
  even degree-6 polynomial, every multiply-add fused as MlasTanhKernelFma3 does), Erf (MLAS's erf: a fused
  odd polynomial below |x| = 0.921875, 1 - exp(-poly) above with MLAS's own exp, sign copied back),
  HardSigmoid (unfused alpha * x + beta, then clamped: ORT's Eigen expression, not fused), HardSwish
  (x * HardSigmoid(x; 1/6, 1/2), unfused, ORT's kernel), Pow (the C library's powf, ORT's x * x / x * x * x
  where its broadcaster has a scalar exponent: vkinfer/reference/float_pow.py, tests/ops/test_float_pow.py).

Where bits can differ from ORT (pinned in tests/numerics/test_host_float.py):
- Atan (Eigen's packet atan in ORT, numpy's here: 3 ulps), Softsign (ORT 1.31 multiplies by Eigen's reciprocal
  estimate: 1 ulp), LRN's pow (Eigen's vectorised pow, powf here: 2 ulps): tests/numerics/test_host_ops_*.py.
  Exp (MLAS), Log/Sin/Cos/Asin/Acos and the exp/log1p of Elu/Selu/Celu/Softplus/Mish (Eigen's SSE packets, the
  C library's on the len % 4 tail of ORT's single-threaded functor), Tan/Sinh/Cosh/Asinh/Acosh/Atanh (the C
  library's) are ORT's bits (vkinfer/model/host_eigen.py).
- Softmax / LogSoftmax: ORT's MLAS kernels follow the CPU (16 lanes on AVX-512F, 8 on FMA3-only CPUs); vkinfer
  gives the AVX-512F bits everywhere (reference/float_softmax.py: exact there, bound pinned in
  tests/ops/test_float_softmax.py).
- LayerNormalization: ORT's row kernel follows the CPU (MLAS's AVX2 kernel from 8 elements, a Welford loop without
  AVX2); vkinfer gives the AVX2 bits everywhere (bound pinned in tests/ops/test_layer_normalization.py).
- MatMul / Gemm / Conv between float tensors: MLAS SGEMM's order is reproduced (vkinfer/reference/float_matmul.py)
  except ORT's transposed-B dot-product kernel (N = 1, M = 1 with transB; Conv with one output position): at most
  8 ulps of the largest |partial sum|; ORT_ENABLE_ALL's NCHWc Conv: 16 (tests/ops/test_float_matmul.py, _conv.py).
- Resize nearest, half_pixel_symmetric: ORT's pick at coordinates within ulps of a rounding edge (test_float_resize.py).

Float32 ops with kernels of their own (vkinfer/reference/float_*.py, registered at the end of this module;
ONNX's evaluator is only an oracle for them): MaxPool (ORT's four loops), Max/Min (+0/-0 by ORT's broadcast spans),
PRelu, LeakyRelu, Clip (ORT's select order), BatchNormalization (ORT's float32 fold), ReduceSum/Mean/Max/Min (ORT's
loop orders, Eigen's per-row and rowwise reductions and MLAS's M = 1 SGEMM where ORT hands the shape to them: exact).

ORT's graph optimizer at ORT_ENABLE_ALL fuses float patterns of a *float* model (the Erf GELU chain into
com.microsoft Gelu, ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add into LayerNormalization, x * Sigmoid(x)
into QuickGelu), but in the QDQ models onnxruntime.quantization writes, Q/DQ pairs sit inside each of those
chains and none fuses (tests/numerics/test_host_float.py::test_ort_fusions_of_float_patterns): the float pieces left
between the pairs (Div and Erf; ReduceMean, Sub, Pow, ReduceMean; Sqrt and Div) run in ORT as written, so
they are exact here wherever the single ops are. A float model fed to vkinfer is refused anyway (8-bit only).
"""

from __future__ import annotations

import numpy as np

from ..reference import float_activations, float_batch_norm, float_max_pool, float_minmax, float_reduce
from ..reference._float32 import fma32, horner32
from ..reference.float_batch_norm import batch_norm_fold  # noqa: F401  (vkinfer/cpu/batch_normalization.py's)
from ..reference.qlinear_sigmoid import mlas_logistic
from .graph import Node
from .op_table import OPS, REQUIRED_INPUTS, _op

_F32 = np.dtype(np.float32)

# The default-domain ONNX ops vkinfer refuses by name (no kernel of its own: none is in OPS, so the importer
# lists each such node as "<node> (<op>): op not supported"). Kept to document the choice and checked by
# tests/numerics/test_host_ops_coverage.py against the ops ONNX's evaluator implements: attention and sequence
# models' ops, signal processing, training losses, sampling, control flow, sequences and optionals, strings, and
# random ops (ORT's generator differs, so no output could match).
REFUSED = frozenset({
    "Attention", "AffineGrid", "AttributeHasValue", "BitCast", "BlackmanWindow", "CausalConvWithState", "Col2Im",
    "CumProd", "DFT", "DeformConv", "Det", "Einsum", "GRU", "GridSample", "HammingWindow", "HannWindow",
    "LinearAttention", "LpPool", "MaxUnpool", "MelWeightMatrix", "NegativeLogLikelihoodLoss", "RMSNormalization",
    "RNN", "RoiAlign", "RotaryEmbedding", "STFT", "SoftmaxCrossEntropyLoss", "SwiGLU", "TensorScatter", "Unique",
    "If", "Loop", "Scan", "SequenceMap", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
    "SequenceInsert", "SequenceLength", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
    "OptionalHasElement", "StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer",
    "ImageDecoder", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
    "Multinomial", "GlobalLpPool",
})


def _float32(node: Node, v, what: str = "input") -> np.ndarray:
    v = np.asarray(v)
    if v.dtype != _F32:
        raise TypeError(f"{node.op} {what} must be float32 (vkinfer runs ORT's float32 kernels), got {v.dtype}")
    return v


def _attr_float(node: Node, key: str, default: float) -> np.float32:
    v = node.attrs.get(key, default)
    try:
        return np.float32(float(v))
    except (TypeError, ValueError) as e:
        raise ValueError(f"attribute {key!r} must be a float, got {v!r}") from e


# MLAS's tanh (tanh.cpp's constants, Eigen's rational approximation): the clamp bounds, the odd numerator's
# coefficients alpha_13 .. alpha_1 and the even denominator's beta_6 .. beta_0.
_TANH_RANGE = np.float32(9.0)
_TANH_P = [np.float32(v) for v in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                   5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                   4.89352455891786e-03)]
_TANH_Q = [np.float32(v) for v in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                                   4.89352518554385e-03)]


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """ONNX Runtime's float32 Tanh (MLAS, FMA3 kernel): v = clamp(x, -9, 9), p = v * P(v^2), q = Q(v^2) by
    fused multiply-adds (Horner), p / q. NaN stays NaN."""
    x = np.asarray(x, np.float32)
    v = np.minimum(np.maximum(x, -_TANH_RANGE), _TANH_RANGE)
    v2 = v * v
    p = horner32(v2, _TANH_P) * v
    q = horner32(v2, _TANH_Q)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), x, p / q).astype(np.float32)


# MLAS's erf (erf.cpp's constants): below the split |x| < 0.921875 an odd polynomial in |x|; above,
# 1 - exp(-r(|x|)) with MLAS's own exp (range reduction by ln 2 in two parts). |x| is clamped to 3.925: ORT 1.31
# gives 1.0 from there on (measured; older MLAS clamped at 3.725, which gives 0.9999999 up to 3.9).
_ERF_UPPER, _ERF_SPLIT = np.float32(3.925), np.float32(0.921875)
_ERF_SMALL = [np.float32(v) for v in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1,
                                      -3.76124859e-1, 1.28379151e-1)]
_ERF_BIG = [np.float32(v) for v in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2,
                                    1.06777847e-1, 6.34846687e-1, 1.28717512e-1)]
_EXP_LOWER = np.float32(-88.3762626647949)
_EXP_LOG2E = np.float32(1.44269504088896341)
_EXP_LN2_HI, _EXP_LN2_LO = np.float32(-6.93145752e-1), np.float32(-1.42860677e-6)
_EXP_P = [np.float32(v) for v in (1.38319808e-3, 8.37550033e-3, 4.16689515e-2, 1.66664466e-1, 4.99999851e-1,
                                  1.0, 1.0)]
_EXP_C = np.float32(1.25829120e7)


def mlas_erf(x: np.ndarray) -> np.ndarray:
    """ONNX Runtime's float32 Erf (MLAS, FMA3 kernel), every multiply-add fused; sign copied from x."""
    x = np.asarray(x, np.float32)
    a = np.minimum(np.abs(x), _ERF_UPPER)
    s = a * a
    small = fma32(horner32(s, _ERF_SMALL), a, a)
    big_lane = a >= _ERF_SPLIT
    ab = np.where(big_lane, a, np.float32(0))
    r = fma32(horner32(ab, _ERF_BIG), ab, ab)
    e = np.maximum(-r, _EXP_LOWER)
    n = fma32(_EXP_LOG2E, e, _EXP_C) - _EXP_C  # round(e / ln 2) by the 1.5 * 2^23 trick
    f = fma32(n, _EXP_LN2_HI, e)
    f = fma32(n, _EXP_LN2_LO, f)
    y = horner32(f, _EXP_P)
    scale = ((n.astype(np.int32) + 127) << 23).astype(np.int32).view(np.float32)
    y = np.float32(1) - y * scale
    out = np.where(big_lane, y, small)
    out = np.where(np.signbit(x), -out, out).astype(np.float32)
    return np.where(np.isnan(x), x, out)


@_op("Sigmoid")
def _sigmoid(node, x, memo):
    """ORT's MLAS logistic (vkinfer/reference/qlinear_sigmoid.py), float32."""
    v = _float32(node, x[0])
    with np.errstate(invalid="ignore"):
        return [np.where(np.isnan(v), v, mlas_logistic(v)).astype(np.float32)]


@_op("Tanh")
def _tanh(node, x, memo):
    """ORT's MLAS tanh (mlas_tanh), float32."""
    return [mlas_tanh(_float32(node, x[0]))]


@_op("Erf")
def _erf(node, x, memo):
    """ORT's MLAS erf (mlas_erf), float32."""
    return [mlas_erf(_float32(node, x[0]))]


def _hard_sigmoid(v: np.ndarray, alpha: np.float32, beta: np.float32) -> np.ndarray:
    # ORT: Eigen's (x * alpha + beta).cwiseMin(1).cwiseMax(0), multiply and add rounded separately.
    return np.maximum(np.minimum(v * alpha + beta, np.float32(1)), np.float32(0))


@_op("HardSigmoid")
def _hardsigmoid(node, x, memo):
    """max(0, min(1, alpha * x + beta)), float32, as ORT rounds it (unfused)."""
    v = _float32(node, x[0])
    return [_hard_sigmoid(v, _attr_float(node, "alpha", 0.2), _attr_float(node, "beta", 0.5)).astype(np.float32)]


@_op("HardSwish")
def _hardswish(node, x, memo):
    """x * HardSigmoid(x; alpha 1/6, beta 0.5), float32, as ORT rounds it (unfused)."""
    v = _float32(node, x[0])
    return [(v * _hard_sigmoid(v, np.float32(1 / 6), np.float32(0.5))).astype(np.float32)]


for _name in ("Sigmoid", "Tanh", "Erf", "HardSigmoid", "HardSwish"):
    REQUIRED_INPUTS.setdefault(_name, (1, (0,)))


# Pow (every type pair ORT takes) and float32 Softmax/LogSoftmax: kernels of their own with ORT's bits
# (vkinfer/reference/float_pow.py, float_softmax.py; the native graph runs the float32 ones, ops/float_binary.c and
# ops/float_softmax.c). They replace op_table's numpy Softmax and ONNX's evaluator's LogSoftmax.
from ..reference import float_pow, float_softmax  # noqa: E402

OPS["Pow"] = float_pow.kernel
for _name in float_softmax.OPS:
    OPS[_name] = float_softmax.kernel
    REQUIRED_INPUTS.setdefault(_name, (1, (0,)))
REQUIRED_INPUTS.setdefault("Pow", (2, (0, 1)))
REQUIRED_INPUTS.setdefault("BatchNormalization", (5, (0, 1, 2, 3, 4)))


@_op("Relu")
def _relu(node, x, memo):
    """max(x, 0) as ORT computes it: -0 and NaN pass through unchanged (x < 0 ? 0 : x), any numeric type."""
    v = np.asarray(x[0])
    return [np.where(v < 0, v.dtype.type(0), v)]


def _float_first(fallback, float_kernel):
    """A kernel running `float_kernel` (ORT's float32 bits, vkinfer/reference/float_*.py) on float32 data and
    `fallback` (8-bit MaxPool, integer Clip, Max/Min and reductions) otherwise."""
    def kernel(node, x, memo):
        v = x[0] if x else None
        if v is not None and np.asarray(v).dtype == _F32:
            return float_kernel(node, x, memo)
        return fallback(node, x, memo)
    kernel.__doc__ = float_kernel.__doc__
    return kernel


def _float32_only(node, x, memo):
    """PRelu / LeakyRelu on other than float32: ORT has float kernels only."""
    raise TypeError(f"{node.op} input must be float32 (vkinfer runs ORT's float32 kernels), got "
                    f"{np.asarray(x[0]).dtype}")


# Kernels of vkinfer's own for the ops below (module docstring); imported here because they use `_op` and `OPS`
# and host_float's MLAS functions.
from . import host_detect, host_elementwise, host_index, host_norm  # noqa: E402,F401

# ORT-exact float32 kernels of their own (ONNX's evaluator is an oracle only for these, issue 25): MaxPool, Max/Min,
# PRelu/LeakyRelu/Clip, BatchNormalization, ReduceSum/Mean/Max/Min; other dtypes take the integer kernels.
# (A kernel registered before, e.g. an op's own vkinfer/reference/<op>.py, stays the other types' kernel.)
_OTHER_TYPES = {"Max": host_elementwise.int_minmax, "Min": host_elementwise.int_minmax, "PRelu": _float32_only,
                "LeakyRelu": _float32_only, **dict.fromkeys(float_reduce.OPS, host_norm.int_reduce)}
for _name, _kernel in (("MaxPool", float_max_pool.kernel), ("Max", float_minmax.kernel), ("Min", float_minmax.kernel),
                       ("PRelu", float_activations.prelu_kernel), ("LeakyRelu", float_activations.leaky_relu_kernel),
                       ("Clip", float_activations.clip_kernel),
                       *((op, float_reduce.kernel) for op in float_reduce.OPS)):
    OPS[_name] = _float_first(OPS.get(_name) or _OTHER_TYPES[_name], _kernel)
OPS["BatchNormalization"] = float_batch_norm.kernel  # float32 only (a TypeError naming the input otherwise)

# float32 MatMul / Gemm / Conv in MLAS SGEMM's order (vkinfer/reference/float_matmul.py, float_conv.py), with shape
# rules for the trace (a float convolution in numpy is slow).
from ..reference import float_conv, float_matmul  # noqa: E402
from .op_table import SHAPES  # noqa: E402

OPS["MatMul"], OPS["Gemm"], OPS["Conv"] = float_matmul.matmul_kernel, float_matmul.gemm_kernel, float_conv.kernel
SHAPES["MatMul"], SHAPES["Gemm"], SHAPES["Conv"] = float_matmul.matmul_shape, float_matmul.gemm_shape, float_conv.shape
for _name in float_softmax.OPS:  # ORT's float32 exp in numpy is slow (reference/float_softmax.py)
    SHAPES[_name] = float_softmax.shape
