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


def _fake(index, name, type_="cpu"):
    return _vk.DeviceInfo(index=index, name=name, type=type_, api_version="1.3", driver="d", driver_info="",
                          vendor_id=0, device_id=0, limits={})


def test_cpu_implementations_ordered_by_known_speed():
    """The loader lists VK_ADD_DRIVER_FILES drivers first, so SwiftShader gets index 0; lavapipe (7-13x faster,
    vkinfer/_vk.py) must stay the default CPU implementation, unknown ones between the two."""
    infos = [_fake(0, "SwiftShader Device (Subzero)"), _fake(1, "llvmpipe (LLVM 15.0.6, 256 bits)"),
             _fake(2, "Some CPU Vulkan"), _fake(3, "GPU", "discrete"), _fake(4, "vGPU", "virtual")]
    assert [d.index for d in sorted(infos, key=_vk._preference)] == [3, 4, 1, 2, 0]


def test_add_swiftshader_to_the_loaders_driver_list(monkeypatch, tmp_path):
    icd = tmp_path / "vk_swiftshader_icd.json"
    monkeypatch.setattr(_vk, "SWIFTSHADER_ICD", str(icd))
    env: dict[str, str] = {}
    assert not _vk._add_swiftshader(env) and env == {}  # not installed: nothing to add
    icd.write_text("{}")
    assert _vk._add_swiftshader(env) and env == {"VK_ADD_DRIVER_FILES": str(icd)}
    assert not _vk._add_swiftshader(env) and env == {"VK_ADD_DRIVER_FILES": str(icd)}  # once only
    env = {"VK_ADD_DRIVER_FILES": "/x/my_icd.json"}
    assert _vk._add_swiftshader(env) and env["VK_ADD_DRIVER_FILES"] == f"/x/my_icd.json{os.pathsep}{icd}"  # appended
    for var in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):  # the user chose the drivers
        env = {var: "/x/my_icd.json"}
        assert not _vk._add_swiftshader(env) and "VK_ADD_DRIVER_FILES" not in env


def test_swiftshader_listed_when_installed(capsys):
    """Debian's chromium-common (installed by `make setup`) ships SwiftShader: vkinfer lists it after lavapipe,
    selects it by name, and `vkinfer devices` shows every device."""
    from vkinfer.cli import main

    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        assert not _vk._add_swiftshader(dict(os.environ))
        return  # the user chose the drivers: vkinfer adds none
    assert os.path.isfile(_vk.SWIFTSHADER_ICD), (
        f"{_vk.SWIFTSHADER_ICD} is missing: `apt-get install --no-install-recommends chromium-common` (make setup)")
    devs = vkinfer.devices()
    names = [d.name for d in devs]
    swift = [d for d in devs if "swiftshader" in d.name.lower()]
    assert len(swift) == 1, names
    assert _vk._pick("swiftshader") == _vk._pick("SwiftShader") == swift[0]
    lavapipe = [d for d in devs if "llvmpipe" in d.name]
    assert lavapipe and _vk._pick("lavapipe") == lavapipe[0]
    assert names.index(lavapipe[0].name) < names.index(swift[0].name)
    if not os.environ.get("VKINFER_DEVICE"):
        assert _vk._pick(None) != swift[0] and _vk._pick("cpu") == lavapipe[0]
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for d in devs:
        assert f"vulkan:{d.index}  {d.name}" in out
    assert out.count("(default)") == 1
