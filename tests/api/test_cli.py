"""The `vkinfer` command line: devices, info, run (with and without --input), and errors."""

import re

import numpy as np
from support.agree import run_devices
from support.small_model import small_qmodel

from vkinfer.cli import main


def test_devices(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "vulkan:0" in out and "type=" in out and "ISA variants: scalar" in out


def test_info(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())
    assert main(["info", str(path), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    # 9*9*8*27 + 9*9*16*8 + 10*1296 multiply-accumulates
    assert "4 nodes, 0.04 M MACs" in out and "2 x QLinearConv" in out and "runs on cpu" in out


def test_run_with_input_and_output(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())
    x = np.random.default_rng(3).integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--device", "vulkan", "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npz")]) == 0
    # what the command wrote: the bits of the reference, cpu and vulkan sessions on the same input
    run_devices(str(path), {"x": x}, want=[np.load(tmp_path / "y.npz")["y"]])


def test_run_random_input_notice_and_errors(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())
    assert main(["run", str(path), "--device", "cpu", "--output", str(tmp_path / "y.npz")]) == 0
    assert "notice: no --input given" in capsys.readouterr().err
    # the seeded random input the notice names (vkinfer/cli.py: default_rng(0)) gives every device's bits
    x = np.random.default_rng(0).integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
    run_devices(str(path), {"x": x}, want=[np.load(tmp_path / "y.npz")["y"]])
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert main(["run", str(tmp_path / "bad.onnx")]) == 2
    assert "not a readable ONNX model" in capsys.readouterr().err
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.uint8))
    assert main(["run", str(path), "--input", str(tmp_path / "wrong.npy")]) == 2
    assert "must have shape" in capsys.readouterr().err


def test_info_vulkan_plan_on_tflite(tmp_path, capsys):
    from vkinfer.testing import tflite_zoo

    path = tmp_path / "m.tflite"
    path.write_bytes(tflite_zoo.mobilenet_v2(seed=0, size=32, width=0.35, num_classes=10))
    assert main(["info", str(path), "--device", "vulkan"]) == 0
    out = capsys.readouterr().out
    assert "and 1 Vulkan submission(s) per run" in out and "planned by lifetime" in out
    assert "x QLinearConv" in out and "runs on vulkan" in out and "peak activation memory" in out


def test_core_clusters_from_sysfs(tmp_path, capsys):
    """big.LITTLE grouping by cpuinfo_max_freq, fastest first, offline cores left out (a fake sysfs)."""
    from vkinfer import cpu

    for i, khz, online in [(0, 1800000, None), (1, 1800000, "1"), (2, 2800000, "1"), (3, 2800000, "1"),
                           (4, 2800000, "0")]:
        d = tmp_path / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "cpuinfo_max_freq").write_text(f"{khz}\n")
        if online is not None:
            (tmp_path / f"cpu{i}" / "online").write_text(online + "\n")
    (tmp_path / "cpufreq").mkdir()  # not a core
    assert cpu.core_clusters(str(tmp_path)) == [(2800000, [2, 3]), (1800000, [0, 1])]
    assert main(["devices"]) == 0
    assert "core clusters:" in capsys.readouterr().out


def _err_line(capsys) -> str:
    """The one error line on stderr (notices and progress may come before it: none after)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("vkinfer: error: ") and "Traceback" not in err, err
    assert sum("error" in line for line in lines) == 1, err
    return lines[-1]


def test_every_error_exits_non_zero_in_one_line_naming_the_model(tmp_path, capsys, monkeypatch):
    """Issue 23: every command's errors exit non-zero with the whole message on one line, naming the model where
    there is one: bad input 2, a failure inside 1."""
    from vkinfer.testing import zoo

    good = tmp_path / "m.onnx"
    good.write_bytes(small_qmodel())
    flt = tmp_path / "float.onnx"
    flt.write_bytes(zoo.mlp(in_features=8, hidden=8, batch=1).SerializeToString())
    for argv, culprit in [(["run", str(flt)], "quantize it first"), (["info", str(flt)], "quantize it first"),
                          (["run", str(tmp_path / "none.onnx")], "No such file")]:
        assert main(argv) == 2, argv
        err = _err_line(capsys)
        assert err.startswith(f"vkinfer: error: {argv[1]}: ") and culprit in err, err
    (tmp_path / "junk.npy").write_bytes(b"junk")
    assert main(["run", str(good), "--device", "cpu", "--input", str(tmp_path / "junk.npy")]) == 2
    assert f"--input {tmp_path / 'junk.npy'}: not a readable .npy or .npz file" in _err_line(capsys)
    (tmp_path / "dir.npz").mkdir()
    assert main(["run", str(good), "--device", "cpu", "--output", str(tmp_path / "dir.npz")]) == 2
    assert "dir.npz" in _err_line(capsys)
    assert main(["calibrate", "--threads", "x"]) == 2
    assert "invalid literal" in _err_line(capsys)
    assert main(["calibrate", "--device", "vulkan:99", "--threads", "1"]) == 2
    assert "no device 'vulkan:99' to calibrate" in _err_line(capsys)

    from vkinfer.dispatch import calibrate as cal

    def broken(device, threads=1, mode="quick", log=None):
        raise RuntimeError("calibration of cpu: op class 'gemm':\nthe driver lost the device")
    monkeypatch.setattr(cal, "calibrate_device", broken)
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path / "cache"))
    assert main(["calibrate", "--device", "cpu", "--threads", "1"]) == 1  # a failure inside: 1, still one line
    assert _err_line(capsys).endswith("vkinfer: error: RuntimeError: calibration of cpu: op class 'gemm': the "
                                      "driver lost the device")

    from vkinfer import cpu

    def no_cpu():
        raise OSError("libvkinfer_cpu.so: cannot open shared object file")
    monkeypatch.setattr(cpu, "variants", no_cpu)
    assert main(["devices"]) == 2
    assert "libvkinfer_cpu.so" in _err_line(capsys)


def test_info_lists_host_nodes_with_their_reasons(tmp_path, capsys, monkeypatch):
    """Each host node with the lowerings' refusal (compiler/plan.py Plan.why_host), and no HostNodeWarning from
    info itself: it lists them. The host node is made by refusing small_qmodel's Reshape on every backend (which
    ops run on the host changes as kernels are added)."""
    import warnings

    from vkinfer.compiler.plan import Plan
    from vkinfer.session import HostNodeWarning

    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostNodeWarning)
        assert main(["info", str(path), "--device", "cpu"]) == 0
        assert "host nodes: none (every node runs natively)" in capsys.readouterr().out
        lower = Plan._lower
        monkeypatch.setattr(Plan, "_lower", staticmethod(
            lambda ctx, node, be: (None, f"{be.name}: no form for this test") if node.name == "flat"
            else lower(ctx, node, be)))
        for device in ("cpu", "vulkan"):
            assert main(["info", str(path), "--device", device]) == 0
            out = capsys.readouterr().out
            assert "host nodes: 1 (Reshape x1)" in out
            # a Vulkan session asks its device, then the CPU it falls back to: both refusals are given
            why = r"vulkan:\d+: no form for this test; cpu: no form for this test" if device == "vulkan" else \
                "cpu: no form for this test"
            assert re.search(rf"^  flat \(Reshape\): {why}$", out, re.M), out
        assert main(["info", str(path), "--device", "cpu", "--placement", "flat=host"]) == 0
        assert "  flat (Reshape): placed on the host by hand\n" in capsys.readouterr().out
        assert main(["info", str(path), "--device", "reference"]) == 0
        assert "host nodes: all 4 (device 'reference' interprets every node in numpy)" in capsys.readouterr().out
