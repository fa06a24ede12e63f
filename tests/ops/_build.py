"""What every tests/ops/test_<op>.py shares: one-node ONNX models, seeded 8-bit data, ONNX Runtime as the oracle,
and `check`, which runs a model on every device (tests/support/agree.py: reference, cpu, vulkan; identical bits, equal
to the oracle) and asserts where each node ran, so a lowering that silently refuses a node fails the test.

Deliberately tiny and built on onnx.helper directly: the project's own graph builders (vkinfer.testing) are
being unified, and an op test should not move with them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, refused_devices, run_sessions, sessions

ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
QTYPES = (np.uint8, np.int8)
NAME = "op_under_test"  # the node's name: distinctive, so "the message names the node" means something
INT8_QDQ = {"session.qdqisint8allowed": "1"}  # ORT on x86 fuses int8 QDQ as on ARM (exact integer kernels)


def qrange(dtype) -> tuple[int, int]:
    """(min, max) of an 8-bit type."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def qrand(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Seeded values over the whole range of `dtype` (both ends included: zeros hide layout and rounding errors)."""
    lo, hi = qrange(dtype)
    return rng.integers(lo, hi + 1, tuple(shape)).astype(dtype)


def model(nodes, inputs: dict, consts: dict | None = None, outputs: dict | None = None, opset: int = 13,
          ms: bool = True) -> bytes:
    """A model of `nodes` (NodeProtos). `inputs`: name -> an array (its dtype and shape are declared) or a
    (dtype, shape) pair; `consts`: name -> array (initializers); `outputs`: name -> numpy type (default: "y" of
    the first input's type). `ms` adds the com.microsoft and vkinfer domains."""
    def vi(name, v):
        dt, shape = (np.dtype(v[0]), v[1]) if isinstance(v, tuple) else (np.asarray(v).dtype, np.shape(v))
        return helper.make_tensor_value_info(name, ELEM[np.dtype(dt)], list(shape))
    if outputs is None:
        first = next(iter(inputs.values()))
        outputs = {"y": first[0] if isinstance(first, tuple) else np.asarray(first).dtype}
    g = helper.make_graph(list(nodes), "g", [vi(k, v) for k, v in inputs.items()],
                          [helper.make_tensor_value_info(o, ELEM[np.dtype(t)], None) for o, t in outputs.items()],
                          initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()])
    ops = [helper.make_opsetid("", opset)]
    if ms:
        ops += [helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("vkinfer", 1)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8 if opset <= 18 else 9 if opset <= 20 else 10  # ORT's Python API refuses newer IR versions
    return m.SerializeToString()


def node(op: str, ins: Sequence[str], outs: Sequence[str] = ("y",), name: str = NAME, domain: str | None = None,
         **attrs):
    """A NodeProto named `name` (placement checks and error messages look for it)."""
    return helper.make_node(op, list(ins), list(outs), name=name, domain=domain, **attrs)


def ort_run(blob: bytes, feed: dict, *, optimize: bool = False, config: dict | None = None) -> list[np.ndarray]:
    """ONNX Runtime's outputs (CPU EP, one thread; nodes as written unless `optimize`)."""
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.log_severity_level = 3
    o.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                  else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for k, v in (config or {}).items():
        o.add_session_config_entry(k, v)
    return ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"]).run(None, feed)


def assert_placed(sess, device: str, where: str | dict | None = None, nodes: Iterable[str] | None = None) -> None:
    """Every node of `sess` (a session on `device`, "cpu" or "vulkan"), or those named, ran where expected: on
    `device` itself by default; `where` a device kind ("cpu", "vulkan", "host") for all of them, or a dict node
    name -> kind (the nodes it does not name: on `device`); "any" asserts nothing (a case whose values are the
    point, e.g. a known disagreement that a fix may resolve either way)."""
    if where == "any":
        return
    placement = sess.placement
    assert placement, f"{device}: no node placed (no compiled plan?)"
    names = list(placement) if nodes is None else list(nodes)
    for n in names:
        assert n in placement, f"{device}: no node {n!r} in {placement}"
        want = where.get(n, device) if isinstance(where, dict) else (where or device)
        got = placement[n].split(":")[0]
        assert got == want, f"{device}: node {n!r} ran on {placement[n]!r}, expected {want}: {placement}"


def check(blob: bytes, feeds: dict | Sequence[dict], want=None, *, where: str | dict | None = None,
          on_vulkan: str | dict | None = None, nodes: Iterable[str] | None = None, what: str = "",
          output_names: list[str] | None = None) -> dict:
    """Run `blob` on every device (one session each, every feed in turn: reused buffers must hold nothing
    stale) with identical bits, equal to `want` when given: the outputs for one feed (a dict), a list of them
    for a list of feeds, or a function feed -> outputs. Then assert the placement: cpu sessions as `where`,
    vulkan sessions as `on_vulkan` (default: `where`), see `assert_placed`. Returns the sessions."""
    if isinstance(feeds, dict):
        feeds, want = [feeds], (want if want is None or callable(want) else [want])
    per_device = sessions(blob, DEVICES)
    for k, feed in enumerate(feeds):
        w = want(feed) if callable(want) else None if want is None else want[k]
        run_sessions(per_device, feed, want=w, what=f"{what} feed {k}".strip(), output_names=output_names)
    assert_placed(per_device["cpu"], "cpu", where, nodes)
    assert_placed(per_device["vulkan"], "vulkan", where if on_vulkan is None else on_vulkan, nodes)
    return per_device


def refused(blob: bytes, feed: dict | None, culprit: str, name: str = NAME, exc=ValueError) -> None:
    """Every device refuses the model (at load or at run) with `exc`, the message naming the node `name` and
    matching the regular expression `culprit`."""
    errors = refused_devices(blob, feed, exc, match=culprit)
    for e in errors:
        assert name in str(e), f"the error does not name node {name!r}: {e}"


def cross(**axes) -> list[dict]:
    """Every combination of the given values, as dicts (the ncnn-style tables: kernel x stride x pad x size)."""
    keys = list(axes)
    return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(axes[k] for k in keys))]


def one_node(op: str, ins: Sequence, dtype=np.uint8, opset: int = 13, n_out: int = 1, domain: str | None = None,
             out_dtype=None, **attrs) -> bytes:
    """A one-node model named NAME: `ins` items are an activation shape (a tuple: graph input x<i> of `dtype`), an
    array (an initializer c<i>) or None (an empty input); outputs y (or y0, y1, ...) of `out_dtype` (default
    `dtype`)."""
    names, inputs, consts = [], {}, {}
    for i, v in enumerate(ins):
        if v is None:
            names.append("")
        elif isinstance(v, tuple):
            names.append(f"x{i}")
            inputs[f"x{i}"] = (dtype, v)
        else:
            names.append(f"c{i}")
            consts[f"c{i}"] = np.asarray(v)
    outs = ["y"] if n_out == 1 else [f"y{k}" for k in range(n_out)]
    return model([node(op, names, outs, domain=domain, **attrs)], inputs, consts,
                 {o: out_dtype or dtype for o in outs}, opset)


def feed_of(blob: bytes, seed: int) -> dict[str, np.ndarray]:
    """Seeded full-range values for every graph input of `blob` (8-bit, or float32 in [-3, 3])."""
    import onnx

    m = onnx.load_model_from_string(blob)
    rng = np.random.default_rng(seed)
    dts = {v: k for k, v in ELEM.items()}
    out = {}
    for vi in m.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dt = dts[t.elem_type]
        out[vi.name] = rng.uniform(-3, 3, shape).astype(dt) if dt.kind == "f" else qrand(rng, shape, dt)
    return out


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def check_vs_ort(blob: bytes, seeds: Sequence[int] = (0, 1), *, optimize: bool = False, config: dict | None = None,
                 **kw) -> dict:
    """`check` on seeded feeds (`feed_of`), each against ONNX Runtime's outputs; keywords as `check`'s."""
    feeds = [feed_of(blob, s) for s in seeds]
    return check(blob, feeds, [ort_run(blob, f, optimize=optimize, config=config) for f in feeds], **kw)


def check_vs_litert(blob: bytes, feeds: dict | Sequence[dict], **kw) -> dict:
    """`check` of a .tflite model against ai-edge-litert's default interpreter on each feed (every output, by the
    names vkinfer gives them); keywords as `check`'s."""
    import vkinfer
    from vkinfer.testing.tflite_zoo import litert_run

    names = [o.name for o in vkinfer.InferenceSession(blob, device="reference").get_outputs()]
    feeds = [feeds] if isinstance(feeds, dict) else list(feeds)

    def want(feed):
        got = litert_run(blob, feed)
        assert sorted(got) == sorted(names), (sorted(got), names)
        return [got[n] for n in names]
    return check(blob, feeds, want, output_names=names, **kw)
