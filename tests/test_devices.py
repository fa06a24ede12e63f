"""Device listing and choice: order of preference, selection by index/name/type/env, clear errors."""

import os
import subprocess
import sys

import pytest

import vkinfer
from vkinfer import _vk


def test_devices_listed_with_type_driver_and_limits():
    devs = vkinfer.devices()
    assert devs, "this machine has lavapipe: at least one Vulkan device"
    for d in devs:
        assert d.type in ("discrete", "integrated", "virtual", "cpu", "other")
        assert d.name and d.driver and d.api_version
        assert d.limits["max_compute_workgroup_count"][2] >= 65535
        assert d.limits["max_storage_buffer_range"] >= 2**27
    ranks = [_vk._TYPE_RANK[d.type] for d in devs]
    assert ranks == sorted(ranks)  # discrete, integrated, virtual, then CPU implementations


def test_pick_by_index_name_type_and_env(monkeypatch):
    d = vkinfer.devices()[0]
    assert _vk._pick(d.index) == d
    assert _vk._pick(str(d.index)) == d
    assert _vk._pick(d.name[:6]) == d
    assert _vk._pick(d.type) == d
    monkeypatch.setenv("VKINFER_DEVICE", d.name[:6])
    assert _vk._pick(None) == d
    with pytest.raises(ValueError, match="no Vulkan device with index 99"):
        _vk._pick(99)
    with pytest.raises(ValueError, match="no Vulkan device matches 'no-such-gpu'"):
        _vk._pick("no-such-gpu")


def test_no_vulkan_driver_gives_clear_error():
    """With no ICD available the loader finds no device: a VulkanUnavailableError naming what to install."""
    code = ("import vkinfer, numpy as np\n"
            "try:\n    vkinfer.devices(); print('NO ERROR')\n"
            "except vkinfer.VulkanUnavailableError as e:\n    print('ERR', e)\n")
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent.json", VK_DRIVER_FILES="/nonexistent.json")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "ERR" in r.stdout and "mesa-vulkan-drivers" in r.stdout, r.stdout + r.stderr


def test_missing_glslang_gives_clear_error(monkeypatch, tmp_path):
    from vkinfer import _glsl
    from vkinfer.errors import ShaderCompileError

    _glsl._glslang.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        with pytest.raises(ShaderCompileError, match="glslang-tools"):
            _glsl._glslang()
    finally:
        _glsl._glslang.cache_clear()
