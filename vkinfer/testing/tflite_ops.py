"""One-op TFLite models for op-by-op comparisons against litert: seeded 8-bit graph inputs ``x`` (and ``y``),
output ``out``, seeded quantization parameters (built with tflite_builder.ModelBuilder).

    from vkinfer.testing import tflite_ops
    blob = tflite_ops.op_model("mul", 0, dtype="int8")  # also tflite_zoo.op_model
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import tflite

from .tflite_builder import ACT, ModelBuilder


def op_model(op: Literal["mul", "add", "logistic", "max_pool", "average_pool", "softmax", "concat", "pad", "quantize",
                         "requantize", "strided_slice", "split", "split_v", "pack", "unpack", "squeeze", "gather",
                         "depth_to_space", "resize_nearest", "tanh", "hard_swish", "leaky_relu", "sub", "maximum",
                         "minimum", "prelu", "mean", "resize_bilinear", "batch_matmul", "transpose_conv"],
             seed: int = 0, *,
             dtype: Literal["int8", "uint8"] = "int8", shape=(1, 8, 8, 16), activation: str | None = None,
             **kw) -> bytes:
    """One TFLite op with 8-bit graph inputs ``x`` (and ``y``) and output ``out``, seeded random quantization
    parameters, for op-by-op comparisons (the compared inputs are then identical in both runtimes).

    mul, add: ``x`` of `shape` times/plus ``y`` (shape kw["y_shape"], default `shape`), fused `activation`.
    logistic: output scale 1/256 (TFLite's requirement). max_pool: kw filter (3), stride (2), padding ("SAME" or
    "VALID"), fused `activation`; output parameters = the input's. average_pool: as max_pool, filter and stride
    an int or an (h, w) pair. softmax: over the last axis, kw beta (1.0), kw scale (the input's; default seeded),
    output scale 1/256, zero point -128 (int8) / 0 (uint8), as TFLite requires. concat: kw inputs (2), axis (3); kw
    same_params: every input with the output's parameters. pad: kw paddings (rank x 2). quantize: float32
    input ``x``, kw scale (default: a seeded scale that is not a power of two). requantize: QUANTIZE of the 8-bit
    ``x`` to kw out_dtype (default `dtype`) with scale x_scale / kw ratio (default: seeded in [0.6, 1.6]).
    strided_slice (kw begin, end, strides, BeginMask, EndMask, ShrinkAxisMask, out_shape), split / split_v / unpack
    (kw axis, sizes; outputs out0, out1, ...), pack (kw inputs, axis; inputs x, x1, ...), squeeze (kw dims),
    gather (kw axis, indices), depth_to_space (kw block), resize_nearest and resize_bilinear (kw size, align_corners,
    half_pixel; resize_bilinear: kw out_params (scale, zero point), default the input's), batch_matmul (kw
    y_shape, adj_x, adj_y, const_y, qparams {"x", "y", "out": (scale, zero point)}), transpose_conv (kw filters,
    kernel, stride, padding, out_hw, per_channel, bias, activation, out_params, x_params, w_scale), tanh,
    hard_swish, leaky_relu (kw alpha), sub (kw activation), maximum, minimum (kw same_params), prelu (constant
    alpha of shape kw y_shape), mean (kw axes, keep_dims (True), ratio x_scale / y_scale (seeded), zero_points
    (x, y) (seeded)): see `_more_op`.
    """
    qdt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    shape = tuple(shape)

    def params(lo=0.005, hi=0.05):
        sc = float(np.float32(np.exp(rng.uniform(np.log(lo), np.log(hi)))))
        zp = int(rng.integers(-20, 21)) + (0 if qdt == np.int8 else 128)
        return sc, zp

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m = ModelBuilder()
    if op == "quantize":
        sc = kw.get("scale") or float(np.float32(np.exp(rng.uniform(np.log(0.003), np.log(0.05)))))
        x = m.tensor("x", shape, np.float32)
        y = m.tensor("out", shape, qdt, scale=sc, zero_point=params()[1])
        m.op(B.QUANTIZE, [x], [y])
        return m.finish([x], [y])
    xp = params()
    x = m.tensor("x", shape, qdt, None, *xp)
    ins = [x]
    if op in ("mul", "add"):
        yp = params()
        ins.append(m.tensor("y", kw.get("y_shape", shape), qdt, None, *yp))
        out_shape = tuple(np.broadcast_shapes(shape, kw.get("y_shape", shape)))
        # Output scales that keep most results inside the type: a * b spans ~ 128^2 * xs * ys, a + b ~ 256 * max.
        sc = xp[0] * yp[0] * rng.uniform(30, 120) if op == "mul" else max(xp[0], yp[0]) * rng.uniform(1.2, 2.5)
        y = m.tensor("out", out_shape, qdt, None, float(np.float32(sc)), params()[1])
        code, kind = (B.MUL, A.MulOptions) if op == "mul" else (B.ADD, A.AddOptions)
        m.op(code, ins, [y], kind, FusedActivationFunction=ACT[activation])
    elif op == "logistic":
        y = m.tensor("out", shape, qdt, scale=1.0 / 256, zero_point=-128 if qdt == np.int8 else 0)
        m.op(B.LOGISTIC, ins, [y])
    elif op == "max_pool":
        k, st, pad = kw.get("filter", 3), kw.get("stride", 2), kw.get("padding", "SAME")
        h, w = shape[1:3]
        oh, ow = ((-(-h // st), -(-w // st)) if pad == "SAME" else ((h - k) // st + 1, (w - k) // st + 1))
        t = m.tensors[x]
        y = m.tensor("out", (shape[0], oh, ow, shape[3]), qdt, scale=t.scale, zero_point=t.zero_point)
        m.op(B.MAX_POOL_2D, ins, [y], A.Pool2DOptions, Padding=getattr(P, pad), StrideW=st, StrideH=st,
             FilterWidth=k, FilterHeight=k, FusedActivationFunction=ACT[activation])
    elif op == "average_pool":
        (kh, kw_), (sh, sw) = (tuple(v) if isinstance(v, tuple | list) else (v, v)
                               for v in (kw.get("filter", 3), kw.get("stride", 2)))
        pad = kw.get("padding", "SAME")
        h, w = shape[1:3]
        oh, ow = ((-(-h // sh), -(-w // sw)) if pad == "SAME" else ((h - kh) // sh + 1, (w - kw_) // sw + 1))
        t = m.tensors[x]
        y = m.tensor("out", (shape[0], oh, ow, shape[3]), qdt, scale=t.scale, zero_point=t.zero_point)
        m.op(B.AVERAGE_POOL_2D, ins, [y], A.Pool2DOptions, Padding=getattr(P, pad), StrideW=sw, StrideH=sh,
             FilterWidth=kw_, FilterHeight=kh, FusedActivationFunction=ACT[activation])
    elif op == "softmax":
        y = m.tensor("out", shape, qdt, scale=1.0 / 256, zero_point=-128 if qdt == np.int8 else 0)
        if kw.get("scale"):
            m.tensors[x].scale = np.float32([kw["scale"]])
        m.op(B.SOFTMAX, ins, [y], A.SoftmaxOptions, Beta=float(kw.get("beta", 1.0)))
    elif op == "concat":
        n, axis = kw.get("inputs", 2), kw.get("axis", 3)
        yp = params()
        for j in range(1, n):
            ins.append(m.tensor(f"x{j}", shape, qdt, None, *(yp if kw.get("same_params") else params())))
        if kw.get("same_params"):
            m.tensors[x].scale, m.tensors[x].zero_point = np.float32([yp[0]]), np.array([yp[1]])
        out_shape = list(shape)
        out_shape[axis] *= n
        y = m.tensor("out", out_shape, qdt, scale=yp[0], zero_point=yp[1])
        m.op(B.CONCATENATION, ins, [y], A.ConcatenationOptions, Axis=axis, FusedActivationFunction=ACT[None])
    elif op == "requantize":
        odt = np.dtype(kw.get("out_dtype", dtype))
        ratio = kw.get("ratio") or rng.uniform(0.6, 1.6)
        y = m.tensor("out", shape, odt, None, float(np.float32(xp[0] / ratio)),
                     int(rng.integers(-20, 21)) + (0 if odt == np.int8 else 128))
        m.op(B.QUANTIZE, ins, [y])
    elif op == "pad":
        p = np.array(kw.get("paddings", [[0, 0], [1, 2], [2, 1], [0, 0]]), np.int32)
        ins.append(m.tensor("paddings", p.shape, np.int32, p))
        t = m.tensors[x]
        y = m.tensor("out", tuple(int(v) for v in np.array(shape) + p.sum(axis=1)), qdt, scale=t.scale,
                     zero_point=t.zero_point)
        m.op(B.PAD, ins, [y])
    elif op in _MORE_OPS:
        outs = _more_op(m, op, x, xp, qdt, shape, params, rng, kw)
        graph_ins = [i for i in range(len(m.tensors)) if m.tensors[i].buffer == 0 and m.tensors[i].name.startswith(
            "x")]
        return m.finish(graph_ins, outs)
    else:
        raise ValueError(f"unknown op {op!r}")
    graph_ins = [i for i in ins if m.tensors[i].buffer == 0]
    return m.finish(graph_ins, [y])


_MORE_OPS = ("strided_slice", "split", "split_v", "pack", "unpack", "squeeze", "gather", "depth_to_space",
             "resize_nearest", "tanh", "hard_swish", "leaky_relu", "sub", "maximum", "minimum", "prelu", "mean",
             "resize_bilinear", "batch_matmul", "transpose_conv")


def _more_op(m: ModelBuilder, op: str, x: int, xp, qdt, shape, params, rng, kw) -> list[int]:
    """The ops of `op_model` added for streaming models and the field's int8 CNNs; returns the output tensors
    (named ``out``, or ``out0``, ``out1``, ... for several). Data movement keeps x's parameters."""
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions

    def like(name, shp):
        return m.tensor(name, shp, qdt, None, *xp)

    def ints(name, v):
        v = np.asarray(v, np.int32)
        return m.tensor(name, v.shape, np.int32, v)

    r = len(shape)
    if op == "strided_slice":
        begin, end, strides = kw.get("begin", [0] * r), kw.get("end", list(shape)), kw.get("strides", [1] * r)
        masks = {k: kw.get(k, 0) for k in ("BeginMask", "EndMask", "ShrinkAxisMask")}
        out_shape = tuple(kw["out_shape"])
        y = like("out", out_shape)
        m.op(B.STRIDED_SLICE, [x, ints("begin", begin), ints("end", end), ints("strides", strides)], [y],
             A.StridedSliceOptions, EllipsisMask=0, NewAxisMask=0, **masks)
        return [y]
    if op in ("split", "split_v", "unpack"):
        axis = kw.get("axis", 3)
        sizes = kw.get("sizes", [shape[axis] // 2] * 2)
        outs = []
        for k, size in enumerate(sizes):
            sh = list(shape)
            sh[axis] = size
            if op == "unpack":
                del sh[axis]
            outs.append(like(f"out{k}", sh))
        if op == "split":
            m.op(B.SPLIT, [ints("axis", axis), x], outs, A.SplitOptions, NumSplits=len(sizes))
        elif op == "split_v":
            m.op(B.SPLIT_V, [x, ints("sizes", kw.get("size_splits", sizes)), ints("axis", axis)], outs,
                 A.SplitVOptions, NumSplits=len(sizes))
        else:
            m.op(B.UNPACK, [x], outs, A.UnpackOptions, Num=len(sizes), Axis=axis)
        return outs
    if op == "pack":
        n, axis = kw.get("inputs", 3), kw.get("axis", 0)
        ins = [x] + [like(f"x{j}", shape) for j in range(1, n)]
        y = like("out", (*shape[:axis], n, *shape[axis:]))
        m.op(B.PACK, ins, [y], A.PackOptions, ValuesCount=n, Axis=axis)
        return [y]
    if op == "squeeze":
        dims = kw.get("dims", [i for i, d in enumerate(shape) if d == 1])
        y = like("out", [d for i, d in enumerate(shape) if i not in dims])
        m.op(B.SQUEEZE, [x], [y], A.SqueezeOptions, SqueezeDims=list(dims))
        return [y]
    if op == "gather":
        axis = kw.get("axis", 3)
        idx = np.asarray(kw.get("indices", rng.integers(0, shape[axis], 5)), np.int32)
        y = like("out", (*shape[:axis], *idx.shape, *shape[axis + 1:]))
        m.op(B.GATHER, [x, ints("indices", idx)], [y], A.GatherOptions, Axis=axis, BatchDims=0)
        return [y]
    if op == "depth_to_space":
        b = kw.get("block", 2)
        n, h, w, c = shape
        y = like("out", (n, h * b, w * b, c // (b * b)))
        m.op(B.DEPTH_TO_SPACE, [x], [y], A.DepthToSpaceOptions, BlockSize=b)
        return [y]
    if op == "resize_nearest":
        oh, ow = kw.get("size", (2 * shape[1], 2 * shape[2]))
        y = like("out", (shape[0], oh, ow, shape[3]))
        m.op(B.RESIZE_NEAREST_NEIGHBOR, [x, ints("size", [oh, ow])], [y], A.ResizeNearestNeighborOptions,
             AlignCorners=bool(kw.get("align_corners", False)), HalfPixelCenters=bool(kw.get("half_pixel", False)))
        return [y]
    if op == "resize_bilinear":
        oh, ow = kw.get("size", (2 * shape[1], 2 * shape[2]))
        y = m.tensor("out", (shape[0], oh, ow, shape[3]), qdt, None, *kw.get("out_params", xp))
        m.op(B.RESIZE_BILINEAR, [x, ints("size", [oh, ow])], [y], A.ResizeBilinearOptions,
             AlignCorners=bool(kw.get("align_corners", False)), HalfPixelCenters=bool(kw.get("half_pixel", False)))
        return [y]
    if op == "batch_matmul":
        adj_x, adj_y = bool(kw.get("adj_x", False)), bool(kw.get("adj_y", False))
        b_shape = tuple(kw["y_shape"])
        qp = kw.get("qparams", {})  # "x", "y", "out": (scale, zero point) chosen by the caller
        if "x" in qp:
            m.tensors[x].scale, m.tensors[x].zero_point = np.float32([qp["x"][0]]), np.array([qp["x"][1]])
        yp = qp.get("y") or params()
        if kw.get("const_y"):
            info = np.iinfo(qdt)
            b = m.tensor("weights", b_shape, qdt, rng.integers(info.min, info.max + 1, b_shape).astype(qdt), *yp)
        else:
            b = m.tensor("x1", b_shape, qdt, None, *yp)
        rows = shape[-1] if adj_x else shape[-2]
        cols = b_shape[-2] if adj_y else b_shape[-1]
        batch = np.broadcast_shapes(shape[:-2], b_shape[:-2])
        y = m.tensor("out", (*batch, rows, cols), qdt, None, *(qp.get("out") or params(0.05, 0.5)))
        m.op(B.BATCH_MATMUL, [x, b], [y], A.BatchMatMulOptions, AdjX=adj_x, AdjY=adj_y,
             AsymmetricQuantizeInputs=False)
        return [y]
    if op == "transpose_conv":
        n, h, w, c = shape
        o, (kh, kwd), (sh, sw) = kw.get("filters", 8), kw.get("kernel", (3, 3)), kw.get("stride", (2, 2))
        same = kw.get("padding", "SAME") == "SAME"
        out_hw = kw.get("out_hw") or ((h * sh, w * sw) if same else ((h - 1) * sh + kh, (w - 1) * sw + kwd))
        wt = rng.integers(-127, 128, (o, kh, kwd, c)).astype(np.int8)
        ws = np.float32(np.exp(rng.uniform(np.log(0.002), np.log(0.02), o if kw.get("per_channel", True) else 1)))
        if "w_scale" in kw:  # ties: power-of-two scales make the multiplier a power of two
            ws = np.full(ws.shape, kw["w_scale"], np.float32)
        if "x_params" in kw:
            xp = kw["x_params"]
            m.tensors[x].scale, m.tensors[x].zero_point = np.float32([xp[0]]), np.array([xp[1]])
        wq = m.tensor("weights", wt.shape, np.int8, wt, ws, np.zeros(ws.size, np.int64), quantized_dimension=0)
        ins_ = [ints("output_shape", [n, *out_hw, o]), wq, x]
        if kw.get("bias", True):
            bias = rng.integers(-3000, 3000, o).astype(np.int32)
            ins_.append(m.tensor("bias", (o,), np.int32, bias, np.float32(xp[0]) * ws, np.zeros(ws.size, np.int64)))
        y = m.tensor("out", (n, *out_hw, o), qdt, None, *kw.get("out_params", params(0.05, 0.2)))
        m.op(B.TRANSPOSE_CONV, ins_, [y], A.TransposeConvOptions, Padding=0 if same else 1, StrideH=sh, StrideW=sw,
             FusedActivationFunction=ACT[kw.get("activation")])
        return [y]
    if op == "mean":
        r = len(shape)
        axes = [int(a) for a in kw.get("axes", [1, 2])]
        red = {a % r for a in axes}
        keep = bool(kw.get("keep_dims", True))
        out_shape = [1 if i in red else d for i, d in enumerate(shape)] if keep else [
            d for i, d in enumerate(shape) if i not in red]
        ratio = kw.get("ratio") or float(rng.uniform(0.5, 4.0))
        yz = params()[1]
        if "zero_points" in kw:  # (x, y) zero points chosen by the caller
            m.tensors[x].zero_point, yz = np.array([kw["zero_points"][0]]), int(kw["zero_points"][1])
        y = m.tensor("out", out_shape, qdt, None, float(np.float32(xp[0] / ratio)), yz)
        m.op(B.MEAN, [x, ints("axes", axes)], [y], A.ReducerOptions, KeepDims=keep)
        return [y]
    if op in ("tanh", "hard_swish", "leaky_relu"):
        if op == "tanh":  # TFLite requires output scale 1/128, zero point 0 (int8) / 128 (uint8)
            y = m.tensor("out", shape, qdt, None, 1.0 / 128, 0 if qdt == np.int8 else 128)
            m.op(B.TANH, [x], [y])
        elif op == "hard_swish":
            y = m.tensor("out", shape, qdt, None, *params())
            m.op(B.HARD_SWISH, [x], [y])
        else:
            y = m.tensor("out", shape, qdt, None, *params())
            m.op(B.LEAKY_RELU, [x], [y], A.LeakyReluOptions, Alpha=float(kw.get("alpha", rng.uniform(0.05, 0.5))))
        return [y]
    # binary: sub, maximum, minimum, prelu
    yp = params()
    same = kw.get("same_params", op in ("maximum", "minimum"))
    b_shape = tuple(kw.get("y_shape", shape))
    if op == "prelu":
        alpha = rng.integers(-128, 128, b_shape) if qdt == np.int8 else rng.integers(0, 256, b_shape)
        b = m.tensor("alpha", b_shape, qdt, alpha, *params(0.002, 0.01))
    else:
        b = m.tensor("x1", b_shape, qdt, None, *(xp if same else yp))
    y = m.tensor("out", np.broadcast_shapes(shape, b_shape), qdt, None,
                 *(xp if same else (max(xp[0], yp[0]) * float(rng.uniform(1.2, 2.5)), params()[1])))
    if op == "sub":
        m.op(B.SUB, [x, b], [y], A.SubOptions, FusedActivationFunction=ACT[kw.get("activation")])
    else:
        m.op({"maximum": B.MAXIMUM, "minimum": B.MINIMUM, "prelu": B.PRELU}[op], [x, b], [y])
    return [y]


__all__ = ["op_model"]
