"""The CPU cost model's kernel paths (costs.path_keys, DeviceProfile.paths/u8s8/links): which path a node takes
against the kernel the C library really runs, per-path fits, and profiles without paths."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from vkinfer.dispatch.calibration.fit import fit_class, fit_paths
from vkinfer.dispatch.calibration.grid import g_conv, g_qgemm
from vkinfer.dispatch.calibration.measure import probe_u8s8
from vkinfer.dispatch.costs import Work, node_work, path_keys
from vkinfer.dispatch.profile import ClassModel, Link, device_from_json, load_profile

H100 = Path(__file__).resolve().parents[2] / "bench/profiles/nvidia-h100-80gb-hbm3-nvidia-580.159.04.json"


def _kernel_and_work(built):
    """(the native conv operator's kernel name, the node's Work) of a one-node grid graph compiled for the CPU."""
    from vkinfer.compiler.plan import CpuBackend, Plan

    g, feed, name = built
    plan = Plan(g, feed, CpuBackend(None))
    [op] = [n for n in plan.segments[0].runner.ops() if n.startswith("conv:")]
    node = next(n for n in plan.g.nodes if n.name == name)
    return op.split(":", 1)[1], node_work(plan.g, plan.info, node)


@pytest.mark.parametrize("build", [
    lambda wide: g_conv(16, (8, 8), 16, 3, wide=wide),                   # conv, dense
    lambda wide: g_conv(16, (8, 8), 16, 3, 1, 16, wide=wide),            # depthwise
    lambda wide: g_conv(32, (8, 8), 32, wide=wide),                      # gemm
    lambda wide: g_qgemm(64, 12, wide=wide),                             # gemv
])
def test_the_weight_path_is_the_kernel_the_c_library_runs(build):
    # Oracle: the kernel name the native convolution reports (conv.c: "<variant>-u8s8" on the u8s8 path).
    u8s8 = probe_u8s8()
    for wide in (False, True):
        kernel, work = _kernel_and_work(build(wide))
        keys = path_keys(work, u8s8)
        assert keys and keys[-1].startswith(work.op_class + "/"), keys
        assert ("/u8s8" in keys[-1]) == kernel.endswith("u8s8"), (wide, kernel, keys)
    assert work.wlo < -64 or work.whi > 127  # the wide weights leave every variant's u8s8 range


def test_path_keys_by_shape_and_op():
    rng = {"igemm": (-128, 127), "depthwise": (-64, 64)}
    w = Work("conv", 64, 16, 144, 1000, op="QLinearConv", wlo=-100, whi=100)
    assert path_keys(w, rng) == ["conv/u8s8/dense", "conv/u8s8"]
    assert path_keys(dataclasses.replace(w, groups=4), rng)[0] == "conv/u8s8/grouped"
    assert path_keys(dataclasses.replace(w, dilated=True), rng)[0] == "conv/u8s8/dilated"
    dw = Work("depthwise", 64, 16, 9, 10, op="QLinearConv", wlo=-100, whi=100)
    assert path_keys(dw, rng) == ["depthwise/i16/full", "depthwise/i16"]
    assert path_keys(dataclasses.replace(dw, m=24), rng)[0] == "depthwise/i16/tail"
    assert path_keys(dataclasses.replace(w, whi=128), rng)[-1] == "conv/i16"
    assert path_keys(w, {}) == ["conv/i16/dense", "conv/i16"]  # a variant without u8s8 kernels
    assert path_keys(w, None) == []  # not measured: the class model
    assert path_keys(Work("elementwise", bytes=30, out_elems=10, op="Add"), None) == ["elementwise/Add"]


def test_fit_paths_separates_the_paths_and_falls_back_to_the_class():
    # Two weight paths of one class, the int16 one 2.5x slower per MAC: each path gets its own three-term model
    # (PATH_FULL_SAMPLES sizes each).
    rng = {"igemm": (-128, 127)}
    fast = [Work("gemm", r, 32, 32, r * 64, r * 32, op="QLinearConv", wlo=-60, whi=60)
            for r in (64, 128, 256, 512, 1024, 4096)]
    slow = [dataclasses.replace(w, wlo=-100, whi=155) for w in fast]
    samples = [(w, 100 + 0.004 * w.macs) for w in fast] + [(w, 100 + 0.01 * w.macs) for w in slow]
    cls = {"gemm": fit_class(samples, (1, 1))}
    paths = fit_paths(samples, cls, rng, (1, 1))
    assert set(paths) == {"gemm/u8s8", "gemm/i16"}
    for w, t in samples:
        m = paths[path_keys(w, rng)[0]]
        assert m.ns(w, (1, 1)) == pytest.approx(t, rel=0.05)
    # Fewer than MIN_SAMPLES of a path: no model for it (the class predicts it).
    assert "gemm/i16" not in fit_paths(samples[:6], cls, rng, (1, 1))


def test_a_profile_without_paths_predicts_by_class():
    # The H100 profile predates kernel paths: it loads, and every node takes its class model.
    prof = load_profile(H100)
    cpu = prof.entry("cpu", 16)
    assert cpu.paths == {} and cpu.u8s8 is None and cpu.links == {}
    w = Work("conv", 1024, 32, 144, 50_000, op="QLinearConv", wlo=-100, whi=155)
    assert cpu.node_ns(w) == cpu.classes["conv"].ns(w, cpu.tile)
    assert cpu.link("upload", np.float32) is cpu.upload


def test_paths_links_and_ranges_round_trip_and_are_checked():
    prof = load_profile(H100)
    e = dataclasses.replace(prof.entry("cpu", 1), paths={"conv/i16": ClassModel(5.0, 0.01, 0.0, 9, 0.1, (4, 16))},
                            u8s8={"igemm": (-128, 127)}, links={"upload:float32": Link(0.0, 0.0)})
    back = device_from_json(e.to_json())
    assert back.paths == e.paths and back.u8s8 == e.u8s8 and back.links == e.links
    w = Work("conv", 1024, 32, 144, 50_000, op="QLinearConv", wlo=-100, whi=155)
    assert back.node_ns(w) == pytest.approx(5.0 + 0.01 * w.tiled_macs((4, 16)))
    assert back.link("upload", np.float32).ns(10**6) == 0.0 and back.link("upload", np.uint8) is back.upload
    for field, bad, what in (("paths", {"convolution/x": e.to_json()["paths"]["conv/i16"]}, "paths"),
                             ("u8s8", {"igemm": [5, 1]}, "u8s8"), ("links", {"sideways:int8": {}}, "links")):
        d = e.to_json()
        d[field] = bad
        with pytest.raises(ValueError, match=what):
            device_from_json(d)


def _tflite_tiny_cnn(dtype: str):
    """tflite_zoo's tiny_cnn as imported (QUANTIZE of a float NHWC input, then its Transpose) and a feed."""
    from vkinfer.model.op_table import OPS
    from vkinfer.model.tflite_import import import_tflite
    from vkinfer.testing import tflite_zoo

    g = import_tflite(tflite_zoo.tiny_cnn(0, dtype=dtype), {op: None for op in OPS})
    for node in g.nodes:
        node.attrs["_static"] = all(not n or n in g.consts for n in node.inputs[1:])
    return g, {t.name: np.zeros(t.shape, t.dtype) for t in g.inputs}


@pytest.mark.parametrize("name", ["resnet8", "tiny_conv", "ds_cnn_kws", "mobilenet_v1_vww", "float_mlp",
                                  "tflite tiny_cnn"])
def test_the_transposes_costed_free_on_the_cpu_are_the_ones_its_segment_folds(name):
    # Oracle: the compiled CPU segment's layers (vkinfer/cpu/segment.py leaves out a Transpose its edge
    # conversion or a quantize does). The dispatcher plans from the CPU lowering's layers, as a device="auto"
    # session's.
    from vkinfer.compiler.plan import CpuBackend, Plan
    from vkinfer.dispatch import Dispatcher
    from vkinfer.dispatch.calibration.workload import field_workload
    from vkinfer.dispatch.profile import Profile

    disp = Dispatcher(["cpu"], Profile([load_profile(H100).entry("cpu", 1)]), 1)
    for dtype in ("int8", "uint8"):
        g, feed = _tflite_tiny_cnn(dtype) if name == "tflite tiny_cnn" else field_workload(name, dtype)
        cpu = CpuBackend(None)
        plan = Plan(g, feed, cpu, resolve=lambda d, cpu=cpu: cpu, auto_place=lambda g, info, can, given: disp.place(
            g, info, can, given))
        [seg] = plan.segments
        live = {lay.node.name for lay in seg.runner.layers}
        folded = {n.name for n in plan.g.nodes if n.op == "Transpose" and n.name not in live}
        aliases = {lay.node.name for lay in seg.runner.layers if lay.alias}
        free = {d.node for d in plan.auto.decisions if d.op == "Transpose" and d.costs["cpu"] == 0} - aliases
        assert free == folded, (name, dtype)


def test_an_untrusted_device_class_follows_the_cpus_kernel_path():
    # with_fallbacks predicts a device's untrusted class as the CPU's time times the device's relative speed:
    # the CPU's time through its kernel path (an int16 convolution), not its class model.
    from vkinfer.dispatch.profile import with_fallbacks

    prof = load_profile(H100)
    cpu = dataclasses.replace(prof.entry("cpu", 1), u8s8={"igemm": (-128, 127)},
                              paths={"conv/i16": ClassModel(5000.0, 0.05, 0.0, 9, 0.1)})
    vk = prof.entry("vulkan:0")
    bad = dataclasses.replace(vk, classes={**vk.classes, "conv": dataclasses.replace(vk.classes["conv"], error=0.9)})
    entry, factors = with_fallbacks(bad, cpu)
    w = Work("conv", 1024, 32, 144, 50_000, op="QLinearConv", wlo=-100, whi=155)
    assert cpu.node_ns(w) != cpu.classes["conv"].ns(w, cpu.tile)
    assert entry.node_ns(w) == pytest.approx(cpu.node_ns(w) * factors["conv"])
