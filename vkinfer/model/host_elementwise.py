"""Elementwise host kernels of vkinfer's own (issue 25: ONNX's evaluator is an oracle in tests only): the unary math
and activation ops, the binary and variadic arithmetic, comparison, logic and bitwise ops a quantized model may
carry between its quantized ops or in its shape subgraphs.

Numerics (vkinfer/model/host_float.py's rule): one IEEE operation per element is ORT's bits, so Abs, Neg, Floor,
Ceil, Round (half to even, as nearbyint), Reciprocal, Sqrt, Sub, Div, Mod (fmod), Sign, the comparisons, the
logic and bitwise ops, Sum (left to right), ThresholdedRelu and Shrink are exact. Transcendentals: Exp is MLAS's
exp, Log, Sin, Cos, Asin, Acos and the exp / log1p inside Elu, Selu, Celu, Softplus and Mish are Eigen's SSE packet
functions with the C library's on the tail (vkinfer/model/host_eigen.py), Tan, Sinh, Cosh, Asinh, Acosh and Atanh
the C library's (ORT calls std:: per element): all bit-equal to ORT. Atan (Eigen's packet atan in ORT, numpy's
here) and Softsign (ORT 1.31 multiplies by Eigen's reciprocal estimate) are bounded, the bounds pinned in
tests/numerics/test_host_ops_elementwise.py. Integer Div truncates toward zero and Mod with fmod=0 takes the
divisor's sign, as ORT's C++ does; an integer division by zero is a ValueError (ORT's is undefined behaviour).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

from .attrs import _text
from .graph import Node
from .host_eigen import (
    eigen_acos,
    eigen_asin,
    eigen_elementwise,
    eigen_exp,
    eigen_log,
    eigen_log1p,
    eigen_sincos,
    mlas_exp,
)
from .op_table import OPS, REQUIRED_INPUTS

_INT = "iu"


def own_op(*names: str):
    """Register a kernel of these host modules under `names`, unless a kernel is already registered there (an op
    with a file of its own, vkinfer/reference/<op>.py, registered first by op_table, takes precedence)."""
    def register(fn):
        for n in names:
            OPS.setdefault(n, fn)
        return fn
    return register


_op = own_op


def _float(node: Node, v, what: str = "input") -> np.ndarray:
    v = np.asarray(v)
    if v.dtype.kind != "f":
        raise TypeError(f"{node.op} {what} must be a float tensor, got {v.dtype}")
    return v


def _numeric(node: Node, v) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype.kind not in "fiu":
        raise TypeError(f"{node.op} input must be numeric, got {v.dtype}")
    return v


def _attr_f(node: Node, key: str, default: float, dtype) -> np.floating:
    v = node.attrs.get(key, default)
    try:
        return np.dtype(dtype).type(float(v))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{node.op} attribute {key!r} must be a float, got {v!r}") from e


def _same(node: Node, x: list) -> list[np.ndarray]:
    vals = [np.asarray(v) for v in x]
    if len({v.dtype for v in vals}) != 1:
        raise TypeError(f"inputs of {node.op} must have one type, got {[str(v.dtype) for v in vals]}")
    return vals


def _unary(name: str, fn, kinds: str = "f") -> None:
    def kernel(node, x, memo):
        v = np.asarray(x[0])
        if v.dtype.kind not in kinds:
            raise TypeError(f"{node.op} input must be {'a float' if kinds == 'f' else 'a numeric'} tensor, got "
                            f"{v.dtype}")
        with np.errstate(all="ignore"):
            return [np.asarray(fn(v), v.dtype)]
    kernel.__name__ = f"_{name.lower()}"
    kernel.__doc__ = f"{name}: numpy's {getattr(fn, '__name__', name)} in the input's type (module docstring)."
    OPS.setdefault(name, kernel)
    REQUIRED_INPUTS.setdefault(name, (1, (0,)))


@functools.cache
def _cfun(name: str):
    """The C math library's float function `name` (expf, tanf, ...) through ctypes."""
    for lib in (ctypes.util.find_library("m"), "libm.so.6"):
        try:
            f = getattr(ctypes.CDLL(lib), name)
        except (OSError, AttributeError, TypeError):
            continue
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        return f
    raise OSError(f"no C math library with {name}")


def libm_unary(name: str):
    """numpy ufunc-like: the C library's float32 `name` element by element (about a microsecond each): for the ops
    ORT sends to std:: functions one element at a time (measured bit-equal: tan, sinh, cosh, asinh, acosh, atanh);
    float64 inputs take numpy's."""
    def fn(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v)
        if v.dtype != np.float32:
            return getattr(np, _NUMPY_NAMES[name])(v)
        with np.errstate(all="ignore"):
            out = np.frompyfunc(_cfun(name), 1, 1)(v.astype(np.float64))
        return np.asarray(out, np.float64).astype(np.float32).reshape(v.shape)
    fn.__name__ = name
    return fn


_NUMPY_NAMES = {"tanf": "tan", "sinhf": "sinh", "coshf": "cosh", "asinhf": "arcsinh", "acoshf": "arccosh",
                "atanhf": "arctanh", "expf": "exp", "logf": "log", "sinf": "sin", "cosf": "cos", "asinf": "arcsin",
                "acosf": "arccos", "log1pf": "log1p"}

def _f32_or_numpy(f32_fn, numpy_fn):
    """f32_fn (ORT's float32 bits) on float32, numpy_fn on other floats."""
    def fn(v: np.ndarray) -> np.ndarray:
        return f32_fn(v) if v.dtype == np.float32 else numpy_fn(v)
    fn.__name__ = f32_fn.__name__
    return fn


def _eigen(packet_fn, scalar_name: str, numpy_fn):
    """An Eigen packet function on float32 with the C library's scalar one on the tail (host_eigen's
    eigen_elementwise), numpy's on other floats."""
    return _f32_or_numpy(lambda v: eigen_elementwise(v, packet_fn, libm_unary(scalar_name)), numpy_fn)


for _name, _fn in (("Floor", np.floor), ("Ceil", np.ceil), ("Round", np.rint), ("Sqrt", np.sqrt),
                   ("Exp", _f32_or_numpy(mlas_exp, np.exp)), ("Log", _eigen(eigen_log, "logf", np.log)),
                   ("Sin", _eigen(lambda v: eigen_sincos(v, True), "sinf", np.sin)),
                   ("Cos", _eigen(lambda v: eigen_sincos(v, False), "cosf", np.cos)),
                   ("Tan", libm_unary("tanf")), ("Asin", _eigen(eigen_asin, "asinf", np.arcsin)),
                   ("Acos", _eigen(eigen_acos, "acosf", np.arccos)), ("Atan", np.arctan), ("Sinh", libm_unary("sinhf")),
                   ("Cosh", libm_unary("coshf")), ("Asinh", libm_unary("asinhf")), ("Acosh", libm_unary("acoshf")),
                   ("Atanh", libm_unary("atanhf"))):
    _unary(_name, _fn)
_unary("Reciprocal", lambda v: v.dtype.type(1) / v)
_unary("Abs", np.abs, "fiu")
_unary("Neg", np.negative, "fi")


@_op("Sign")
def _sign(node, x, memo):
    """1, -1 or 0 (any numeric type); float -0 gives +0 and NaN stays NaN (measured against ORT)."""
    v = _numeric(node, x[0])
    t = v.dtype.type
    out = np.where(v > 0, t(1), np.where(v < 0, t(-1) if v.dtype.kind != "u" else t(0), t(0))).astype(v.dtype)
    return [np.where(np.isnan(v), v, out) if v.dtype.kind == "f" else out]


@_op("Not")
def _not(node, x, memo):
    v = np.asarray(x[0])
    if v.dtype != np.bool_:
        raise TypeError(f"Not input must be bool, got {v.dtype}")
    return [np.asarray(np.logical_not(v))]


@_op("IsNaN")
def _isnan(node, x, memo):
    return [np.isnan(_float(node, x[0]))]


@_op("IsInf")
def _isinf(node, x, memo):
    """detect_positive / detect_negative (default 1 each)."""
    v = _float(node, x[0])
    pos, neg = int(node.attrs.get("detect_positive", 1)), int(node.attrs.get("detect_negative", 1))
    return [(np.isposinf(v) & bool(pos)) | (np.isneginf(v) & bool(neg))]


for _name in ("Sign", "Not", "IsNaN", "IsInf"):
    REQUIRED_INPUTS.setdefault(_name, (1, (0,)))


# --- activations ----------------------------------------------------------------------------------------------

def _act(name: str):
    def register(fn):
        def kernel(node, x, memo):
            v = _float(node, x[0])
            with np.errstate(all="ignore"):
                return [np.asarray(fn(node, v, v.dtype.type), v.dtype)]
        kernel.__name__ = f"_{name.lower()}"
        kernel.__doc__ = fn.__doc__
        OPS.setdefault(name, kernel)
        REQUIRED_INPUTS.setdefault(name, (1, (0,)))
        return fn
    return register


def softplus(v: np.ndarray) -> np.ndarray:
    """log(exp(x) + 1) as ORT's Softplus functor evaluates it: x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), each
    step rounded to the type, with Eigen's exp and log1p on float32 (vkinfer/model/host_eigen.py)."""
    def expr(w, exp, log1p):
        pos = w > 0
        lg = log1p(exp(np.where(pos, -w, w)))
        return np.where(pos, w + lg, lg)
    if v.dtype != np.float32:
        return expr(v, np.exp, np.log1p)
    return eigen_elementwise(v, lambda w: expr(w, eigen_exp, eigen_log1p),
                             lambda w: expr(w, libm_unary("expf"), libm_unary("log1pf")))


def _exp(v: np.ndarray) -> np.ndarray:
    """Eigen's exp on float32 (ORT's activation functors; the C library's expf on the tail), numpy's on other
    floats."""
    if v.dtype != np.float32:
        return np.exp(v)
    return eigen_elementwise(v, eigen_exp, libm_unary("expf"))  # the argument has the output's shape: same tail


@_act("Softplus")
def _softplus(node, v, t):
    """softplus (the function above)."""
    return softplus(v)


@_act("Softsign")
def _softsign(node, v, t):
    """x / (1 + |x|): two roundings, ORT's."""
    return v / (t(1) + np.abs(v))


@_act("Elu")
def _elu(node, v, t):
    """x >= 0 ? x : alpha * (exp(x) - 1), alpha default 1."""
    a = _attr_f(node, "alpha", 1.0, v.dtype)
    return np.where(v >= 0, v, a * (_exp(v) - t(1)))


@_act("Selu")
def _selu(node, v, t):
    """x > 0 ? gamma * x : (gamma * alpha) * (exp(x) - 1) (ORT's functor's order of operations)."""
    a = _attr_f(node, "alpha", 1.67326319217681884765625, v.dtype)
    g = _attr_f(node, "gamma", 1.05070102214813232421875, v.dtype)
    return np.where(v > 0, g * v, (g * a) * (_exp(v) - t(1)))


@_act("Celu")
def _celu(node, v, t):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), alpha default 1."""
    a = _attr_f(node, "alpha", 1.0, v.dtype)
    return np.maximum(t(0), v) + np.minimum(t(0), a * (_exp(v / a) - t(1)))


@_act("ThresholdedRelu")
def _thresholded_relu(node, v, t):
    """x > alpha ? x : 0, alpha default 1."""
    return np.where(v > _attr_f(node, "alpha", 1.0, v.dtype), v, t(0))


@_act("Gelu")
def _gelu(node, v, t):
    """ORT's Gelu-20 kernel: approximate "none": 0.5 * x * (erf(x * float(1/sqrt(2))) + 1) with MLAS's erf;
    "tanh": 0.5 * x * (tanh(x * (C * x * x + B)) + 1), B = sqrt(2/pi), C = 0.044715 * B as float32, with MLAS's
    tanh; every step rounded (float32 only)."""
    from .host_float import mlas_erf, mlas_tanh

    if v.dtype != np.float32:
        raise TypeError(f"Gelu input must be float32, got {v.dtype}")
    mode = _text(node.attrs.get("approximate"), "none")
    half, one = t(0.5), t(1)
    if mode == "none":
        return half * v * (one + mlas_erf(v * t(0.7071067811865476)))
    if mode == "tanh":
        b, c = t(0.7978845608028654), t(0.035677408136300125)
        return half * v * (mlas_tanh(v * (c * v * v + b)) + one)
    raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {mode!r}")


@_act("Mish")
def _mish(node, v, t):
    """x * tanh(softplus(x)) (MLAS's tanh on float32)."""
    from .host_float import mlas_tanh

    sp = softplus(v)
    return v * (mlas_tanh(sp) if v.dtype == np.float32 else np.tanh(sp))


@_act("Swish")
def _swish(node, v, t):
    """x * sigmoid(alpha * x) (MLAS's logistic on float32), alpha default 1."""
    from ..reference.qlinear_sigmoid import mlas_logistic

    a = _attr_f(node, "alpha", 1.0, v.dtype)
    if v.dtype != np.float32:
        raise TypeError(f"Swish input must be float32, got {v.dtype}")
    ax = a * v
    return v * np.where(np.isnan(ax), ax, mlas_logistic(ax))


@_op("Shrink")
def _shrink(node, x, memo):
    """x < -lambd ? x + bias : (x > lambd ? x - bias : 0), any numeric type (bias and lambd cast to it)."""
    v = _numeric(node, x[0])
    lam = float(node.attrs.get("lambd", 0.5))
    bias = float(node.attrs.get("bias", 0.0))
    t = v.dtype.type
    if v.dtype.kind == "f":
        lo, b = t(-lam), t(bias)
        with np.errstate(all="ignore"):
            return [np.where(v < lo, v + b, np.where(v > t(lam), v - b, t(0))).astype(v.dtype)]
    wide = v.astype(np.float64)
    out = np.where(wide < -lam, wide + bias, np.where(wide > lam, wide - bias, 0))
    return [out.astype(v.dtype)]


@_op("Dropout")
def _dropout(node, x, memo):
    """Inference: the input unchanged and, when asked for, the mask ORT writes: ones (bool) from opset 12, zeros
    before (ORT's Dropout-7/10 is its identity kernel, which clears the mask: bool from opset 10, the input's type
    before; measured); training_mode must be false."""
    tm = x[2] if len(x) > 2 and x[2] is not None else None
    if tm is not None and bool(np.asarray(tm).reshape(-1)[0]) or int(node.attrs.get("is_test", 1)) == 0 \
            and int(node.attrs.get("_opset") or 99) < 7:
        raise ValueError("Dropout in training mode is not supported (inference only)")
    v = np.asarray(x[0])
    outs = [v]
    if len(node.outputs) > 1 and node.outputs[1]:
        opset = int(node.attrs.get("_opset") or 99)
        outs.append((np.ones if opset >= 12 else np.zeros)(v.shape, np.bool_ if opset >= 10 else v.dtype))
    return outs


REQUIRED_INPUTS.setdefault("Shrink", (1, (0,)))
REQUIRED_INPUTS.setdefault("Dropout", (1, (0,)))


# --- binary and variadic ----------------------------------------------------------------------------------------

def _binary(name: str, fn, kinds: str = "fiub") -> None:
    def kernel(node, x, memo):
        a, b = _same(node, x[:2])
        if a.dtype.kind not in kinds:
            raise TypeError(f"{node.op} does not take {a.dtype} inputs")
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a, b))]  # an array for 0-d operands too (numpy's ufuncs give a scalar)
    kernel.__name__ = f"_{name.lower()}"
    kernel.__doc__ = f"{name}, broadcasting, exact (one operation per element)."
    OPS.setdefault(name, kernel)
    REQUIRED_INPUTS.setdefault(name, (2, (0, 1)))


def _sub(a, b):
    return np.asarray(np.subtract(a, b), a.dtype)


def _check_nonzero(b: np.ndarray, op: str) -> None:
    if b.dtype.kind in _INT and np.any(b == 0):
        raise ValueError(f"{op}: integer division by zero")


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C++'s `/`); the caller has checked b != 0."""
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, b)
        r = np.asarray(a - q * b)
        return np.asarray(q + ((r != 0) & ((a < 0) != (b < 0))), np.result_type(a, b))


def _div(a, b):
    if a.dtype.kind in _INT:
        _check_nonzero(b, "Div")
        return trunc_div(a, b)
    return np.asarray(np.divide(a, b), a.dtype)


_binary("Sub", _sub, "fiu")
_binary("Div", _div, "fiu")
for _name, _fn in (("Equal", np.equal), ("Greater", np.greater), ("GreaterOrEqual", np.greater_equal),
                   ("Less", np.less), ("LessOrEqual", np.less_equal)):
    _binary(_name, _fn)
for _name, _fn in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    _binary(_name, _fn, "b")
for _name, _fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
    _binary(_name, _fn, "iu")
_unary("BitwiseNot", np.invert, "iu")


@_op("Mod")
def _mod(node, x, memo):
    """fmod=1: C's fmod (the dividend's sign; floats need it; integers as doubles, as ORT); fmod=0 (integers):
    the divisor's sign."""
    a, b = _same(node, x[:2])
    fmod = int(node.attrs.get("fmod", 0))
    if a.dtype.kind == "f" and not fmod:
        raise ValueError("Mod on float tensors needs fmod=1 (ONNX Runtime refuses fmod=0 for floats)")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"Mod does not take {a.dtype} inputs")
    if a.dtype.kind in _INT:
        _check_nonzero(b, "Mod")
    with np.errstate(all="ignore"):
        if a.dtype.kind in _INT and fmod:  # ORT: std::fmod of the values as double, cast back (int64 rounds)
            return [np.fmod(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)]
        return [np.asarray(np.fmod(a, b) if fmod else np.mod(a, b), a.dtype)]


@_op("BitShift")
def _bitshift(node, x, memo):
    """Unsigned integers; direction LEFT or RIGHT. A shift by the type's width or more is refused (C++'s is
    undefined behaviour, so ORT's result depends on the machine)."""
    a, b = _same(node, x[:2])
    if a.dtype.kind != "u":
        raise TypeError(f"BitShift takes unsigned integers, got {a.dtype}")
    d = _text(node.attrs.get("direction"), "")
    if d not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {d!r}")
    if b.size and int(b.max()) >= 8 * a.dtype.itemsize:
        raise ValueError(f"BitShift by {int(b.max())} bits of a {a.dtype} tensor is undefined")
    return [np.asarray(np.left_shift(a, b) if d == "LEFT" else np.right_shift(a, b), a.dtype)]


REQUIRED_INPUTS.setdefault("Mod", (2, (0, 1)))
REQUIRED_INPUTS.setdefault("BitShift", (2, (0, 1)))


def _variadic(node: Node, x: list) -> list[np.ndarray]:
    if not x or any(v is None for v in x):
        raise ValueError(f"{node.op} needs at least one input, none empty")
    vals = _same(node, x)
    if vals[0].dtype.kind not in "fiu":
        raise TypeError(f"{node.op} does not take {vals[0].dtype} inputs")
    return vals


@_op("Sum")
def _sum(node, x, memo):
    """Left to right, ((x0 + x1) + x2) + ..., broadcasting: ORT's order."""
    vals = _variadic(node, x)
    acc = vals[0]
    with np.errstate(all="ignore"):
        for v in vals[1:]:
            acc = np.add(acc, v)
    return [np.asarray(np.broadcast_to(acc, np.broadcast_shapes(*(v.shape for v in vals))), vals[0].dtype).copy()]


@_op("Mean")
def _mean(node, x, memo):
    """The left-to-right sum (Sum) times 1 / count rounded to the type (ORT's order; measured: a divide differs)."""
    vals = _variadic(node, x)
    if vals[0].dtype.kind != "f":
        raise TypeError(f"Mean takes float tensors, got {vals[0].dtype}")
    (s,) = _sum(node, vals, memo)
    with np.errstate(all="ignore"):
        return [np.asarray(s * (s.dtype.type(1) / s.dtype.type(len(vals))), s.dtype)]


REQUIRED_INPUTS.setdefault("Sum", (1, (0,)))
REQUIRED_INPUTS.setdefault("Mean", (1, (0,)))
REQUIRED_INPUTS.setdefault("Where", (3, (0, 1, 2)))


def int_minmax(node: Node, x: list, memo: dict) -> list:
    """Max / Min of integer tensors (shape subgraphs): left to right, broadcasting, exact."""
    vals = _variadic(node, x)
    fn = np.maximum if node.op == "Max" else np.minimum
    acc = vals[0]
    for v in vals[1:]:
        acc = fn(acc, v)
    return [np.asarray(np.broadcast_to(acc, np.broadcast_shapes(*(v.shape for v in vals))), vals[0].dtype).copy()]
