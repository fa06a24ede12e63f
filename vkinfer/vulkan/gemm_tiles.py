"""qlinear_gemm's tile variants, the choice per device, and the measured autotune that makes it.

A variant is a workgroup of `wx` x `wy` invocations, each computing `ri` rows x `cw` output words (4 columns each):
specialization constants of the one shader (shaders/qlinear_gemm.comp), so every variant is the same SPIR-V. Each
variant stages its A and B tiles through shared memory or reads them straight from the buffers (`shared`).

The choice for a device (`gemm_config`), first match:
1. $VKINFER_VK_TILE=<name> (a key of TILES) and $VKINFER_GEMM_TILE=shared|direct: the documented overrides;
2. the device's tuning record (`autotune`), cached by device UUID, driver version and UUID, vkinfer version and
   shader path (integer dot product or not), beside the pipeline cache; a corrupt record, or one written for
   another driver, is ignored with a RuntimeWarning;
3. an autotune now, where $VKINFER_VK_TUNE allows it (unset: on GPUs, the first time a GEMM is prepared; 1: on
   every device, CPU implementations too; 0: never), bounded by TUNE_BUDGET_S;
4. the device class's default (`class_default`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _cache
from .._vk import Device

#: Vendors whose GPUs have on-chip shared memory worth staging GEMM tiles through. Mobile GPUs (Mali, Adreno,
#: PowerVR) back it with ordinary cached memory, and CPU implementations such as lavapipe run 2x faster reading
#: the buffers directly (measured: bench/ops.py, README).
DESKTOP_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel"}

#: The longest an autotune may take (seconds): variants not measured by then are not candidates.
TUNE_BUDGET_S = 2.0


@dataclass(frozen=True)
class Tile:
    """A qlinear_gemm tile: `wx` x `wy` invocations, each `ri` rows x `cw` output words."""

    name: str
    wx: int
    wy: int
    ri: int
    cw: int

    @property
    def rows(self) -> int:
        return self.wy * self.ri

    @property
    def words(self) -> int:
        """Output words (4 columns each) per workgroup."""
        return self.wx * self.cw

    def spec(self) -> list[int]:
        """Specialization constants 15-18 of qlinear_gemm.comp: WX, WY (the workgroup size), RI, CW."""
        return [self.wx, self.wy, self.ri, self.cw]


#: Every variant (rows x columns per workgroup). 32x32 is the one shape vkinfer had before tiles were tuned;
#: 64x64 and 128x64 block 8 rows x 8 columns per invocation (64 accumulators): fewer loads per product where
#: registers are plenty (desktop GPUs); at most 128 invocations, within every device's limit (SwiftShader: 256).
TILES: dict[str, Tile] = {t.name: t for t in (Tile("32x32", 8, 8, 4, 1), Tile("64x64", 8, 8, 8, 2),
                                                Tile("128x64", 8, 16, 8, 2))}


@dataclass(frozen=True)
class GemmConfig:
    """A device's qlinear_gemm choice: the tile, whether it stages through shared memory, and where it came from
    ("override", "tuned", "class default")."""

    tile: Tile
    shared: bool
    source: str

    def spec(self) -> list[int]:
        """Specialization constants 14-18: SHARED_TILE, then the tile's."""
        return [int(self.shared), *self.tile.spec()]


def class_default(dev: Device) -> GemmConfig:
    """The choice without a tuning: shared-memory staging on desktop GPUs, direct reads elsewhere; the 64x64 tile
    on CPU implementations (lavapipe, one thread, TUNE_SHAPES: 0.62-1.03x the 32x32 tile's time, 0.8x summed) and
    32x32 elsewhere (the shape an H100 has run; GPUs are tuned at first use anyway)."""
    shared = dev.info.type in ("discrete", "integrated") and dev.info.vendor_id in DESKTOP_VENDORS
    return GemmConfig(TILES["64x64" if dev.info.type == "cpu" else "32x32"], shared, "class default")


def _env_staging() -> bool | None:
    forced = os.environ.get("VKINFER_GEMM_TILE", "")
    if forced in ("shared", "direct"):
        return forced == "shared"
    if forced:
        raise ValueError(f"VKINFER_GEMM_TILE must be 'shared' or 'direct', got {forced!r}")
    return None


def _env_tile() -> Tile | None:
    name = os.environ.get("VKINFER_VK_TILE", "").strip()
    if not name:
        return None
    if name not in TILES:
        raise ValueError(f"VKINFER_VK_TILE must be one of {', '.join(TILES)}, got {name!r}")
    return TILES[name]


def tune_policy(dev: Device) -> bool:
    """Whether a device without a tuning record is tuned now ($VKINFER_VK_TUNE: unset tunes GPUs only, 1 every
    device, 0 none). CPU implementations are left out by default: their first run would pay the 2 s, and the
    dispatcher keeps nearly every layer off them anyway."""
    v = os.environ.get("VKINFER_VK_TUNE", "").strip()
    if v not in ("", "0", "1"):
        raise ValueError(f"$VKINFER_VK_TUNE must be 0 or 1, got {v!r}")
    return v == "1" or (v == "" and dev.info.type != "cpu")


_lock = threading.RLock()


def gemm_config(dev: Device) -> GemmConfig:
    """The qlinear_gemm tile and staging to use on `dev` (the module docstring's order)."""
    tile, staging = _env_tile(), _env_staging()
    with _lock:
        base = getattr(dev, "_gemm_config", None)
        if base is None:
            base = load_tuning(dev)
            if base is None:
                base = _tuned_now(dev) if tune_policy(dev) else class_default(dev)
            dev._gemm_config = base
    if tile is None and staging is None:
        return base
    return GemmConfig(tile or base.tile, base.shared if staging is None else staging, "override")


def fit_shape(cfg: GemmConfig, rows: int, n4: int) -> GemmConfig:
    """`cfg` for a GEMM of `rows` rows and `n4` output words, unless its tile would compute over 1.25x the outputs
    of the tile that pads this shape least: then that one (same staging). A narrow layer in a wide tile is mostly
    padding: ResNet-8's 1x1 shortcuts (32 columns) in the 64x64 tile computed twice their outputs (lavapipe, one
    thread: ResNet-8 10.7 ms with 64x64 everywhere, 10.2 ms with 32x32). An override ($VKINFER_VK_TILE) is kept."""
    if cfg.source == "override" and os.environ.get("VKINFER_VK_TILE", "").strip():
        return cfg

    def padded(t: Tile) -> int:
        return -(-n4 // t.words) * t.words * -(-rows // t.rows) * t.rows

    best = min(TILES.values(), key=padded)
    return dataclasses.replace(cfg, tile=best) if padded(cfg.tile) > 1.25 * padded(best) else cfg


def _tuned_now(dev: Device) -> GemmConfig:
    """The autotune's choice, or the class default with a RuntimeWarning when the autotune fails for another
    reason than a device fault (a lost device is the session's to handle: VulkanDeviceError propagates)."""
    from ..errors import VulkanDeviceError

    try:
        return autotune(dev).config
    except VulkanDeviceError:
        raise
    except Exception as e:  # noqa: BLE001 - a failed tuning costs speed, never the session
        warnings.warn(f"vkinfer: GEMM tile autotune failed on {dev.info.name} ({type(e).__name__}: {e}); using the "
                      "device class's tile", RuntimeWarning, stacklevel=4)
        return class_default(dev)


# --- the tuning record ------------------------------------------------------------------------------------------

#: Bumped when the record's meaning changes (new variants, new shapes): older records are then never read.
TUNING_FORMAT = 1


def _identity_key(dev: Device) -> tuple[str, str]:
    """(file name, stamp key) of `dev`'s tuning record: what the choice is valid for."""
    from .._pipeline_cache import _vkinfer_version

    ident = dev.identity
    parts = (TUNING_FORMAT, ident["vendor_id"], ident["device_id"], ident["driver_version"],
             bytes(ident["device_uuid"]).hex(), bytes(ident["driver_uuid"]).hex(), _vkinfer_version(),
             bool(getattr(dev, "use_dot", False)), bool(getattr(dev, "use_float_rq", False)), tuple(TILES))
    key = hashlib.sha256(repr(parts).encode()).hexdigest()
    return f"{ident['vendor_id']:04x}-{ident['device_id']:04x}-{key[:20]}.json", key


def tuning_path(dev: Device):
    """Where `dev`'s tuning record lives: $VKINFER_CACHE (or ~/.cache/vkinfer)/tuning/<vendor>-<device>-<key>.json."""
    return _cache.root() / "tuning" / _identity_key(dev)[0]


def load_tuning(dev: Device) -> GemmConfig | None:
    """The cached choice for `dev`, or None (missing; or corrupt, edited, or written for another driver or vkinfer:
    then also a RuntimeWarning, and the caller tunes again or uses the class default)."""
    path = tuning_path(dev)
    data, unreadable = _cache.fetch(path, 1 << 20)
    if data is None:
        if unreadable:
            warnings.warn(f"vkinfer: ignoring GEMM tuning file {path}: unreadable ({unreadable})", RuntimeWarning,
                          stacklevel=3)
        return None
    doc, why = _cache.unstamp_json(data, _identity_key(dev)[1])
    if doc is not None:
        choice = doc.get("choice")
        if not (isinstance(choice, dict) and choice.get("tile") in TILES
                and choice.get("staging") in ("shared", "direct")):
            doc, why = None, f"no valid choice in it ({choice!r})"
    if doc is None:
        warnings.warn(f"vkinfer: ignoring GEMM tuning file {path}: {why}", RuntimeWarning, stacklevel=3)
        return None
    return GemmConfig(TILES[choice["tile"]], choice["staging"] == "shared", "tuned")


# --- the autotune -----------------------------------------------------------------------------------------------

#: (rows, K, N) of the GEMMs timed: MobileNetV2 1.0/224's 1x1 convolutions at three depths (56x56 expand,
#: 14x14 project, 7x7 expand) and a classifier-sized one; each variant's score is its summed time.
TUNE_SHAPES = ((3136, 24, 144), (196, 384, 64), (49, 160, 960), (64, 1024, 256))


@dataclass
class TuneResult:
    """What `autotune` measured: the chosen config, each candidate's summed time (us; None when the budget ended
    first), the elapsed seconds, and the record's path (None when it could not be written)."""

    config: GemmConfig
    times_us: dict[str, float | None]
    elapsed_s: float
    path: object = None
    timer: str = "device"


def _candidates(dev: Device) -> list[GemmConfig]:
    # The class default's staging first (the likeliest winner is measured before the budget can end), then the other.
    first = class_default(dev).shared
    return [GemmConfig(t, s, "tuned") for s in (first, not first) for t in TILES.values()]


def autotune(dev: Device, budget_s: float = TUNE_BUDGET_S, repeat: int = 3, save: bool = True) -> TuneResult:
    """Time every (tile, staging) candidate on TUNE_SHAPES on `dev`, within `budget_s` seconds (pipeline creation
    included), pick the fastest summed time, and store the record (`save`). Timed by the device's timestamps
    where the queue has them, else by wall time around each submit; the minimum of `repeat` runs after one
    warm-up. Outputs are checked against the first candidate's: a variant that disagrees is never chosen."""
    from ..reference._spec import matmul_spec
    from .qlinear_matmul import QLinearMatMul

    t0 = time.perf_counter()
    rng = np.random.default_rng(27)
    specs, words = [], []
    for rows, k, n in TUNE_SHAPES:
        a = rng.integers(0, 256, (rows, k), dtype=np.uint8)
        b = rng.integers(-127, 128, (k, n), dtype=np.int8)
        specs.append(matmul_spec(a, 0.02, 128, b, 0.01, 0, 0.5, 128))
        # Any bytes do: B's padding lanes are zero, so A's are never part of a product.
        words.append(rng.integers(0, 2**32, rows * -(-k // 4), dtype=np.uint32))
    times: dict[str, float | None] = {}
    outputs: dict[int, np.ndarray] = {}
    best: tuple[float, GemmConfig] | None = None
    timer = "device" if dev.timestamps else "wall"
    for cand in _candidates(dev):
        label = f"{cand.tile.name}/{'shared' if cand.shared else 'direct'}"
        times[label] = None
        if time.perf_counter() - t0 > budget_s:
            continue
        total, agree = 0.0, True
        for i, s in enumerate(specs):
            op = QLinearMatMul(s, dev, gemm=cand)
            x = dev.buffer(4 * op.in_words)
            y = dev.buffer(4 * op.out_words)
            x.write(words[i])
            prog = op.bind(x, y)
            seq = dev.sequence()
            seq.barrier()
            seq.upload(x)
            seq.barrier()
            seq.dispatch(prog)
            seq.barrier()
            seq.download(y)
            seq.barrier()
            runs = []
            for r in range(repeat + 1):
                with dev.lock:
                    w = time.perf_counter()
                    ns = seq.run(timed=timer == "device")
                    w = time.perf_counter() - w
                if r:
                    runs.append(ns / 1e3 if timer == "device" and ns is not None else w * 1e6)
            got = y.read(np.uint32, op.out_words)
            if i in outputs and not np.array_equal(outputs[i], got):
                agree = False
            outputs.setdefault(i, got)
            total += min(runs)
            if time.perf_counter() - t0 > budget_s and i < len(specs) - 1:
                total = float("nan")  # a partial sum is no score
                break
        if total == total and agree:
            times[label] = round(total, 2)
            if best is None or total < best[0]:
                best = (total, cand)
    config = best[1] if best is not None else dataclasses.replace(class_default(dev), source="tuned")
    result = TuneResult(config, times, time.perf_counter() - t0, timer=timer)
    if save:
        doc = {"device": dev.info.name, "driver": dev.info.driver, "driver_info": dev.info.driver_info,
               "integer_dot": bool(getattr(dev, "use_dot", False)),
               "float_rq": bool(getattr(dev, "use_float_rq", False)), "timer": timer, "times_us": times,
               "elapsed_s": round(result.elapsed_s, 3), "shapes": [list(s) for s in TUNE_SHAPES],
               "choice": {"tile": config.tile.name, "staging": "shared" if config.shared else "direct"}}
        path = tuning_path(dev)
        if _cache.store(path, _cache.stamp_json(doc, _identity_key(dev)[1]), what="GEMM tuning"):
            result.path = path
    with _lock:
        dev._gemm_config = config
    return result


def describe(info, use_dot: bool, use_float_rq: bool = False) -> str:
    """`vkinfer devices`' GEMM line for a Vulkan device not yet opened (`vkinfer._vk.DeviceInfo`): its tuning
    record's choice, or the class default, and the overrides in force."""
    from types import SimpleNamespace

    from .. import _vk

    dev = SimpleNamespace(info=info, identity=_vk._instance().identity(info.index), use_dot=use_dot,
                          use_float_rq=use_float_rq)
    with warnings.catch_warnings():  # a damaged record reads as none here; the device's first use warns
        warnings.simplefilter("ignore", RuntimeWarning)
        cfg = load_tuning(dev)
    if cfg is not None:
        where = f"tuned ({tuning_path(dev)})"
    else:
        cfg = class_default(dev)
        where = ("class default; tuned at the first GEMM" if tune_policy(dev) else
                 "class default; `vkinfer tune` or $VKINFER_VK_TUNE=1 tunes it")
    over = [f"${k}={os.environ[k]}" for k in ("VKINFER_VK_TILE", "VKINFER_GEMM_TILE") if os.environ.get(k)]
    return (f"{cfg.tile.name} tile, {'shared-memory' if cfg.shared else 'direct'} staging: {where}"
            + (f"; overridden by {', '.join(over)}" if over else ""))
