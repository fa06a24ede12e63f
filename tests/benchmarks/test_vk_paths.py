"""bench/vk_paths.py: the Vulkan shader paths side by side on one device, outputs compared bit for bit (run as the
script it is: bench/ imports its own `models`, which the test tree's package of that name would shadow here)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "vk_paths.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_two_paths_of_a_field_model_agree_and_are_timed():
    r = _run("--models", "resnet8", "--rounds", "1", "--per", "1", "--config", "default",
             "--config", "VKINFER_VK_DOT=0,VKINFER_VK_FLOAT_RQ=0,VKINFER_VK_TILE=32x32")
    assert r.returncode == 0 and "differs" not in r.stdout, r.stdout + r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("resnet8")]
    assert len(lines) == 2 and "1.00x" in lines[0] and "VKINFER_VK_TILE=32x32" in lines[1]


def test_a_bad_config_names_the_knobs():
    r = _run("--config", "VKINFER_DEVICE=1")
    assert r.returncode != 0 and "KEY=VALUE pairs of VKINFER_VK_DOT" in r.stderr
