"""ONNX LSTM (float32), with ONNX Runtime 1.31's CPU bits on x86-64 (DeepCpuLstmOp, uni_directional_lstm.cc).

What ORT computes for one direction, with W and R constant (ORT prepacks them for MLAS's packed SGEMM):
- G = X W^T for every (time, batch) row at once, then per step G += H_prev R^T. Both GEMMs are MLAS SGEMM with
  a packed B, whose K loop runs in blocks of 256 (MLAS_SGEMM_PACKED_STRIDEK): per output, a chain of fused
  multiply-adds from +0 over k in order within a block (the AVX-512F/FMA3 kernels), each block's sum then added
  to C with one rounding (the first block of X W^T is stored as is: beta = 0). `packed_gemm` below.
- the gates in ORT's buffer order i, o, f, c; per gate, the peephole product P (.) C added (unfused), then
  `clip_add_bias`: x = g + (Wb + Rb) (the two biases summed first, in float32), x = x < clip ? x : clip,
  x = -clip < x ? x : -clip (the default clip is FLT_MAX, so an infinity or NaN with a bias becomes +-FLT_MAX);
  with no B, g > clip -> clip, g < -clip -> -clip, else g.
- i = sigmoid, f = sigmoid (1 - i with input_forget), c = tanh: MLAS's logistic and tanh (FMA3 polynomials);
  C = C_prev * f + i * c (two products, one add, unfused); o uses the new C in its peephole; H = tanh(C) * o.
- sequence_lens: a batch row past its length is not updated and its Y rows are 0; the reverse direction runs
  each row's own sequence backwards (ReverseSequence). Y_h and Y_c are the last step's H and C (0 for length 0).
Only the default activations (Sigmoid, Tanh, Tanh) and layout 0 are defined here: anything else is a ValueError
naming the node. cpu_fallback/src/ops/lstm.c computes the same operations in the same order.

vkinfer:LSTMState (`PACKED`) is an LSTM whose Y_h or Y_c is read, as vkinfer/model/lstm_outputs.py rewrites it for
the devices (whose layers write one tensor): the LSTM's inputs and attributes, one output (seq + 2, dirs, batch,
hidden) = Y, Y_h, Y_c one after the other, the layout ops/lstm.c writes with its STATE flag.
"""

from __future__ import annotations

import numpy as np

from ._float32 import fma32, horner32
from ._opdef import OpDef
from .qlinear_sigmoid import mlas_logistic

F32 = np.float32
STRIDE_K = 256  # MLAS_SGEMM_PACKED_STRIDEK
FLT_MAX = np.finfo(F32).max
_DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}

# MLAS's tanh (the same constants as vkinfer/model/host_float.py's mlas_tanh, which this layer cannot import).
_TANH_P = [F32(v) for v in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                            5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)]
_TANH_Q = [F32(v) for v in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                            4.89352518554385e-03)]


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """MLAS's float32 tanh: clamp to [-9, 9], v * P(v^2) / Q(v^2) by fused Horner steps; NaN stays NaN."""
    x = np.asarray(x, F32)
    v = np.minimum(np.maximum(x, F32(-9)), F32(9))
    v2 = v * v
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), x, horner32(v2, _TANH_P) * v / horner32(v2, _TANH_Q)).astype(F32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """MLAS's logistic (reference/qlinear_sigmoid.py), NaN kept."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), x, mlas_logistic(x)).astype(F32)


_LOW29, _HALF29 = np.uint64((1 << 29) - 1), np.uint64(1 << 28)  # float64 bits below float32's last place
_TINY = 2.0 ** -126  # float32's smallest normal


def _fma_step(a64: np.ndarray, b64: np.ndarray, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fma32(a, b, acc) (a (rows, 1), b (1, cols), acc float32; a64, b64 their float64 copies), cheaper: a * b is
    exact in float64 and s = a * b + acc rounds once there, so s's float32 rounding is the fused result unless s
    is a float32 midpoint (its 29 low bits 1000...0) or a nonzero below float32's normals (where float32's last
    place is coarser); those rare rows go through fma32. 4x faster than fma32 on the CRNN LSTM's 2048 columns."""
    s = a64 * b64 + acc
    low = s.view(np.uint64) & _LOW29
    odd = low == _HALF29
    zero = low == 0
    if zero.any():
        odd |= zero & (np.abs(s) < _TINY) & (s != 0)
    if odd.any():
        return fma32(a, b, acc)
    return s.astype(F32)


def packed_gemm(a: np.ndarray, wt: np.ndarray, c: np.ndarray | None = None,
                wt64: np.ndarray | None = None) -> np.ndarray:
    """C (+)= a @ wt as MLAS's packed SGEMM orders it: per block of 256 k, an FMA chain from +0; each block added
    to C (C absent: the first block is C). wt64: wt as float64, when the caller keeps it across calls."""
    a, wt = np.asarray(a, F32), np.asarray(wt, F32)
    a64 = a.astype(np.float64)
    wt64 = wt.astype(np.float64) if wt64 is None else wt64
    out = None if c is None else np.asarray(c, F32)
    k_total = a.shape[1]
    with np.errstate(all="ignore"):
        for k0 in range(0, k_total, STRIDE_K):
            acc = np.zeros((a.shape[0], wt.shape[1]), F32)
            for k in range(k0, min(k_total, k0 + STRIDE_K)):
                acc = _fma_step(a64[:, k:k + 1], wt64[k:k + 1, :], acc, a[:, k:k + 1], wt[k:k + 1, :])
            out = acc if out is None else out + acc
    return np.zeros((a.shape[0], wt.shape[1]), F32) if out is None else out


def _clip_bias(g: np.ndarray, b: np.ndarray | None, clip: np.float32) -> np.ndarray:
    """ORT's clip_add_bias (std::min then std::max: NaN -> clip) or clip_ignore_bias (NaN kept)."""
    with np.errstate(all="ignore"):
        if b is not None:
            x = g + b
            x = np.where(x < clip, x, clip)
            return np.where(-clip < x, x, -clip).astype(F32)
        return np.where(g > clip, clip, np.where(g < -clip, -clip, g)).astype(F32)


def _attr_str(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def lstm_config(node) -> dict:
    """The node's attributes, checked: direction, hidden_size, clip, input_forget; ValueError for what ORT's
    default path does not compute here (other activations, layout 1)."""
    a = node.attrs
    direction = _attr_str(a.get("direction"), "forward")
    if direction not in _DIRS:
        raise ValueError(f"{node.name} (LSTM): direction {direction!r} is not forward, reverse or bidirectional")
    acts = [_attr_str(s, "").lower() for s in (a.get("activations") or ())]
    if acts and acts != ["sigmoid", "tanh", "tanh"] * _DIRS[direction]:
        raise ValueError(f"{node.name} (LSTM): activations {acts} (only the default Sigmoid, Tanh, Tanh are defined)")
    if int(a.get("layout", 0) or 0) != 0:
        raise ValueError(f"{node.name} (LSTM): layout 1 (batch first) is not supported")
    if "hidden_size" not in a:
        raise ValueError(f"{node.name} (LSTM): missing attribute 'hidden_size'")
    clip = a.get("clip")
    clip = FLT_MAX if clip is None else F32(float(clip))
    if not clip > 0:
        raise ValueError(f"{node.name} (LSTM): clip must be positive, got {clip}")
    return {"direction": direction, "dirs": _DIRS[direction], "hidden": int(a["hidden_size"]), "clip": clip,
            "input_forget": bool(int(a.get("input_forget", 0) or 0))}


def check_inputs(node, x: list, cfg: dict) -> tuple[int, int, int]:
    """(seq_length, batch, input_size) after checking every input's dtype and shape (ValueError naming it)."""
    nd, h = cfg["dirs"], cfg["hidden"]
    name = f"{node.name} (LSTM)"
    xv = x[0]
    if xv is None or np.asarray(xv).dtype != F32 or np.ndim(xv) != 3:
        raise ValueError(f"{name}: X must be a float32 tensor of rank 3")
    s, b, i = np.shape(xv)
    want = {1: (nd, 4 * h, i), 2: (nd, 4 * h, h), 3: (nd, 8 * h), 4: (b,), 5: (nd, b, h), 6: (nd, b, h),
            7: (nd, 3 * h)}
    names = {1: "W", 2: "R", 3: "B", 4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}
    for k, shape in want.items():
        v = x[k] if k < len(x) else None
        if v is None:
            if k in (1, 2):
                raise ValueError(f"{name}: input {names[k]} is required")
            continue
        dt = np.int32 if k == 4 else F32
        if np.asarray(v).dtype != dt or np.shape(v) != shape:
            raise ValueError(f"{name}: {names[k]} must be {np.dtype(dt)} of shape {shape}, got "
                             f"{np.asarray(v).dtype} {np.shape(v)}")
    if len(x) > 4 and x[4] is not None and (np.any(x[4] < 0) or np.any(x[4] > s)):
        raise ValueError(f"{name}: sequence_lens values must lie in [0, {s}], got {np.asarray(x[4]).tolist()}")
    return s, b, i


def lstm(node, x: list) -> list[np.ndarray]:
    """[Y (seq, dirs, batch, hidden), Y_h (dirs, batch, hidden), Y_c] as ORT computes them (module docstring)."""
    cfg = lstm_config(node)
    s, b, _ = check_inputs(node, x, cfg)
    nd, h, clip = cfg["dirs"], cfg["hidden"], cfg["clip"]
    opt = [x[k] if k < len(x) else None for k in range(8)]
    lens = np.full(b, s, np.int64) if opt[4] is None else np.asarray(opt[4], np.int64)
    y = np.zeros((s, nd, b, h), F32)
    y_h = np.zeros((nd, b, h), F32)
    y_c = np.zeros((nd, b, h), F32)
    xv = np.asarray(x[0], F32)
    max_len = int(lens.max()) if b else 0
    rows = np.arange(b)
    for d in range(nd):
        reverse = cfg["direction"] == "reverse" or d == 1
        gx = packed_gemm(xv[:max_len].reshape(max_len * b, -1), np.asarray(opt[1][d], F32).T)
        gx = gx.reshape(max_len, b, 4 * h)
        rt = np.asarray(opt[2][d], F32).T
        rt64 = rt.astype(np.float64)
        bias = None
        if opt[3] is not None:
            wb, rb = np.asarray(opt[3][d][:4 * h], F32), np.asarray(opt[3][d][4 * h:], F32)
            bias = (wb + rb).reshape(4, h)
        p = None if opt[7] is None else np.asarray(opt[7][d], F32).reshape(3, h)  # i, o, f
        hp = np.zeros((b, h), F32) if opt[5] is None else np.asarray(opt[5][d], F32).copy()
        cp = np.zeros((b, h), F32) if opt[6] is None else np.asarray(opt[6][d], F32).copy()
        for step in range(max_len):
            live = lens > step
            t = np.where(reverse, lens - 1 - step, step).clip(0, s - 1)
            with np.errstate(all="ignore"):
                g = packed_gemm(hp, rt, gx[t, rows], rt64)
                gi, go, gf, gc = (g[:, k * h:(k + 1) * h] for k in range(4))
                bi, bo, bf, bc = (None,) * 4 if bias is None else tuple(bias)
                if p is not None:
                    gi = gi + cp * p[0]
                i = sigmoid(_clip_bias(gi, bi, clip))
                if cfg["input_forget"]:
                    f = F32(1) - i
                else:
                    if p is not None:
                        gf = gf + cp * p[2]
                    f = sigmoid(_clip_bias(gf, bf, clip))
                c = mlas_tanh(_clip_bias(gc, bc, clip))
                cn = (cp * f + i * c).astype(F32)
                if p is not None:
                    go = go + cn * p[1]
                o = sigmoid(_clip_bias(go, bo, clip))
                hn = (mlas_tanh(cn) * o).astype(F32)
            cp = np.where(live[:, None], cn, cp)
            hp = np.where(live[:, None], hn, F32(0))  # ORT reads the zeroed output row of a finished sequence
            y[t[live], d, rows[live]] = hn[live]
            last = lens == step + 1
            y_h[d, last], y_c[d, last] = hn[last], cn[last]
    return [y, y_h, y_c]


def _kernel(node, x, memo):
    out = lstm(node, x)
    return out[:max(1, len(node.outputs))]


def _shape(node, x):
    """The outputs' shapes after the kernel's checks, without running it: the trace of ddddocr_ocr's LSTM
    (bidirectional, hidden 512, 32 steps) took 3.3 s of its 4.1 s session creation."""
    cfg = lstm_config(node)
    s, b, _ = check_inputs(node, x, cfg)
    nd, h = cfg["dirs"], cfg["hidden"]
    shapes = [(s, nd, b, h), (nd, b, h), (nd, b, h)]
    return [(shape, F32) for shape in shapes[:max(1, len(node.outputs))]]


PACKED = "vkinfer:LSTMState"


def _packed_kernel(node, x, memo):
    y, y_h, y_c = lstm(node, x)
    return [np.concatenate([y, y_h[None], y_c[None]])]


def _packed_shape(node, x):
    """(seq + 2, dirs, batch, hidden), without running the kernel (see `_shape`)."""
    cfg = lstm_config(node)
    s, b, _ = check_inputs(node, x, cfg)
    return [((s + 2, cfg["dirs"], b, cfg["hidden"]), F32)]


DEFINITIONS = (OpDef("LSTM", _kernel, "elementwise", (3, (0, 1, 2)), shape=_shape),
               OpDef(PACKED, _packed_kernel, "elementwise", (3, (0, 1, 2)), shape=_packed_shape))
