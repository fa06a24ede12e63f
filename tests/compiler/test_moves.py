"""Data-movement ops (vkinfer/model/moves.py): Slice, Split, Concat on any axis, Transpose, Pad, Gather,
DepthToSpace, SpaceToDepth, Tile, Expand and Resize on 8-bit tensors, as one byte gather on the CPU
(cpu_fallback/src/ops/gather.c) and on Vulkan (shaders/byte_gather.comp).

Oracle: ONNX Runtime 1.31 on single-node uint8/int8 models (ORT runs these ops on the 8-bit tensor directly) and
on QDQ models at ORT_ENABLE_ALL, where ORT drops the DQ/Q pairs around Slice, Split, Gather, Transpose,
DepthToSpace, Tile, Expand and nearest Resize and keeps Pad, SpaceToDepth and linear Resize in float (vkinfer
folds Pad and SpaceToDepth too: Q(DQ(v)) == v at a per-tensor scale makes that exact). Every case must be
bit-identical on the reference, the CPU and Vulkan, and the node must really run on that device. Linear Resize
(a computation, not a move) runs ORT's float32 bilinear arithmetic (2-D and NCHW inputs; natively for float32,
ops/float_resize.c), the 8-bit result truncated as ORT's static_cast: also bit-identical.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from support.agree import DEVICES, run_devices, run_sessions

import vkinfer
from vkinfer.testing.onnx_builder import make_model
from vkinfer.testing.zoo import ort_run

ROOT = Path(__file__).resolve().parents[2]
INT8_QDQ = {"session.qdqisint8allowed": "1"}


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def single(op: str, ins: list, attrs: dict, dtype=np.uint8, n_out: int = 1, opset: int = 19) -> bytes:
    """One-node model: `ins` items are an activation shape (a graph input), an array (an initializer) or None."""
    inputs, consts, names = {}, {}, []
    for i, v in enumerate(ins):
        if v is None:
            names.append("")
        elif isinstance(v, tuple):
            names.append(f"x{i}")
            inputs[f"x{i}"] = (dtype, v)
        else:
            names.append(f"c{i}")
            consts[f"c{i}"] = v
    outs = [f"y{k}" for k in range(n_out)]
    node = h.make_node(op, names, outs, name="node", **attrs)
    return make_model([node], inputs, dict.fromkeys(outs, dtype), consts, opset=opset, ir=9).SerializeToString()


def feeds(blob: bytes, seed: int) -> dict[str, np.ndarray]:
    m = onnx.load_model_from_string(blob)
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == T.FLOAT:
            out[vi.name] = rng.uniform(-3, 3, shape).astype(np.float32)
        else:
            out[vi.name] = rng.integers(0, 256, shape).astype(np.uint8).view(
                np.int8 if t.elem_type == T.INT8 else np.uint8)
    return out


# (id, op, inputs, attrs, outputs, opset): shapes are activations, arrays constants.
CASES = [
    ("slice_r1_negstep", "Slice", [(9,), i64(-2), i64(-100), i64(0), i64(-3)], {}, 1, 19),
    ("slice_r2_clamp", "Slice", [(5, 7), i64(1, -99), i64(99, 5), i64(0, 1)], {}, 1, 19),
    ("slice_r3_axes_neg", "Slice", [(4, 5, 6), i64(1), i64(-1), i64(-1), i64(2)], {}, 1, 19),
    ("slice_r4_hw_steps", "Slice", [(1, 3, 9, 8), i64(1, 7), i64(8, 0), i64(2, 3), i64(3, -2)], {}, 1, 19),
    ("slice_r4_channels", "Slice", [(2, 7, 3, 4), i64(2), i64(6), i64(1)], {}, 1, 19),
    ("slice_r5", "Slice", [(1, 2, 3, 4, 5), i64(0, 4, 1), i64(1, 0, 3), i64(1, -1, 2), i64(1, -1, 1)], {}, 1, 19),
    ("slice_opset9_attrs", "Slice", [(3, 6)], {"starts": [1], "ends": [5], "axes": [1]}, 1, 9),
    ("split_sizes_c", "Split", [(1, 7, 3, 3), i64(2, 4, 1)], {"axis": 1}, 3, 13),
    ("split_sizes_last", "Split", [(2, 3, 10), i64(3, 7)], {"axis": -1}, 2, 13),
    ("split_attr_opset11", "Split", [(6, 4)], {"axis": 0, "split": [1, 5]}, 2, 11),
    ("split_even_host", "Split", [(1, 6, 2, 2)], {"axis": 1, "num_outputs": 3}, 3, 18),
    ("concat_axis0", "Concat", [(1, 3, 4, 5), (2, 3, 4, 5)], {"axis": 0}, 1, 13),
    ("concat_axis_h", "Concat", [(1, 3, 2, 5), (1, 3, 4, 5), (1, 3, 1, 5)], {"axis": 2}, 1, 13),
    ("concat_axis_w", "Concat", [(1, 3, 4, 2), (1, 3, 4, 3)], {"axis": -1}, 1, 13),
    ("concat_r2_last", "Concat", [(3, 5), (3, 2)], {"axis": 1}, 1, 13),
    ("concat_r3_mid", "Concat", [(2, 1, 4), (2, 3, 4)], {"axis": -2}, 1, 13),
    ("transpose_r2", "Transpose", [(5, 7)], {}, 1, 13),
    ("transpose_r3", "Transpose", [(3, 4, 5)], {"perm": [1, 2, 0]}, 1, 13),
    ("transpose_r4_nhwc", "Transpose", [(1, 5, 3, 4)], {"perm": [0, 2, 3, 1]}, 1, 13),
    ("transpose_r4_odd", "Transpose", [(2, 3, 4, 5)], {"perm": [3, 1, 0, 2]}, 1, 13),
    ("transpose_r5", "Transpose", [(1, 2, 3, 4, 5)], {"perm": [0, 4, 2, 1, 3]}, 1, 13),
    ("pad_r1_const", "Pad", [(7,), i64(2, 3), None], {}, 1, 19),
    ("pad_r3_edge", "Pad", [(2, 3, 4), i64(0, 1, 2, 1, 0, 3)], {"mode": "edge"}, 1, 19),
    ("pad_r4_reflect", "Pad", [(1, 3, 4, 5), i64(0, 0, 2, 1, 0, 1, 3, 2)], {"mode": "reflect"}, 1, 19),
    ("pad_r4_channels_neg", "Pad", [(1, 5, 3, 3), i64(0, 2, -1, 0, 0, 1, 0, -1)], {}, 1, 19),
    ("pad_r5_edge", "Pad", [(1, 2, 3, 2, 2), i64(0, 1, 0, 1, 1, 0, 0, 1, 0, 1)], {"mode": "edge"}, 1, 19),
    ("gather_axis0", "Gather", [(5, 3), i64(4, 0, -1, 2)], {}, 1, 13),
    ("gather_axis1_2d", "Gather", [(1, 6, 2, 3), i64([1, -2], [0, 5])], {"axis": 1}, 1, 13),
    ("gather_last_scalar", "Gather", [(2, 3, 4), np.array(-1, np.int64)], {"axis": -1}, 1, 13),
    ("gather_int32", "Gather", [(4, 6), np.array([5, 0, 3], np.int32)], {"axis": 1}, 1, 13),
    ("d2s_dcr", "DepthToSpace", [(1, 8, 2, 3)], {"blocksize": 2}, 1, 13),
    ("d2s_crd", "DepthToSpace", [(2, 18, 2, 1)], {"blocksize": 3, "mode": "CRD"}, 1, 13),
    ("s2d", "SpaceToDepth", [(1, 3, 4, 6)], {"blocksize": 2}, 1, 13),
    ("tile_r4", "Tile", [(1, 2, 3, 2), i64(2, 1, 2, 3)], {}, 1, 13),
    ("tile_r1", "Tile", [(5,), i64(3)], {}, 1, 13),
    ("expand_r4", "Expand", [(1, 3, 1, 4), i64(2, 1, 3, 1)], {}, 1, 13),
    ("expand_rank_up", "Expand", [(3, 1), i64(2, 1, 3, 5)], {}, 1, 13),
]
CTMS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn", "align_corners",
        "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
ROI = f32()
for i, ctm in enumerate(CTMS):
    scales = [f32(1, 1, 2, 2), f32(1, 1, 1.5, 0.6), f32(1, 1, 0.5, 3.0), f32(1, 1, 2.7, 0.34)][i % 4]
    CASES.append((f"resize_{ctm}_{NEAREST[i % 4]}", "Resize", [(1, 3, 5, 7), ROI, scales],
                  {"mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": NEAREST[i % 4]}, 1, 19))
CASES += [
    ("resize_sizes_r3", "Resize", [(2, 5, 6), ROI, None, i64(2, 9, 4)],
     {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, 1, 19),
    ("resize_r1_rank1", "Resize", [(6,), ROI, f32(1.7)], {"mode": "nearest", "nearest_mode": "floor"}, 1, 19),
    ("resize_axes_policy", "Resize", [(1, 2, 5, 8), ROI, None, i64(7, 7)],
     {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, 1, 19),
    ("resize_crop_extrapolate", "Resize", [(1, 2, 4, 5), f32(0, 0, -0.2, 0.1, 1, 1, 1.3, 0.8), f32(1, 1, 1.5, 1.4)],
     {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0},
     1, 19),
    ("resize_opset10", "Resize", [(1, 2, 3, 4), f32(1, 1, 2.5, 0.5)], {"mode": "nearest"}, 1, 10),
    ("resize_2x_asym_floor", "Resize", [(1, 3, 4, 4), ROI, f32(1, 1, 2, 2)],
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 1, 19),
]
# Linear Resize computes (host, ORT's float32 bilinear arithmetic): on the host on every device.
LINEAR = [
    ("linear_half_pixel", [(1, 3, 5, 7), ROI, f32(1, 1, 1.7, 0.6)], {}),
    ("linear_align", [(2, 2, 4, 3), ROI, f32(1, 1, 2, 3)], {"coordinate_transformation_mode": "align_corners"}),
    ("linear_r2_sizes", [(5, 6), ROI, None, i64(8, 4)], {"coordinate_transformation_mode": "asymmetric"}),
]


@functools.cache
def case_model(cid: str, dtype) -> bytes:
    _, op, ins, attrs, n_out, opset = next(c for c in CASES if c[0] == cid)
    return single(op, ins, attrs, dtype, n_out, opset)


def _device_ok(sess, device: str, host_ok: bool) -> None:
    """Every node ran on `device` (the reference runs everything on the host)."""
    where = set(sess.placement.values())
    if device == "reference":
        return
    if host_ok:
        assert where <= {"host"}, sess.placement
    else:
        assert where and all(w.split(":")[0] == device for w in where), sess.placement


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_move_equals_ort_on_every_device(cid):
    """One op, uint8 and int8 in turn (by case index), against ORT on the reference, the CPU and Vulkan."""
    k = [c[0] for c in CASES].index(cid)
    dtype = (np.uint8, np.int8)[k % 2]
    blob = case_model(cid, dtype)
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    for seed in range(2):  # the second feed through the same sessions: nothing stale in reused buffers
        feed = feeds(blob, seed)
        run_sessions(sessions, feed, want=ort_run(onnx.load_model_from_string(blob), feed))
    for device, sess in sessions.items():
        _device_ok(sess, device, cid.endswith("_host"))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float32])
@pytest.mark.parametrize("lid", [c[0] for c in LINEAR])
def test_linear_resize_equals_ort(lid, dtype):
    """Linear Resize, float32 and 8-bit: ORT's bilinear arithmetic, bit for bit (the host runs it)."""
    _, ins, attrs = next(c for c in LINEAR if c[0] == lid)
    blob = single("Resize", ins, {"mode": "linear", **attrs}, dtype)
    if dtype == np.float32:  # vkinfer loads only 8-bit models: the float op runs here through its kernel
        from vkinfer.model.graph import Node
        from vkinfer.model.op_table import OPS

        feed = feeds(blob, 3)
        want = ort_run(onnx.load_model_from_string(blob), feed)[0]
        node = Node("Resize", "r", ["x0", *[f"c{i}" for i in range(1, len(ins))]], ["y"],
                    {"mode": b"linear", **{k: (v.encode() if isinstance(v, str) else v) for k, v in attrs.items()}})
        got = OPS["Resize"](node, [feed["x0"], *ins[1:]], {})[0]
        np.testing.assert_array_equal(got, want)
        return
    feed = feeds(blob, 3)
    run_devices(blob, feed, want=ort_run(onnx.load_model_from_string(blob), feed))


# ------------------------------------------------------------------------------------------- QDQ models


@functools.cache
def qdq_model(dtype) -> bytes:
    """x (float) -> Q -> DQ, then each move op between a DQ and a Q of the same parameters, as
    onnxruntime.quantization leaves them: Slice, Split (each output its own Q), nearest Resize, Gather, Transpose,
    DepthToSpace, Tile, Expand, and (kept float by ORT) Pad, SpaceToDepth, linear Resize."""
    zp = np.array(128 if dtype == np.uint8 else -3, dtype)
    nodes, consts, outs = [], {"s": f32(0.037).reshape(()), "z": zp}, {}

    def c(name, v):
        consts[name] = v
        return name

    nodes += [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), h.make_node("DequantizeLinear", ["xq", "s", "z"],
                                                                                   ["xf"])]
    ops = [
        ("Slice", ["xf", c("ss", i64(1, 6)), c("se", i64(-1, 0)), c("sa", i64(1, 3)), c("st", i64(1, -2))], {}, 1),
        ("Split", ["xf", c("sp", i64(1, 5, 2))], {"axis": 1}, 3),
        ("Resize", ["xf", "", c("rs", f32(1, 1, 2, 2))], {"mode": "nearest"}, 1),
        ("Gather", ["xf", c("gi", i64(5, 0, -1))], {"axis": 1}, 1),
        ("Transpose", ["xf"], {"perm": [0, 3, 1, 2]}, 1),
        ("DepthToSpace", ["xf"], {"blocksize": 2, "mode": "CRD"}, 1),
        ("Tile", ["xf", c("tr", i64(1, 1, 2, 1))], {}, 1),
        ("Expand", ["xf", c("es", i64(2, 1, 1, 1))], {}, 1),
        ("Pad", ["xf", c("pp", i64(0, 0, 1, 2, 0, 0, 2, 1))], {"mode": "reflect"}, 1),
        ("SpaceToDepth", ["xf"], {"blocksize": 2}, 1),
        ("Resize", ["xf", "", c("rl", f32(1, 1, 1.5, 0.75))], {"mode": "linear"}, 1),
    ]
    for i, (op, ins, attrs, n_out) in enumerate(ops):
        mids = [f"m{i}_{k}" for k in range(n_out)]
        nodes.append(h.make_node(op, ins, mids, name=f"{op.lower()}{i}", **attrs))
        for m in mids:
            nodes += [h.make_node("QuantizeLinear", [m, "s", "z"], [m + "q"]),
                      h.make_node("DequantizeLinear", [m + "q", "s", "z"], [m + "f"])]
            outs[m + "f"] = np.float32
    return make_model(nodes, {"x": (np.float32, [1, 8, 6, 4])}, outs, consts, opset=19, name="qdq").SerializeToString()


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qdq_moves_fold_and_equal_ort(dtype):
    """The moves fold onto the 8-bit tensor (no float op left but linear Resize, native on the cpu), run on the CPU and
    Vulkan, and every output equals ORT at ORT_ENABLE_ALL (int8: session.qdqisint8allowed=1)."""
    blob = qdq_model(dtype)
    feed = {"x": np.random.default_rng(7).uniform(-5, 5, (1, 8, 6, 4)).astype(np.float32)}
    want = ort_run(onnx.load_model_from_string(blob), feed, config=INT8_QDQ if dtype == np.int8 else None)
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    run_sessions(sessions, feed, want=want)
    for device in ("cpu", "vulkan"):
        sess = sessions[device]
        moves = {n: d for n, d in sess.placement.items() if not n.startswith(("QuantizeLinear", "DequantizeLinear"))
                 and "resize10" not in n}
        ops = {n.split("#")[0].rstrip("0123456789") for n in moves}
        assert {"slice", "split", "resize", "gather", "transpose", "depthtospace", "tile", "expand", "pad",
                "spacetodepth"} <= ops, moves
        assert all(d.split(":")[0] == device for d in moves.values()), moves
        assert sess.placement["resize10"] == "cpu"  # linear: ORT's float arithmetic, native (ops/float_resize.c)


# ------------------------------------------------------------------------------------------------- bad input


BAD = [
    ("Slice", [(3, 4), i64(0), i64(2), i64(2)], {}, 1, "axis 2 is out of range"),
    ("Slice", [(3, 4), i64(0), i64(2), i64(1), i64(0)], {}, 1, "step on axis 1 is 0"),
    ("Slice", [(3, 4), i64(0, 1), i64(2), i64(1)], {}, 1, "one length"),
    ("Gather", [(3, 4), i64(1, 4)], {"axis": 1}, 1, "out of range"),
    ("Gather", [(3, 4), i64(-4)], {}, 1, "out of range"),
    ("Gather", [(3, 4), i64(0)], {"axis": 2}, 1, "axis 2 is out of range"),
    ("Split", [(1, 6, 2), i64(2, 3)], {"axis": 1}, 2, "must sum to the axis length 6"),
    ("Split", [(1, 7, 2)], {"axis": 1}, 2, "does not split evenly"),
    ("Transpose", [(2, 3)], {"perm": [0, 0]}, 1, "node"),
    ("DepthToSpace", [(1, 6, 2, 2)], {"blocksize": 2}, 1, "not divisible"),
    ("Resize", [(1, 1, 2, 2), ROI, f32(1, 1, 2, 2), i64(1, 1, 4, 4)], {"mode": "nearest"}, 1, "exactly one"),
    ("Resize", [(1, 1, 2, 2), ROI, f32(1, 2, 2)], {"mode": "nearest"}, 1, "3 scales for 4 axes"),
    ("Tile", [(2, 3), i64(2)], {}, 1, "repeats"),
    ("Expand", [(2, 3), i64(4, 3, 2)], {}, 1, "does not broadcast"),
]


@pytest.mark.parametrize("k", range(len(BAD)))
def test_bad_input_names_the_node(k):
    """The same refusal on every device (at load or at the first run)."""
    op, ins, attrs, n_out, msg = BAD[k]
    blob = single(op, ins, attrs, np.uint8, n_out, 13 if op == "Split" else 19)
    for device in DEVICES:
        with pytest.raises(ValueError, match="node") as e:
            sess = vkinfer.InferenceSession(blob, device=device)
            sess.run(None, feeds(blob, 0))
        assert msg in str(e.value) and "node" in str(e.value), (device, str(e.value))
        assert not isinstance(e.value, KeyError | IndexError), device


def test_native_gather_checks_every_run():
    """The C operator refuses a table row reading outside its input, a bad input index and a non-byte fill."""
    import ctypes

    from vkinfer.cpu.graph import _REF, NativeGraph, Ref  # noqa: F401 - _REF: the ctypes struct

    g = NativeGraph(64, [8, 8])
    sizes = np.array([8], np.uint64)

    def add(rows, fill=0):
        arr = (_REF * 1)(Ref(1, 0, 8).c())
        g.add("gather", 1, sizes, 4, 2, np.ascontiguousarray(rows, np.int64), fill, 1, ctypes.addressof(arr),
              Ref(2, 0, 8))  # 1-byte elements
    add([[0, 0, 4, 7, -1], [0, 1, 3, 0, 3]])
    x, y = np.arange(8, dtype=np.uint8), np.zeros(8, np.uint8)
    g.run([x, y])
    np.testing.assert_array_equal(y, [7, 6, 5, 4, 0, 0, 3, 0])
    for rows, fill in [([[0, 0, 4, 5, 1], [1, 0, 0, 0, 0]], 0), ([[0, 0, 4, 0, 3], [1, 0, 0, 0, 0]], 0),
                       ([[2, 0, 4, 0, 1], [1, 0, 0, 0, 0]], 0), ([[0, 0, 5, 0, 1], [1, 0, 0, 0, 0]], 0),
                       ([[0, 2, 1, 0, 1], [1, 0, 0, 0, 0]], 0), ([[1, 0, 0, 0, 0], [1, 0, 0, 0, 0]], 256),
                       ([[0, 0, 4, -1, 1], [1, 0, 0, 0, 0]], 0), ([[1, 0, 2, 0, 1], [1, 0, 0, 0, 0]], 0)]:
        with pytest.raises(ValueError, match="gather"):
            add(rows, fill)


def test_gather_under_asan():
    """Every CPU case of the table through the AddressSanitizer + UBSan build of the library, in a subprocess."""
    from support.cpu_build import build_cpu

    build_cpu("asan-lib")
    libasan = subprocess.run([os.environ.get("CC", "cc"), "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
           "VKINFER_CPU_LIB": str(ROOT / "build" / "cpu" / "libvkinfer_cpu-asan.so")}
    # The reference and the ASan build of the CPU library only: the point is the C code; Vulkan's bits for the same
    # cases are checked against these in test_move_equals_ort_on_every_device.
    code = ("import numpy as np\nfrom compiler import test_moves as t\n"
            "from support.agree import run_devices\n"
            "from vkinfer.cpu import LIB_PATH\n"
            "n = 0\n"
            "for c in t.CASES:\n"
            "    for dt in (np.uint8, np.int8):\n"
            "        b = t.case_model(c[0], dt); f = t.feeds(b, 1)\n"
            "        run_devices(b, f, devices=('reference', 'cpu')); n += 1\n"
            "print('lib', LIB_PATH, 'cases', n)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", env=env, capture_output=True, text=True,
                       timeout=600)
    where = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and "asan" in r.stdout and f"cases {2 * len(CASES)}" in r.stdout, where


def check_moves(device: str) -> None:
    """A few byte gathers (one and several inputs, fill, strided and element rows) on `device` against the
    reference (and cpu and the default Vulkan device): tests/vulkan/test_vulkan_devices.py runs it on every other Vulkan
    device."""
    for cid in ("slice_r4_hw_steps", "concat_axis_h", "pad_r4_reflect", "resize_crop_extrapolate",
                "transpose_r5", "gather_axis1_2d"):
        for dtype in (np.uint8, np.int8):
            blob = case_model(cid, dtype)
            feed = feeds(blob, 5)
            sess = vkinfer.InferenceSession(blob, device=device)
            assert all(d.startswith("vulkan") for d in sess.placement.values()), sess.placement
            run_devices(blob, feed, want=sess.run(None, feed))  # this device's bits, on every default device
