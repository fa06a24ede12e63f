"""Dependent convolutions recorded once into one sequence and replayed: correct every time, and
clean under the Khronos validation layer with synchronization validation (whose detection is
proven by a negative control without barriers)."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.chain_cases import chain_reference, chain_specs

from vkinfer.vulkan import KERNELS, Chain

TESTS = Path(__file__).resolve().parents[1]  # holds the support package


def test_chain_of_24_replayed_60_times_equals_reference():
    specs = chain_specs(24)
    chain = Chain(specs)
    # Every conv kernel but qlinear_gemv, which needs a feature map under 8 pixels.
    assert {op.kernel for op in chain.ops} == set(KERNELS) - {"qlinear_gemv"}
    rng = np.random.default_rng(0)
    for _ in range(60):
        x = rng.integers(0, 256, specs[0].x.shape).astype(np.uint8)
        np.testing.assert_array_equal(chain.run(x), chain_reference(specs, x))


def test_chain_rejects_mismatched_layers_and_input():
    specs = chain_specs(3)
    with pytest.raises(ValueError, match="chain break"):
        Chain([specs[0], dataclasses.replace(specs[1], x=specs[1].x[:, :8])])
    chain = Chain(specs)
    with pytest.raises(ValueError, match="chain input must be"):
        chain.run(np.zeros((1, 16, 11, 12), np.uint8))


def _validated(mode: str, tmp_path: Path) -> tuple[str, int]:
    settings = tmp_path / "vk_layer_settings.txt"
    settings.write_text("khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n"
                        "khronos_validation.log_filename = stdout\n")
    env = dict(os.environ,
               VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
               # ':' separates entries; with ',' the loader silently ignores the list.
               VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:"
                                "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
               VK_LAYER_SETTINGS_PATH=str(settings),
               PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "support.vk_validation_run", mode], env=env, capture_output=True,
                       text=True, timeout=300, cwd=TESTS)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    errors = sum(1 for line in out.splitlines() if "Validation Error" in line or "SYNC-HAZARD" in line)
    return out, errors


def test_chain_under_sync_validation_has_zero_errors(tmp_path):
    out, errors = _validated("chain", tmp_path)
    assert "RESULT chain-equal 5/5" in out
    assert errors == 0, out[:3000]


def test_negative_control_without_barriers_is_caught(tmp_path):
    out, errors = _validated("chain-nobarrier", tmp_path)
    assert errors > 0 and "SYNC-HAZARD-READ-AFTER-WRITE" in out


def test_every_kernel_under_validation_has_zero_errors(tmp_path):
    out, errors = _validated("ops", tmp_path)
    assert "RESULT ops-equal 5/5" in out
    assert errors == 0, out[:3000]


def test_whole_mobilenet_v2_under_validation_has_zero_errors(tmp_path):
    out, errors = _validated("model", tmp_path)
    assert "RESULT model-equal 2/2 submits 1" in out  # the whole model is one recorded submit
    assert errors == 0, out[:3000]


def test_every_plan_layer_kind_under_validation_has_zero_errors(tmp_path):
    out, errors = _validated("plan", tmp_path)
    assert "RESULT plan-equal 4/4" in out
    assert errors == 0, out[:3000]


def test_every_kernel_variant_under_validation_has_zero_errors(tmp_path):
    """Each qlinear_gemm tile with either staging, and the integer-dot-product variants of gemm, gemv and conv
    beside the scalar ones (issue 27), under the validation layer with synchronization validation."""
    out, errors = _validated("variants", tmp_path)
    m = re.search(r"RESULT variants-equal (\d+)/(\d+)", out)
    assert m and m.group(1) == m.group(2) and int(m.group(2)) >= 14, out[-2000:]
    assert errors == 0, out[:3000]
