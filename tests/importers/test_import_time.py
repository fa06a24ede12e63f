"""Importing in linear time, at a small cost per node (issue 26, item 3): the TFLite reader reads the flatbuffer
directly (vkinfer/model/tflite_import/fastread.py) with the values, and on corrupt files the errors, of the
`tflite` classes it replaced; the ONNX import's passes and the memory planner take time proportional to the
graph (compared on chains of n and 4n layers).

Times are this process's CPU time (time.process_time), which other processes on a loaded machine do not inflate."""

from __future__ import annotations

import time

import numpy as np
import pytest
from support.load_chains import CHAINS, chain_model

from importers.test_mutations import _tflite_bases, _tflite_bytes_case, _tflite_struct_case
from vkinfer.model.tflite_import import reader


def _canon(x):
    """`x` (parsed subgraphs, metadata) as comparable plain values (arrays by dtype, shape and bytes)."""
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, reader.Tensor):
        return ("tensor", x.name, x.shape, x.dtype, x.data, _canon(x.scale), _canon(x.zero_point), x.qdim)
    if isinstance(x, list | tuple):
        return tuple(_canon(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _canon(v)) for k, v in x.items()))
    if isinstance(x, float) and x != x:
        return "nan"
    if type(x).__name__ == "Table":  # an op's options: where they are in the file
        return ("table", x.Pos, len(x.Bytes))
    return x if not isinstance(x, type) else x.__name__


def _read(blob: bytes, fast: bool, monkeypatch) -> tuple:
    """parse_all and file_meta of `blob` (the outcome: values, or the error's type and message); `fast`: False
    reads with the tflite classes alone (the former reader). Also whether the fast reader's fields were used."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(reader, "_parse_fast", lambda *a: 1 / 0)
        try:
            subgraphs = reader.parse_all(blob)
        except Exception as e:  # noqa: BLE001 - the outcome compared
            return ("error", type(e).__name__, str(e)), False
        tensors, _, ins, outs = subgraphs[0]
        try:
            meta = reader.file_meta(blob, ins, outs, [f"i{k}" for k in ins], [f"o{k}" for k in outs], [],
                                    tensors if fast else None)
        except Exception as e:  # noqa: BLE001
            meta = ("error", type(e).__name__, str(e))
    used = all(t.raw is not None for s in subgraphs for t in s[0])
    return _canon((subgraphs, meta)), used


def test_tflite_fast_reader_reads_what_the_tflite_classes_read(monkeypatch):
    """The zoo's TFLite models and a chain are read by the fast reader, with the former reader's values; 120
    mutants of them (bytes and fields changed: tests/importers/test_mutations.py) read the same or fail with the
    same error (the fast reader gives up on anything odd, and the classes read the file again)."""
    bases = _tflite_bases()
    for name, blob in [*bases.items(), ("chain", chain_model("tflite_add", 30))]:
        got, used = _read(blob, True, monkeypatch)
        assert used, f"{name}: the fast reader gave up"
        assert got == _read(blob, False, monkeypatch)[0], name
    fast_used = 0
    for seed in range(60):
        for case in (_tflite_bytes_case, _tflite_struct_case):
            what, blob = case(bases, seed)
            got, used = _read(blob, True, monkeypatch)
            assert got == _read(blob, False, monkeypatch)[0], f"{case.__name__}[{seed}] {what}"
            fast_used += used
    assert fast_used >= 40  # most mutants are read the fast way (those that are not exercise the fallback)


@pytest.mark.parametrize("bad", ["negative vtable", "vector past the end"])
def test_tflite_fast_reader_gives_up_on_offsets_outside_the_file(bad):
    """fastread raises (and the slow reader takes over) where an offset leaves the file, where the flatbuffers
    runtime raises too (a negative position) or would read on past its vector."""
    from vkinfer.model.tflite_import import fastread

    blob = bytearray(chain_model("tflite_add", 2))
    root = fastread._U32(blob, 0)[0]
    if bad == "negative vtable":
        blob[root:root + 4] = (root + 8).to_bytes(4, "little", signed=True)  # vtable at root - (root + 8) < 0
        with pytest.raises(fastread._Corrupt):
            fastread.buffers(bytes(blob), root)
    else:
        f = fastread._slots(bytes(blob), len(blob), root, 3)
        sg = fastread._tables(bytes(blob), len(blob), root + f[2])[0]
        tensors_at = sg + fastread._slots(bytes(blob), len(blob), sg, 1)[0]
        vec = tensors_at + fastread._U32(blob, tensors_at)[0]
        blob[vec:vec + 4] = (10 ** 8).to_bytes(4, "little")  # a length past the end of the file
        with pytest.raises(fastread._Corrupt):
            fastread.tensors(bytes(blob), sg)


# ---- ONNX import: passes skipped where they have nothing to do, the same graph ---------------------------------

def _graph_key(g) -> tuple:
    """A Graph as comparable values: its nodes (op, name, inputs, outputs, attributes but the NodeProto), inputs,
    outputs and constants."""
    def attrs(a: dict) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in a.items() if k != "_proto"))

    return (tuple((n.op, n.name, tuple(n.inputs), tuple(n.outputs), attrs(n.attrs)) for n in g.nodes),
            repr(g.inputs), repr(g.outputs), tuple(sorted((k, _canon(np.asarray(v))) for k, v in g.consts.items())),
            repr(g.meta))


def test_skipped_passes_would_change_nothing(monkeypatch):
    """passes.optimize runs a pass only where an op it rewrites is in the graph: on the mutation tests' ONNX models
    (QOperator, QDQ, float ops between them) and the load chains, running every pass gives the same graph."""
    from importers.test_mutations import _onnx_bases
    from vkinfer.model import passes
    from vkinfer.model.onnx_import import import_onnx
    from vkinfer.model.op_table import OPS

    supported = {name: None for name in OPS}
    models = {name: m.SerializeToString() for name, m in _onnx_bases().items()}
    models.update({kind: chain_model(kind, 12) for kind in ("transpose", "qlinear_add", "qlinear_conv", "qdq_conv")})
    for name, blob in models.items():
        gated = _graph_key(import_onnx(blob, supported))
        with monkeypatch.context() as m:
            m.setattr(passes._Ops, "__call__", lambda self, g, *ops: True)
            assert _graph_key(import_onnx(blob, supported)) == gated, name


def test_a_qlinear_chain_skips_the_qdq_passes(monkeypatch):
    """A QLinearAdd chain has no DequantizeLinear, QuantizeLinear, activation or convolution: the passes for those
    are not called (they cost a scan of every node each)."""
    from vkinfer.model import passes, qdq_rules
    from vkinfer.model.onnx_import import import_onnx
    from vkinfer.model.op_table import OPS

    def refuse(*a, **k):
        raise AssertionError("called")

    for mod, name in [(passes, "fold_qdq"), (passes, "drop_redundant_activations"), (passes, "fuse_activations"),
                      (passes, "_detach_float_activations"), (qdq_rules, "fold_matmul_to_float")]:
        monkeypatch.setattr(mod, name, refuse)
    g = import_onnx(chain_model("qlinear_add", 5), {name: None for name in OPS})
    assert [n.op for n in g.nodes] == ["com.microsoft:QLinearAdd"] * 5


def test_raw_initializers_read_as_numpy_helper_reads_them():
    """onnx_import._array's own path for raw data: numpy_helper.to_array's arrays for every type it takes, and its
    error (named as before) where the data does not fit the dims."""
    from onnx import TensorProto, numpy_helper

    from vkinfer.model.onnx_import import _RAW_DTYPES, _array

    rng = np.random.default_rng(3)
    for dt in _RAW_DTYPES.values():
        for shape in [(), (0,), (2, 3), (1, 4, 1)]:
            a = (rng.standard_normal(shape) * 100).astype(dt)
            t = numpy_helper.from_array(a, "w")
            assert t.HasField("raw_data")
            got, want = _array(t, "w"), numpy_helper.to_array(t)
            assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    bad = numpy_helper.from_array(np.zeros(6, np.uint8), "bad")
    bad.dims[:] = [4]
    with pytest.raises(ValueError, match=r"initializer 'bad': unreadable tensor \(data_type 2, dims \[4\]\): "
                                         r"ValueError: cannot reshape"):
        _array(bad, "initializer 'bad'")
    assert TensorProto.UINT8 in _RAW_DTYPES


def test_import_pauses_the_garbage_collector(monkeypatch):
    """The import and the memory planner run with the cyclic GC off (its full collections walk every object alive:
    1.2 s of a 100k-node chain's 3.2 s import), and leave it as they found it."""
    import gc

    from vkinfer.model import memory, passes
    from vkinfer.model.onnx_import import import_onnx
    from vkinfer.model.op_table import OPS
    from vkinfer.session import _import_model

    seen = []
    optimize = passes.optimize
    monkeypatch.setattr("vkinfer.model.onnx_import.optimize", lambda g: (seen.append(gc.isenabled()), optimize(g))[1])
    check = passes.check_graph
    monkeypatch.setattr("vkinfer.model.tflite_import.importer.check_graph",
                        lambda g: (seen.append(gc.isenabled()), check(g))[1])
    blob = chain_model("qlinear_add", 3)
    assert gc.isenabled()
    import_onnx(blob, {name: None for name in OPS})
    _import_model(chain_model("tflite_add", 3), 1 << 30, None)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        import_onnx(blob, {name: None for name in OPS})
        memory.plan_offsets([memory.Lifetime("a", 10, 0, 1)])
        assert not gc.isenabled()  # left off where it was off
    finally:
        gc.enable()


# ---- time: linear in the graph ------------------------------------------------------------------------------------

def _import_seconds(blob: bytes) -> float:
    """CPU seconds of the session's import of `blob` (the best of two)."""
    from vkinfer.session import _import_model

    best = float("inf")
    for _ in range(2):
        t0 = time.process_time()
        _import_model(blob, 1 << 30, None)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize("kind", CHAINS)
def test_import_scales_linearly(kind):
    """Import (parse, checks, graph passes) of 4x the layers in well under 16x (quadratic) the time: about 4x here
    (the cyclic GC's full collections, paused now, made a 100k-node import 1.5x slower per node than a 20k one)."""
    n = 120 if kind == "qdq_conv" else 600  # five nodes a layer
    small, large = _import_seconds(chain_model(kind, n)), _import_seconds(chain_model(kind, 4 * n))
    if large > 7 * small:  # a one-off stall: measured again
        small = min(small, _import_seconds(chain_model(kind, n)))
        large = min(large, _import_seconds(chain_model(kind, 4 * n)))
    assert large <= 7 * small, f"{kind}: {n} layers {small:.3f} s, {4 * n} layers {large:.3f} s"


def test_memory_plan_scales_linearly():
    """lifetimes + plan_offsets of a chain with a constant per layer (the QLinearAdd chain's segment): 4x the
    layers in well under 16x the time."""
    from vkinfer.model.memory import lifetimes, plan_offsets

    def seconds(n: int) -> float:
        events = [(i, [f"x{i}"], [f"x{i - 1}", f"b{i}"] if i else []) for i in range(n)]
        sizes = {f"x{i}": 60 for i in range(n)} | {f"b{i}": 60 for i in range(n)}
        best = float("inf")
        for _ in range(2):
            t0 = time.process_time()
            _, arena = plan_offsets(lifetimes(events, sizes, pinned=[f"b{i}" for i in range(1, n)]))
            best = min(best, time.process_time() - t0)
        assert arena == 64 * (n - 1) + 2 * 64  # the constants, then two chain tensors alive at once
        return best

    small, large = seconds(3000), seconds(12000)
    if large > 7 * small:
        small, large = min(small, seconds(3000)), min(large, seconds(12000))
    assert large <= 7 * small, f"3000 layers {small:.3f} s, 12000 layers {large:.3f} s"
