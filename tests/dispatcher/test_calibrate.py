"""vkinfer.dispatch.calibration (and calibrate.ensure_profile): the cost-model fit and real quick calibrations of
this machine's devices.

- fit_class recovers known coefficients from exact samples (any tile, a class without MACs too), stays close
  on noisy ones, and refuses what cannot be fitted (too few samples, one size only, non-positive times);
- the grids give every op class enough shapes on every device kind and mode, and each shape compiles to the
  class it is listed under;
- a quick CPU calibration is a valid profile entry with every class, and predicts a shape it never timed within
  a factor of 2 of a fresh measurement;
- a quick calibration of the host and of lavapipe are valid entries (no Vulkan device fails the test, naming
  what to install);
- the default whole-model workload (calibration's own graphs) is the field zoo's .tflite models as imported: the
  same nodes, attributes, weights and input, the same native operators and kernels.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from vkinfer.dispatch import calibrate
from vkinfer.dispatch.calibration import calibrate_device
from vkinfer.dispatch.calibration.fit import CPU_TILES, MIN_SAMPLES, VULKAN_TILE, fit_class
from vkinfer.dispatch.calibration.grid import GRID, MODES, Shape, g_conv, grid
from vkinfer.dispatch.calibration.measure import MODEL_SAMPLES, _cpu_plan, _measure_cpu, _measure_vulkan, _op_split
from vkinfer.dispatch.calibration.workload import field_workload
from vkinfer.dispatch.costs import CLASSES, Work
from vkinfer.dispatch.profile import device_from_json

SUITE_CACHE = Path(os.environ["VKINFER_CACHE"]).resolve()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """$VKINFER_CACHE in tmp_path, with the suite's SPIR-V and pipeline caches linked in (a test about calibration
    should not also recompile every shader)."""
    for sub in ("spirv", "pipelines"):
        (SUITE_CACHE / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub).symlink_to(SUITE_CACHE / sub, target_is_directory=True)
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    return tmp_path


def _works(op_class: str, n: int, seed: int = 0) -> list[Work]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        rows, m, k = (int(v) for v in rng.integers(1, 400, 3))
        out.append(Work(op_class, rows, m, k, int(rng.integers(100, 10**6)), rows * m))
    return out


@pytest.mark.parametrize("tile", [(1, 1), (32, 32), (4, 32)])
def test_fit_recovers_exact_coefficients(tile):
    fixed, per_mac, per_byte = 800.0, 0.012, 0.35
    samples = [(w, fixed + per_mac * w.tiled_macs(tile) + per_byte * w.bytes) for w in _works("gemm", 12)]
    m = fit_class(samples, tile)
    assert (m.fixed_ns, m.ns_per_mac, m.ns_per_byte) == pytest.approx((fixed, per_mac, per_byte), rel=1e-6)
    assert m.samples == 12 and m.error < 1e-9


def test_fit_of_noisy_samples_predicts_within_the_noise():
    rng = np.random.default_rng(1)
    works = _works("conv", 40, seed=2)
    true = [500.0 + 0.02 * w.macs + 0.1 * w.bytes for w in works]
    m = fit_class([(w, t * rng.uniform(0.95, 1.05)) for w, t in zip(works, true, strict=True)], (1, 1))
    pred = np.array([m.ns(w, (1, 1)) for w in works])
    assert np.max(np.abs(pred / np.array(true) - 1)) < 0.05
    assert 0 < m.error < 0.05


def test_fit_of_a_class_without_macs_uses_bytes():
    works = [Work("move", bytes=b, out_elems=b) for b in (64, 1_000, 30_000, 400_000)]
    m = fit_class([(w, 300.0 + 0.05 * w.bytes) for w in works], (1, 1))
    assert m.ns_per_mac == 0.0
    assert (m.fixed_ns, m.ns_per_byte) == pytest.approx((300.0, 0.05), rel=1e-6)


def test_fit_coefficients_are_never_negative():
    # Time falling with size is not a cost model: the fit clamps at zero instead of inventing negative rates.
    works = _works("gemm", 6, seed=3)
    m = fit_class([(w, 1e6 / (1 + w.macs)) for w in works], (1, 1))
    assert min(m.fixed_ns, m.ns_per_mac, m.ns_per_byte) >= 0.0


def test_fit_refuses_what_it_cannot_fit():
    w = _works("gemm", 3)
    with pytest.raises(ValueError, match="at least 3 samples"):
        fit_class([(w[0], 10.0), (w[1], 20.0)], (1, 1))
    with pytest.raises(ValueError, match="at least 3 samples"):
        fit_class([], (1, 1))
    with pytest.raises(ValueError, match="same MACs and bytes"):
        fit_class([(w[0], 10.0), (w[0], 11.0), (w[0], 12.0)], (1, 1))
    with pytest.raises(ValueError, match="positive and finite"):
        fit_class([(w[0], 10.0), (w[1], 0.0), (w[2], 12.0)], (1, 1))
    with pytest.raises(ValueError, match="positive and finite"):
        fit_class([(w[0], 10.0), (w[1], float("nan")), (w[2], 12.0)], (1, 1))


def test_every_grid_fits_every_class():
    for kind in ("cpu", "vulkan", "host"):
        for mode in MODES:
            shapes = grid(kind, mode)
            for c in CLASSES:
                n = sum(1 for s in shapes if s.op_class == c)
                assert n >= MIN_SAMPLES, (kind, mode, c, n)
                assert n <= 24, (kind, mode, c, n)  # conv: dense, grouped, dilated and int16 paths
    assert len({s.label for s in GRID}) == len(GRID)
    with pytest.raises(ValueError, match="mode"):
        grid("cpu", "slow")


def test_calibrate_device_refuses_bad_arguments():
    with pytest.raises(ValueError, match="cannot calibrate device"):
        calibrate_device("gpu")
    with pytest.raises(ValueError, match="cannot calibrate device"):
        calibrate_device("cpu:avx2")
    with pytest.raises(ValueError, match="mode"):
        calibrate_device("cpu", mode="slow")
    with pytest.raises(ValueError, match="threads"):
        calibrate_device("cpu", threads=0)


def _structure(g) -> tuple[list, list]:
    """A graph without its names and activation values: per node the op, the attributes and each input as the
    node that produced it, the graph input (its shape and dtype) or a constant's shape and dtype; the outputs."""
    made = {t.name: ("input", tuple(t.shape), np.dtype(t.dtype)) for t in g.inputs}
    nodes = []
    for k, n in enumerate(g.nodes):
        ins = [("const", g.consts[i].shape, g.consts[i].dtype) if i in g.consts else made[i] for i in n.inputs]
        nodes.append((n.op, sorted((a, repr(v)) for a, v in n.attrs.items() if not a.startswith("_")), ins))
        made.update({o: ("node", k, j) for j, o in enumerate(n.outputs)})
    return nodes, [(made[t.name], t.name, tuple(t.shape), np.dtype(t.dtype)) for t in g.outputs]


@pytest.mark.parametrize("name", [n for n in MODEL_SAMPLES["full"] if n not in ("mobilenet_v2", "float_mlp")])
def test_the_default_workload_is_the_field_models(name):
    # The calibration builds its whole models itself (calibration/workload.py, no test fixture in the runtime);
    # what it times must stay the field zoo's models: the nodes the TFLite importer gives their .tflite files, the
    # same weights (a CPU layer's kernel depends on their range), the same input, the same native operators.
    from vkinfer.dispatch.calibration.measure import _whole_model
    from vkinfer.model.op_table import OPS
    from vkinfer.model.tflite_import import import_tflite
    from vkinfer.testing import field_zoo

    for dtype in ("int8", "uint8"):
        g, feed = field_workload(name, dtype)
        blob = (field_zoo.FIELD_MODELS.get(name) or getattr(field_zoo, name))(0, dtype)
        ref = import_tflite(blob, {op: None for op in OPS})
        assert _structure(g) == _structure(ref), (name, dtype)
        for mine, theirs in zip(g.nodes, ref.nodes, strict=True):
            if mine.op in ("QLinearConv", "com.microsoft:QGemm"):
                for i in (3, 4, 5):  # weights, their scales and zero points
                    np.testing.assert_array_equal(g.consts[mine.inputs[i]], ref.consts[theirs.inputs[i]])
        np.testing.assert_array_equal(feed["input"], field_zoo.field_inputs(name, 0, dtype)["input"])
        assert _whole_model(g, 1)[2].ops() == _whole_model(blob, 1)[2].ops(), (name, dtype)
    with pytest.raises(ValueError, match="dtype"):
        field_workload(name, "int16")


def test_op_split_tells_the_node_from_the_edge_conversions():
    # A channel shuffle: its reshapes are aliases, the Transpose is one native transpose between the edges'.
    shuffle = next(s for s in GRID if s.label == "shuffle 28x28x116 g2")
    plan, _, _ = _cpu_plan(shuffle)
    runner = plan.segments[0].runner
    n_in, counts, n_out = _op_split(runner)
    assert [n.split(":")[0] for n in runner.ops()] == ["transpose"] * 3
    # The segment folds the alias into the Transpose's move (cpu/segment.py _fold_moves): 2 layers, 1 operator.
    assert (n_in, sorted(counts), n_out) == (1, [0, 1], 1)


def test_quick_cpu_calibration(fresh_cache):
    lines = []
    entry = calibrate_device("cpu", threads=1, mode="quick", log=lines.append)
    assert device_from_json(entry.to_json()) == entry
    assert (entry.device, entry.kind, entry.threads) == ("cpu", "cpu", 1)
    assert set(entry.classes) == set(CLASSES)
    assert entry.classes["gemm"].ns_per_mac > 0
    assert entry.tile in CPU_TILES and entry.tail >= 1.0
    assert 0 < entry.segment_ns < 1e6 and entry.upload.ns_per_byte > 0
    assert any("calibrated in" in line for line in lines)
    # Shapes no quick grid times (a 1x1 convolution, a depthwise and a 3x3 one), measured now: the predictions
    # are within a factor of 2.
    held_out = [Shape("gemm", "held-out pw 20x20 40->120", g_conv, (40, (20, 20), 120)),
                Shape("depthwise", "held-out dw 20x20x64", g_conv, (64, (20, 20), 64, 3, 1, 64)),
                Shape("conv", "held-out 3x3 12x12 24->48", g_conv, (24, (12, 12), 48, 3))]
    quick = {s.args for s in grid("cpu", "quick")}
    assert not any(s.args in quick for s in held_out)
    # Noise on a shared machine (the other test worker on the second core) only ever slows a measurement down: CI
    # once timed the 1x1 held-out at 13.4 us against 6.3 predicted, in one round. A shape passes when one of up to
    # three rounds lands within the factor; a wrong model misses in every round.
    best: dict[str, tuple[float, float, float]] = {}
    for _ in range(3):
        samples, _ = _measure_cpu(held_out, 1, "quick")
        for s in samples:
            assert s.work.op_class == s.shape.op_class
            ratio = entry.node_ns(s.work) / s.ns
            old = best.get(s.shape.label)
            if old is None or abs(np.log(ratio)) < abs(np.log(old[0])):
                best[s.shape.label] = (ratio, entry.node_ns(s.work), s.ns)
        if all(0.5 < r < 2.0 for r, _, _ in best.values()):
            break
    assert len(best) == len(held_out)
    for label, (ratio, predicted, measured) in best.items():
        assert 0.5 < ratio < 2.0, (label, predicted, measured)


def test_quick_host_calibration(fresh_cache):
    entry = calibrate_device("host", mode="quick")
    assert device_from_json(entry.to_json()) == entry
    assert (entry.device, entry.kind, entry.threads, entry.segment_ns) == ("host", "host", 1, 0.0)
    assert entry.upload.ns(10**6) == 0 and entry.download.ns(10**6) == 0
    assert set(entry.classes) == set(CLASSES)


def _lavapipe() -> int:
    from vkinfer import _vk
    from vkinfer.errors import VulkanUnavailableError

    try:
        infos = _vk.devices()
    except VulkanUnavailableError as e:
        pytest.fail(f"Vulkan is unavailable ({e}): install mesa-vulkan-drivers (lavapipe) and libvulkan1",
                    pytrace=False)
    found = [d.index for d in infos if "llvmpipe" in d.name.lower()]
    if not found:
        pytest.fail(f"no lavapipe among the Vulkan devices {[d.name for d in infos]}: install mesa-vulkan-drivers",
                    pytrace=False)
    return found[0]


def test_quick_vulkan_calibration_of_lavapipe(fresh_cache):
    index = _lavapipe()
    shapes = [s for s in grid("vulkan", "quick") if s.op_class == "elementwise"]
    from vkinfer import _vk

    dev = _vk.get_device(index)
    samples, segment = _measure_vulkan(dev, shapes, "quick")
    assert [s.shape for s in samples] == shapes and all(s.ns > 0 and s.tail >= 1.0 for s in samples)
    model = fit_class([(s.work, s.ns) for s in samples], VULKAN_TILE)
    assert model.fixed_ns + model.ns_per_mac + model.ns_per_byte > 0
    assert segment > 0
    # The whole quick calibration: a valid entry with every class.
    entry = calibrate_device(f"vulkan:{index}", mode="quick")
    assert device_from_json(entry.to_json()) == entry
    assert (entry.device, entry.kind, entry.threads, entry.tile) == (f"vulkan:{index}", "vulkan", 1, (32, 32))
    assert set(entry.classes) == set(CLASSES)
    assert entry.identity["name"] == dev.info.name
    assert entry.upload.ns_per_byte > 0 and entry.download.ns_per_byte > 0


def _fake_entry(device: str, threads: int, gemv_error: float = 0.1):
    """A made-up entry of `device` with this machine's identity (what ensure_profile checks), 20x slower than the
    CPU on a GPU, whose gemv fit has `gemv_error`."""
    from vkinfer.dispatch.machine import vulkan_devices
    from vkinfer.dispatch.profile import ClassModel, DeviceProfile, Link, cpu_identity, host_identity

    kind = device.partition(":")[0]
    ident = {"cpu": cpu_identity, "host": host_identity}.get(kind, lambda: next(
        d["identity"] for d in vulkan_devices() if d["device"] == device))()
    k = 20.0 if kind == "vulkan" else 1.0
    classes = {c: ClassModel(500.0 * k, 0.01 * k, 0.05 * k, 5, 0.1) for c in CLASSES}
    if kind == "vulkan":
        classes["gemv"] = ClassModel(0.0, 1 / 10303, 0.0, 4, gemv_error)  # lavapipe's once (issue 23)
    return DeviceProfile(device, kind, threads, ident, 18_700.0 if kind == "vulkan" else 1_200.0 * (kind == "cpu"),
                         Link(300.0, 0.4), Link(300.0, 0.4), (32, 32) if kind == "vulkan" else (1, 1), 1.1, classes)


def test_calibrate_prints_a_summary_and_flags_an_untrusted_fit(fresh_cache, monkeypatch, capsys):
    """Issue 23: `vkinfer calibrate` printed every sample and a table per device, including "gemv 10303 GMAC/s, fit
    error 100%" for lavapipe as if it were a number to believe. By default: a few lines per device, the untrusted
    fit flagged with what auto does instead; --verbose: the samples and the full tables."""
    from vkinfer.cli import main

    def fake(device, threads=1, mode="quick", log=None):
        if log:
            log(f"  gemv        made-up sample {threads}                      5.51 us")
            log(f"{device} (threads {threads}): calibrated in 0.01 s")
        return _fake_entry(device, threads, gemv_error=1.0)
    monkeypatch.setattr(calibrate, "calibrate_device", fake)
    assert main(["calibrate", "--threads", "1"]) == 0
    out, err = capsys.readouterr()
    vk = [line for line in out.splitlines() if line.startswith("vulkan:")]
    assert vk, out
    lines = out.strip().splitlines()
    assert len(lines) <= 4 * 3 + 2, out  # cpu, each Vulkan device, host: a few lines each
    assert "made-up sample" not in err and "calibrated in 0.01 s" in err
    assert "fit error" not in out.replace("untrusted fit: gemv (fit error 100%", "")  # no table of errors
    flagged = [line for line in lines if "untrusted fit" in line]
    assert len(flagged) == len(vk) and all(
        "untrusted fit: gemv (fit error 100% over 4 shapes, above 50%" in line and "auto predicts gemv here at "
        "20x the CPU's time (1 thread)" in line for line in flagged), out
    trusted = lines[lines.index(vk[0]) + 2]  # the throughput line leaves the untrusted class out
    assert "gemm " in trusted and "gemv" not in trusted, trusted
    assert re.search(r"per segment 18\.7 us \(submit and wait\)", out) and "per segment 1.2 us (one native call)" in out

    assert main(["calibrate", "--threads", "1", "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert "made-up sample" in err and "fit error" in out and "100%" in out  # describe()'s tables, everything
