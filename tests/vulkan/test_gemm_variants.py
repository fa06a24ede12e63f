"""The Vulkan kernels' variants (issue 27 items 1-2): the integer-dot-product shaders (OpSDot/OpUDot/OpSUDot) and
the scalar ones, the float32 requantization under RoundingModeRTE and the integer one, and every qlinear_gemm tile
with either staging, give the numpy reference's bits on every Vulkan device vkinfer lists (lavapipe and
SwiftShader here, both with shaderIntegerDotProduct, unaccelerated; lavapipe alone guarantees float32 RTE); the
choice of path and tile follows the device, the overrides and the tuning record, whose cache is written, reused,
and ignored when damaged or written for another driver."""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cases import MM_SHAPES, conv_args, conv_table, mm_case

import vkinfer
from vkinfer import _vk, ops
from vkinfer.reference._spec import conv_spec, matmul_spec
from vkinfer.vulkan import TILES, Executable, GemmConfig, QLinearConv, QLinearMatMul, choose_kernel, gemm_tiles
from vkinfer.vulkan.qlinear_conv import DOT_KERNELS, uses_dot
from vkinfer.vulkan.selftest import path_of as selftest_path

SUITE_CACHE = Path(os.environ["VKINFER_CACHE"]).resolve()
TABLE = conv_table()


def _infos() -> list[vkinfer.DeviceInfo]:
    try:
        return _vk.devices()
    except vkinfer.VulkanUnavailableError:
        return []


INFOS = _infos()
IDS = [d.name.split()[0].lower() for d in INFOS]
DOT_INFOS = [d for d in INFOS if d.integer_dot_product.get("supported")]
DOT_IDS = [d.name.split()[0].lower() for d in DOT_INFOS]
RTE_INFOS = [d for d in INFOS if d.float_controls.get("rte32")]
DEFAULT = [d for d in INFOS if d == _vk._pick(None)] if INFOS else []  # the default device, as a one-item list
_opened: dict[tuple[int, bool, bool], _vk.Device] = {}


def _rte(info: vkinfer.DeviceInfo) -> bool:
    return bool(info.float_controls.get("rte32"))


def _device(info: vkinfer.DeviceInfo, dot: bool, frq: bool | None = None) -> _vk.Device:
    """One device per (physical device, dot shaders, float requantization) for the whole module (their pipelines
    are reused); `frq` None: with the dot shaders where the device guarantees float32 RTE (the two extremes, the
    default path and the one vkinfer had before, unless asked otherwise)."""
    frq = dot and _rte(info) if frq is None else frq
    if (info.index, dot, frq) not in _opened:
        _opened[info.index, dot, frq] = _vk.Device(info, integer_dot=dot, float_rq=frq)
    return _opened[info.index, dot, frq]


def _slow(info: vkinfer.DeviceInfo) -> bool:
    """SwiftShader runs these shaders 7-13x slower than lavapipe: it gets a third of each table."""
    return "swiftshader" in info.name.lower()


def _conv(dev: _vk.Device, case: dict, gemm: GemmConfig | None = None) -> np.ndarray:
    return Executable(QLinearConv(conv_spec(**case), dev, gemm=gemm), dev).run(case["x"])


def _matmul(dev: _vk.Device, case: dict, gemm: GemmConfig | None = None) -> np.ndarray:
    s = matmul_spec(**case)
    return Executable(QLinearMatMul(s, dev, gemm=gemm), dev).run(s.a).reshape(s.out_shape)


@pytest.mark.parametrize("info", DOT_INFOS, ids=DOT_IDS)
def test_dot_and_scalar_paths_equal_the_reference(info):
    """The conv edge-case table (every kernel, signedness pair, group and padding form) and the matmul shapes on
    both shader paths: the reference's bits; the dot variants really ran where they apply."""
    dot, plain = _device(info, True), _device(info, False)
    assert dot.use_dot and not plain.use_dot and not plain.use_float_rq and dot.use_float_rq == _rte(info)
    # A third of the table here (a twelfth on SwiftShader, 7-13x slower); the other Vulkan tests run all of it on
    # the devices' default path (test_conv_vulkan.py, a third on SwiftShader in test_vulkan_devices.py).
    cases = TABLE[::12] if _slow(info) else TABLE[::3]
    # SwiftShader's default device is the dot one, which test_vulkan_devices.py runs on a third of the table: the
    # scalar shaders alone here (each pipeline costs it about 0.3 s to compile).
    devs = [plain] if _slow(info) else [dot, plain]
    ran = set()
    for name, c in cases:
        want = ops.qlinear_conv(**c, device="reference")
        s = conv_spec(**c)
        kernel = choose_kernel(s)
        if uses_dot(dot, s, kernel):
            ran.add(kernel)
        for d in devs:
            np.testing.assert_array_equal(_conv(d, c), want, f"{name} {selftest_path(d)}")
    assert ran == set(DOT_KERNELS)
    types = [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]
    for i, (sa, sb) in enumerate(MM_SHAPES):
        rng = np.random.default_rng(zlib.crc32(repr((sa, sb)).encode()))
        for per_column, mode in [(True, "random"), (False, "saturate")]:
            c = mm_case(rng, sa, sb, *types[i % 4], per_column, mode)
            want = ops.qlinear_matmul(**c, device="reference")
            for d in devs:
                np.testing.assert_array_equal(_matmul(d, c), want, f"{sa}x{sb} {selftest_path(d)}")


@pytest.mark.parametrize("info", DOT_INFOS[:1], ids=DOT_IDS[:1])
def test_grouped_convolutions_take_the_dot_variant_only_on_whole_words(info):
    """qlinear_conv's dot variant reads whole words of a group: groups of 4k channels in and out take it, others
    (a word straddling two groups, or a group starting mid-word) keep the scalar shader on the same device."""
    dev = _device(info, True)
    rng = np.random.default_rng(4)
    for (c, m, group), want_dot in [((8, 8, 2), True), ((8, 12, 2), False), ((12, 8, 2), False), ((6, 9, 3), False),
                                    ((5, 7, 1), True)]:
        case = dict(x=rng.integers(0, 256, (1, c, 7, 6), dtype=np.uint8), x_scale=0.05, x_zero_point=np.uint8(131),
                    w=rng.integers(-128, 128, (m, c // group, 3, 3), dtype=np.int8), w_scale=0.02,
                    w_zero_point=np.int8(0), y_scale=0.3, y_zero_point=np.uint8(120), pads=(1, 2, 0, 1),
                    group=group, strides=(1, 2))
        s = conv_spec(**case)
        assert choose_kernel(s) == "qlinear_conv" and uses_dot(dev, s, "qlinear_conv") is want_dot
        np.testing.assert_array_equal(_conv(dev, case), ops.qlinear_conv(**case, device="reference"), str(s.w.shape))


GEMM_TABLE = [(n, c) for n, c in TABLE if choose_kernel(conv_spec(**c)) == "qlinear_gemm"]


@pytest.mark.parametrize("info", INFOS, ids=IDS)
def test_every_tile_and_staging_on_both_paths(info):
    """Each tile (32x32, 64x64, 128x64), staged through shared memory or read directly, on both shader paths: the
    table's 1x1 convolutions (odd channel counts, strides, |acc| past 2**24, saturation) and the GEMM-sized matmul
    shapes (batched, broadcast B), against the reference."""
    # SwiftShader compiles each of the 6 tile pipelines per path in about 0.3 s: its default path only there.
    paths = ((True,) if _slow(info) else (True, False)) if info in DOT_INFOS else (False,)
    step = 20 if _slow(info) else 5
    mms = [(sa, sb) for sa, sb in MM_SHAPES if sa[-2] >= 8][::4 if _slow(info) else 2]
    assert len(GEMM_TABLE[::step]) >= 2 and mms
    for dot in paths:
        dev = _device(info, dot)
        for tile in TILES.values():
            for shared in (True, False):
                cfg = GemmConfig(tile, shared, "test")
                what = f"{tile.name} {'shared' if shared else 'direct'} {'dot' if dot else 'scalar'}"
                for name, c in GEMM_TABLE[::step]:
                    np.testing.assert_array_equal(_conv(dev, c, cfg), ops.qlinear_conv(**c, device="reference"),
                                                  f"{name} {what}")
                for sa, sb in mms:
                    c = mm_case(np.random.default_rng(zlib.crc32(repr((sa, what)).encode())), sa, sb, "s8", "u8")
                    np.testing.assert_array_equal(_matmul(dev, c, cfg), ops.qlinear_matmul(**c, device="reference"),
                                                  f"{sa}x{sb} {what}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_args(), st.sampled_from(sorted(TILES)), st.booleans(), st.booleans(), st.booleans())
def test_random_convolutions_on_every_variant(case, tile, shared, dot, frq):
    """Hypothesis shapes (any kernel, group, stride, dilation, padding) with a random tile, staging, shader path
    and requantization form on the default device: the reference's bits."""
    info = _vk._pick(None)
    dev = _device(info, dot and info in DOT_INFOS, frq and _rte(info))
    got = _conv(dev, case, GemmConfig(TILES[tile], shared, "test"))
    np.testing.assert_array_equal(got, ops.qlinear_conv(**case, device="reference"))


@pytest.mark.parametrize("info", RTE_INFOS[:1], ids=[d.name.split()[0].lower() for d in RTE_INFOS[:1]])
def test_float_requantization_keeps_the_integer_form_where_the_multiplier_is_not_normal(info):
    """The float32 form runs where the device guarantees RTE and every multiplier is a normal float32; a layer
    with a denormal multiplier (a device may flush it) keeps the integer form on the same device; both exact,
    ties and saturation included (the conv table's 'ties' and 'saturate' rows)."""
    dev = _device(info, False, True)
    assert dev.use_float_rq
    rng = np.random.default_rng(11)
    base = dict(x=rng.integers(0, 256, (1, 8, 6, 5), dtype=np.uint8), x_scale=0.05, x_zero_point=np.uint8(128),
                w=rng.integers(-128, 128, (8, 8, 1, 1), dtype=np.int8), w_scale=0.01, w_zero_point=np.int8(0),
                y_scale=0.2, y_zero_point=np.uint8(100))
    tiny = {**base, "x_scale": 1e-20, "w_scale": 1e-20, "y_scale": 1.0}  # m = 1e-40: a float32 denormal
    for case, frq in [(base, True), (tiny, False)]:
        op = QLinearConv(conv_spec(**case), dev)
        assert ("VK_FRQ" in (op.defines or {})) is frq
        np.testing.assert_array_equal(Executable(op, dev).run(case["x"]), ops.qlinear_conv(**case, device="reference"))
    for name, c in TABLE:
        if "ties" in name or "saturate" in name:
            np.testing.assert_array_equal(_conv(dev, c), ops.qlinear_conv(**c, device="reference"), name)


@pytest.mark.parametrize("info", INFOS[:1], ids=IDS[:1])
def test_float_rq_choice_follows_the_guarantee_and_the_override(info, monkeypatch):
    """$VKINFER_VK_FLOAT_RQ: unset uses the float form wherever the device guarantees float32 RTE, 0 never, 1
    asks for it (a warning and the integer form without the guarantee); float_rq=True without it is refused."""
    monkeypatch.delenv("VKINFER_VK_FLOAT_RQ", raising=False)
    monkeypatch.setenv("VKINFER_SELFTEST", "0")
    rte = dataclasses.replace(info, float_controls={"supported": True, "rte32": True})
    none = dataclasses.replace(info, float_controls={"supported": True, "rte32": False})
    assert _vk.float_rq_choice(rte)[0] and not _vk.float_rq_choice(none)[0]
    monkeypatch.setenv("VKINFER_VK_FLOAT_RQ", "0")
    assert _vk.float_rq_choice(rte) == (False, "off ($VKINFER_VK_FLOAT_RQ=0)")
    monkeypatch.setenv("VKINFER_VK_FLOAT_RQ", "1")
    with pytest.warns(RuntimeWarning, match="cannot guarantee float32 round-to-nearest-even"):
        assert not _vk.float_rq_choice(none)[0]
    with pytest.raises(ValueError, match="has no shaderRoundingModeRTEFloat32"):
        _vk.Device(none, float_rq=True)
    monkeypatch.setenv("VKINFER_VK_FLOAT_RQ", "2")
    with pytest.raises(ValueError, match="VKINFER_VK_FLOAT_RQ must be 0 or 1"):
        _vk.float_rq_choice(rte)


# --- the choice: dot path ---------------------------------------------------------------------------------------

def _fake(info: vkinfer.DeviceInfo, **dot) -> vkinfer.DeviceInfo:
    return dataclasses.replace(info, integer_dot_product={"supported": False, "signed_accelerated": False,
                                                          "unsigned_accelerated": False, "mixed_accelerated": False,
                                                          **dot})


@pytest.mark.parametrize("info", INFOS[:1], ids=IDS[:1])
def test_dot_choice_follows_the_feature_and_the_override(info, monkeypatch):
    """$VKINFER_VK_DOT: unset uses the dot shaders wherever the feature is (accelerated or not), 0 never, 1 asks
    for them; a device without the feature never gets them (1 then warns), a bad value is a ValueError."""
    monkeypatch.delenv("VKINFER_VK_DOT", raising=False)
    monkeypatch.setenv("VKINFER_SELFTEST", "0")  # no cached verdict or blocklist in the way
    assert _vk.dot_choice(_fake(info, supported=True))[0]
    assert _vk.dot_choice(_fake(info, supported=True, signed_accelerated=True)) == (True,
                                                                                      "on (accelerated by the driver)")
    assert not _vk.dot_choice(_fake(info))[0]
    monkeypatch.setenv("VKINFER_VK_DOT", "0")
    assert _vk.dot_choice(_fake(info, supported=True, signed_accelerated=True)) == (False, "off ($VKINFER_VK_DOT=0)")
    monkeypatch.setenv("VKINFER_VK_DOT", "1")
    with pytest.warns(RuntimeWarning, match="has no shaderIntegerDotProduct"):
        assert _vk.dot_choice(_fake(info)) == (False, "not supported by the device")
    monkeypatch.setenv("VKINFER_VK_DOT", "yes please")
    with pytest.raises(ValueError, match="VKINFER_VK_DOT must be 0 or 1"):
        _vk.dot_choice(_fake(info, supported=True))


@pytest.mark.parametrize("info", INFOS[:1], ids=IDS[:1])
def test_a_device_without_the_feature_never_gets_the_dot_path(info, monkeypatch):
    """A device that lists no shaderIntegerDotProduct is created without it, even asked for: integer_dot=True is a
    ValueError, $VKINFER_VK_DOT=1 a warning and the scalar shaders, and its layers never take a dot variant."""
    fake = _fake(info)
    with pytest.raises(ValueError, match="has no shaderIntegerDotProduct"):
        _vk.Device(fake, integer_dot=True)
    monkeypatch.setenv("VKINFER_VK_DOT", "1")
    with pytest.warns(RuntimeWarning, match="using the scalar shaders"):
        dev = _vk.Device(fake, pipeline_threads=0)
    assert not dev.use_dot and not dev.raw.integer_dot
    name, c = next((n, c) for n, c in TABLE if choose_kernel(conv_spec(**c)) == "qlinear_gemm")
    op = QLinearConv(conv_spec(**c), dev)
    assert not op.dot
    np.testing.assert_array_equal(Executable(op, dev).run(c["x"]), ops.qlinear_conv(**c, device="reference"), name)


# --- the choice: tiles, tuning and its cache ----------------------------------------------------------------------

@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A private $VKINFER_CACHE (the suite's SPIR-V and pipelines linked in), no tile override from outside."""
    for sub in ("spirv", "pipelines", "selftest"):
        (SUITE_CACHE / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub).symlink_to(SUITE_CACHE / sub, target_is_directory=True)
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    for var in ("VKINFER_VK_TILE", "VKINFER_GEMM_TILE", "VKINFER_VK_TUNE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _fresh() -> _vk.Device:
    return _vk.Device(_vk._pick(None), pipeline_threads=0)


def test_class_default_and_overrides(own_cache, monkeypatch):
    """Without a tuning record or an autotune: the device class's default; $VKINFER_VK_TILE and $VKINFER_GEMM_TILE
    override it (and reach the layer's dispatch), bad values are ValueErrors naming the variable."""
    monkeypatch.setenv("VKINFER_VK_TUNE", "0")
    dev = _fresh()
    cfg = gemm_tiles.gemm_config(dev)
    assert cfg == gemm_tiles.class_default(dev) and cfg.source == "class default"
    assert not gemm_tiles.tuning_path(dev).exists()
    monkeypatch.setenv("VKINFER_VK_TILE", "128x64")
    monkeypatch.setenv("VKINFER_GEMM_TILE", "shared")
    cfg = gemm_tiles.gemm_config(dev)
    assert (cfg.tile.name, cfg.shared, cfg.source) == ("128x64", True, "override")
    name, c = GEMM_TABLE[0]
    op = QLinearConv(conv_spec(**c), dev)
    assert op.gemm == cfg and op.spec_consts[14:] == [1, 8, 16, 8, 2]
    np.testing.assert_array_equal(Executable(op, dev).run(c["x"]), ops.qlinear_conv(**c, device="reference"), name)
    monkeypatch.setenv("VKINFER_VK_TILE", "48x48")
    with pytest.raises(ValueError, match="VKINFER_VK_TILE must be one of 32x32, 64x64, 128x64"):
        gemm_tiles.gemm_config(dev)
    monkeypatch.delenv("VKINFER_VK_TILE")
    monkeypatch.setenv("VKINFER_VK_TUNE", "sometimes")
    with pytest.raises(ValueError, match="VKINFER_VK_TUNE must be 0 or 1"):
        gemm_tiles.tune_policy(dev)


def test_autotune_writes_reuses_and_ignores_a_bad_record(own_cache, monkeypatch):
    """$VKINFER_VK_TUNE=1: the first GEMM prepared tunes the device within the budget and writes the record; a
    device opened again reads it (no tuning); a damaged record, one stamped for another driver and one without a
    valid choice are each ignored with a RuntimeWarning (the class default or a new tuning follows)."""
    monkeypatch.setenv("VKINFER_VK_TUNE", "1")
    dev = _fresh()
    ran = []
    real = gemm_tiles.autotune

    def spy(d, *a, **k):
        ran.append(d)
        return real(d, *a, **{**k, "budget_s": 1.0, "repeat": 1})

    monkeypatch.setattr(gemm_tiles, "autotune", spy)
    name, c = GEMM_TABLE[1]
    np.testing.assert_array_equal(ops.qlinear_conv(**c, device="reference"), _conv(dev, c), name)
    cfg = gemm_tiles.gemm_config(dev)
    assert ran == [dev] and cfg.source == "tuned"
    path = gemm_tiles.tuning_path(dev)
    doc = json.loads(path.read_text())
    assert doc["choice"] == {"tile": cfg.tile.name, "staging": "shared" if cfg.shared else "direct"}
    measured = {k: v for k, v in doc["times_us"].items() if v is not None}
    assert measured and doc["times_us"][f"{cfg.tile.name}/{doc['choice']['staging']}"] == min(measured.values())

    again = _fresh()
    assert gemm_tiles.gemm_config(again) == cfg and ran == [dev]  # read, not tuned again

    monkeypatch.setenv("VKINFER_VK_TUNE", "0")  # from here on: a bad record gives the class default
    good = path.read_bytes()
    for bad, why in [(good[:-40], "not JSON"), (good.replace(b'"tile"', b'"tyle"'), "checksum mismatch")]:
        path.write_bytes(bad)
        with pytest.warns(RuntimeWarning, match=f"ignoring GEMM tuning file .*{why}"):
            assert gemm_tiles.gemm_config(_fresh()).source == "class default"
    # Another driver's record at this name (copied, say): its stamp key is another device's.
    other = dataclasses.replace(dev.info)
    other_dev = _fresh()
    other_dev.identity = {**other_dev.identity, "driver_version": other_dev.identity["driver_version"] + 1}
    assert gemm_tiles.tuning_path(other_dev) != path
    from vkinfer import _cache

    path.write_bytes(_cache.stamp_json(json.loads(good), gemm_tiles._identity_key(other_dev)[1]))
    with pytest.warns(RuntimeWarning, match="written for another key"):
        assert gemm_tiles.gemm_config(_fresh()).source == "class default"
    doc["choice"] = {"tile": "7x7", "staging": "direct"}
    doc.pop("cache")
    path.write_bytes(_cache.stamp_json(doc, gemm_tiles._identity_key(dev)[1]))
    with pytest.warns(RuntimeWarning, match="no valid choice"):
        assert gemm_tiles.gemm_config(_fresh()).source == "class default"
    assert other.name == dev.info.name


def test_autotune_keeps_to_its_budget(own_cache):
    """A budget spent before the first candidate measures nothing and chooses the class default; the choice is
    always one whose outputs agreed with the others'."""
    dev = _fresh()
    r = gemm_tiles.autotune(dev, budget_s=0.0, save=False)
    assert set(r.times_us.values()) == {None} and r.config.tile == gemm_tiles.class_default(dev).tile
    assert not gemm_tiles.tuning_path(dev).exists()


def test_cli_tune_and_devices(own_cache, capsys):
    """`vkinfer tune` measures every candidate (within its budget), prints the choice and records it; `vkinfer
    devices` then names the tuned choice, and says whether the device has integer dot product and why vkinfer's
    dot shaders run or not."""
    from vkinfer import cli

    assert cli.main(["tune", "--device", "vulkan", "--budget", "5"]) == 0
    out = capsys.readouterr().out
    chosen = next(line for line in out.splitlines() if "chosen:" in line)
    assert "32x32/direct" in out and "recorded in" in chosen
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    tile = chosen.split("chosen: ")[1].split(" (")[0].split()
    assert f"GEMM: {tile[0]} tile, {'shared-memory' if tile[1] == 'shared' else 'direct'} staging: tuned" in out
    assert "integer dot product: " in out and "vkinfer's dot shaders: " in out
    assert cli.main(["tune", "--budget", "0"]) == 2


def test_a_narrow_layer_takes_a_tile_that_pads_it_least(own_cache, monkeypatch):
    """The device's tile unless it computes over 1.25x the outputs of the least-padding tile: 32 columns in a
    64x64 tile are half padding (32x32 then), 144 columns over 3136 rows are not; an override is kept."""
    monkeypatch.setenv("VKINFER_VK_TUNE", "0")
    cfg = GemmConfig(TILES["64x64"], False, "tuned")
    assert gemm_tiles.fit_shape(cfg, 256, 8).tile.name == "32x32"
    assert gemm_tiles.fit_shape(cfg, 3136, 36) == cfg
    assert gemm_tiles.fit_shape(GemmConfig(TILES["128x64"], True, "tuned"), 49, 40).tile.rows <= 64
    monkeypatch.setenv("VKINFER_VK_TILE", "128x64")
    over = gemm_tiles.gemm_config(_fresh())
    assert gemm_tiles.fit_shape(over, 9, 2) == over
    monkeypatch.delenv("VKINFER_VK_TILE")
    dev = _fresh()
    dev._gemm_config = cfg
    rng = np.random.default_rng(6)
    c = mm_case(rng, (256, 40), (40, 32), "u8", "s8")
    op = QLinearMatMul(matmul_spec(**c), dev)
    assert op.gemm.tile.name == "32x32" and op.groups == (1, 8, 1)
    np.testing.assert_array_equal(Executable(op, dev).run(op.spec.a).reshape(op.spec.out_shape),
                                  ops.qlinear_matmul(**c, device="reference"))


def test_a_failing_autotune_falls_back_to_the_class_default(own_cache, monkeypatch):
    """A tuning that fails (not a device fault) costs speed, never the layer: a RuntimeWarning and the class
    default."""
    monkeypatch.setenv("VKINFER_VK_TUNE", "1")

    def broken(dev, *a, **k):
        raise RuntimeError("no timestamps today")

    monkeypatch.setattr(gemm_tiles, "autotune", broken)
    dev = _fresh()
    with pytest.warns(RuntimeWarning, match="autotune failed .*no timestamps today"):
        assert gemm_tiles.gemm_config(dev) == gemm_tiles.class_default(dev)
