"""A compiled session warns once (vkinfer.HostNodeWarning, a category users can filter) when any node runs on
the host, naming the count and the ops; never for the reference device or for nodes placed on the host by hand.

Which ops run on the host changes as kernels are added, so the host node here is made by refusing one node's
lowering on every backend (the path a real refusal takes: compiler/plan.py Plan._lower returns no layer and a
reason); small_qmodel is otherwise native on every device.
"""

import inspect
import warnings

import numpy as np
import onnx
import pytest
from support.agree import run_devices
from support.small_model import small_qmodel

import vkinfer
from vkinfer.compiler.plan import Plan
from vkinfer.session import HostNodeWarning

REASON = "refused by tests/api/test_host_warning.py"


@pytest.fixture
def refuse_flat(monkeypatch):
    """Every backend refuses small_qmodel's Reshape node ("flat"), with REASON."""
    lower = Plan._lower

    def refusing(ctx, node, be):
        if node.name == "flat":
            return None, f"{be.name}: {REASON}"
        return lower(ctx, node, be)
    monkeypatch.setattr(Plan, "_lower", staticmethod(refusing))


def _feed(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)}


def _host_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, HostNodeWarning)]


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_warns_once_naming_count_and_ops(refuse_flat, device):
    want = vkinfer.InferenceSession(small_qmodel(), device="reference").run(None, _feed())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sess = vkinfer.InferenceSession(small_qmodel(), device=device)
        for seed in range(3):
            got = sess.run(None, _feed(seed))
    (w,) = _host_warnings(record)
    assert issubclass(w.category, RuntimeWarning)
    msg = str(w.message)
    assert "1 node(s)" in msg and "Reshape x1" in msg and f"device={device!r}" in msg and "vkinfer info" in msg
    assert w.filename == __file__  # pointed at the caller's line, not inside vkinfer
    assert sess.placement["flat"] == "host"
    np.testing.assert_array_equal(sess.run(None, _feed())[0], want[0])
    assert got[0].shape == want[0].shape


def test_no_warning_when_every_node_is_native():
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostNodeWarning)
        for device in ("cpu", "vulkan"):
            sess = vkinfer.InferenceSession(small_qmodel(), device=device)
            sess.run(None, _feed())
            assert "host" not in sess.placement.values()


def test_no_warning_for_reference_or_placement_by_hand(refuse_flat):
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostNodeWarning)
        vkinfer.InferenceSession(small_qmodel(), device="reference").run(None, _feed())
    # Placed on the host by hand: asked for, not a surprise (the refusal fixture is not needed for that).
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostNodeWarning)
        run_devices(small_qmodel(), _feed(), devices=("cpu", "vulkan"), placement={"flat": "host"})


def test_users_can_filter_it(refuse_flat):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", HostNodeWarning)
        vkinfer.InferenceSession(small_qmodel(), device="cpu").run(None, _feed())
    assert not _host_warnings(record)


def test_symbolic_shapes_warn_at_the_first_run_once(refuse_flat):
    """A symbolic input dimension: the plan is compiled on the first run, so the warning comes from that run (and
    names its line), once."""
    m = onnx.load_from_string(small_qmodel())
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sess = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
        assert not _host_warnings(record)
        sess.run(None, _feed())  # the line the warning names
        line = inspect.currentframe().f_lineno - 1
        sess.run(None, _feed(1))
    (w,) = _host_warnings(record)
    assert (w.filename, w.lineno) == (__file__, line)
