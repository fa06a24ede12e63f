"""float32 ONNX LSTM in the native CPU graph (cpu_fallback/src/ops/lstm.c), with ONNX Runtime 1.31's bits: MLAS's
packed SGEMM order (FMA chains in K blocks of 256), ORT's gate order, bias and clip, MLAS's logistic and tanh
(vkinfer/reference/lstm.py is the definition). X is the activation; Y (seq, dirs, batch, hidden) the output.

An LSTM whose Y_h or Y_c is read is rewritten before lowering (vkinfer/model/lstm_outputs.py) into vkinfer:LSTMState,
whose one output is Y, Y_h, Y_c one after the other: the same operator with its STATE flag, then Slices.

The host keeps (with the reason): W, R, B, P, sequence_lens, initial_h or initial_c that are not constants (the
operator copies them once, W and R transposed and packed in its panels), Y_h or Y_c read by another node or the graph
where the rewrite did not run (a layer writes one tensor), Y absent, and what the definition refuses (other
activations, layout 1)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower
from ..reference.lstm import PACKED, check_inputs, lstm_config

_F32 = np.dtype(np.float32)
REVERSE, INPUT_FORGET, BIAS, PEEP, H0, C0 = 1, 2, 4, 8, 16, 32
STATE = 64  # y is followed by Y_h and Y_c (vkinfer:LSTMState)
_COLS, _UNITS = 64, 16  # ops/lstm.c's L_COLS and L_UNITS: the packed weights' panel widths


def _read(ctx, name: str) -> bool:
    """Whether another node or the graph's outputs read tensor `name`."""
    return any(name in n.inputs for n in ctx.g.nodes) or any(o.name == name for o in ctx.g.outputs)


def pack_w(w: np.ndarray) -> np.ndarray:
    """W (4H, I) as ops/lstm.c reads it: W^T in panels of 64 output columns, (panel, k, 64), zero-padded."""
    n, k = w.shape
    panels = -(-n // _COLS)
    wt = np.zeros((k, panels * _COLS), _F32)
    wt[:, :n] = w.T
    return np.ascontiguousarray(wt.reshape(k, panels, _COLS).transpose(1, 0, 2)).ravel()


def pack_r(r: np.ndarray) -> np.ndarray:
    """R (4H, H) as ops/lstm.c reads it: per block of 16 hidden units, (block, k, gate, 16), zero-padded."""
    h = r.shape[1]
    blocks = -(-h // _UNITS)
    rt = np.zeros((h, 4, blocks * _UNITS), _F32)
    rt[:, :, :h] = r.T.reshape(h, 4, h)
    return np.ascontiguousarray(rt.reshape(h, 4, blocks, _UNITS).transpose(2, 0, 1, 3)).ravel()


def native_weights(cfg: dict, w, r, b, h0, c0, p) -> tuple[int, np.ndarray]:
    """(flags, weights) of the native operator for lstm_config `cfg` and the constant inputs (None where absent):
    per direction W^T and R^T packed, then Wb + Rb (ORT's LoadBias sums them in float32), P, h0, c0."""
    h = cfg["hidden"]
    parts = []
    for d in range(cfg["dirs"]):
        parts += [pack_w(np.asarray(w[d], _F32)), pack_r(np.asarray(r[d], _F32))]
        if b is not None:
            parts.append(np.asarray(b[d][:4 * h], _F32) + np.asarray(b[d][4 * h:], _F32))
        parts += [np.asarray(v[d], _F32).ravel() for v in (p, h0, c0) if v is not None]
    flags = (REVERSE if cfg["direction"] == "reverse" else 0) | (INPUT_FORGET if cfg["input_forget"] else 0) | \
        (BIAS if b is not None else 0) | (PEEP if p is not None else 0) | (H0 if h0 is not None else 0) | \
        (C0 if c0 is not None else 0)
    return flags, np.ascontiguousarray(np.concatenate(parts).astype(_F32))


@lower("cpu", "LSTM", PACKED)
def lower_lstm(ctx, node, backend):
    """An LSTM node as one native `lstm` operator, vkinfer:LSTMState with the STATE flag (module docstring)."""
    state = node.op == PACKED
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    x = ins[0]
    y = node.outputs[0] if node.outputs else ""
    if not x or not y or np.dtype(ctx.dtype(x)) != _F32 or np.dtype(ctx.dtype(y)) != _F32:
        return None
    if not state and any(o and _read(ctx, o) for o in node.outputs[1:]):
        raise ValueError("LSTM whose Y_h or Y_c is read: the native layer writes Y only (the host runs it)")
    if not all(ctx.const(t) for t in ins[1:]):
        raise ValueError("LSTM with non-constant W, R, B, sequence_lens, initial_h, initial_c or P (the host runs it)")
    cfg = lstm_config(node)
    vals = [np.zeros(ctx.shape(x), _F32)] + [ctx.g.consts[t] if t else None for t in ins[1:]]
    seq, batch, inp = check_inputs(node, vals, cfg)
    nd, h = cfg["dirs"], cfg["hidden"]
    if seq * batch * inp * h == 0:
        return None
    flags, weights = native_weights(cfg, *vals[1:4], *vals[5:8])
    flags |= STATE if state else 0
    lens = vals[4]
    lens_u = np.ascontiguousarray(np.full(batch, seq, np.uint32) if lens is None else np.asarray(lens, np.uint32))
    scratch = 4 * nd * (seq * batch * 4 * h + 3 * batch * h)
    clip = float(cfg["clip"])

    def emit(g, refs, out, scr):
        g.add("lstm", seq, batch, inp, h, nd, flags, clip, weights, lens_u, refs[0], scr, out)
    return Layer(node, [x], y, emit, scratch=scratch)
