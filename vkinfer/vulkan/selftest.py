"""The per-driver self-test: does this Vulkan device and driver compute vkinfer's kernels right?

Some drivers advertise features and compute them wrong (cooperative matrix on some Mesa drivers, integer dot
product on some Intel ones: issue 27). So before a device runs anything, a few small quantized convolutions,
GEMMs, depthwise convolutions and matmuls (`CASES`: every convolution kernel, u8 / s8 / mixed signedness, odd
sizes, stride, padding, dilation, groups, per-channel scales) run on it and on the C path (vkinfer/cpu), and
must agree bit for bit.

When it runs
- `device="vulkan"` (a session, a placement, or the ops API): at the first use of a device in a process
  (`require`), unless the verdict is cached. A device that failed raises `DeviceUntrustedError`, naming the device,
  the driver and the failing case.
- `device="auto"` reads cached verdicts only (`auto_problem`, from vkinfer/dispatch/machine.py auto_candidates),
  so that a warm auto session opens no device: a device that failed (or is blocklisted) is left out, with one
  RuntimeWarning per process. A device with no verdict yet is tested when auto first opens it (the dispatcher
  put a node there): if it fails there, the session runs on the CPU with a warning (DeviceUntrustedError is a
  VulkanDeviceError, auto's device-fault fallback) and the next auto session leaves it out.
- `vkinfer selftest [--device D]` reruns it and prints each case's result and time.

What is cached: one stamped JSON record per device identity (device and driver UUIDs, driver version; the same
identity the calibration is keyed by) and code under test (vkinfer's version and the kernels' shader sources or
packaged SPIR-V), in $VKINFER_CACHE/selftest/. Inside, one verdict per shader path (`PATHS`: "plain", or "dot"
when the device uses the integer-dot-product shaders, `Device.use_dot`, each with "+frq" when it requantizes in
float32, `Device.use_float_rq`), so a driver that computes one of those wrong is recorded as such, and "last",
the path tested most recently (what auto, which opens no device, goes by). A
driver update or a changed shader makes a new record (the test reruns); a record that is damaged or malformed is
ignored with a RuntimeWarning and the test reruns.

Known-bad driver and feature combinations live in `BLOCKLIST`, consulted before the self-test (`blocked`).

Overrides: $VKINFER_SELFTEST=0 uses every device untested (no self-test, no cached verdict, no blocklist for
whole devices); for users who know their driver better. Test hook: $VKINFER_SELFTEST_INJECT=all (or 1), or a
comma-separated list of case names, flips one byte of those cases' Vulkan results before they are compared, as a
driver computing wrong would; a "dot:", "plain:" or "frq:" prefix limits it to the paths with that part. A device
whose path with the dot shaders or the float requantization fails (and passes on the plain path) is reopened on
the plain path (`require`), and later processes open it so (vkinfer._vk.dot_choice and float_rq_choice, through
`feature_problem`).

Measured first-use cost (2-core EPYC, SPIR-V already compiled, `check` in 7 fresh processes): lavapipe 0.19-0.31 s
(0.46 s on the dot path), SwiftShader 0.60-0.81 s (0.60 s dot), mostly the driver compiling the kernels' pipelines,
which the device keeps for the model's own layers. With the verdict cached: `check` 0.3-0.4 ms in a new process,
`auto_candidates` 1.3-1.5 ms (the kernels' sources hashed once, the record read), 0.25 ms after. docs/guide.md,
"The Vulkan self-test", is the user's side.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from .._trust import (  # noqa: F401 (the self-test's records and blocklist live below vkinfer._vk; named here too)
    BLOCKLIST,
    FEATURES,
    KERNEL_SHADERS,
    PATHS,
    RECORD_MAX_BYTES,
    SELFTEST_FORMAT,
    BlockEntry,
    CaseResult,
    Verdict,
    _facts,
    _record_key,
    _verdict_of,
    _write_record,
    blocked,
    cached_verdict,
    code_tag,
    driver_version,
    enabled,
    feature_problem,
    read_record,
    record_path,
)
from ..errors import DeviceUntrustedError

# --- the cases ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One self-test case: `make(rng)` gives a validated ConvSpec or MatMulSpec (vkinfer/reference/_spec.py)."""

    name: str
    what: str
    make: Callable[[Any], Any]


def _y_scale(x_scale: float, w_scale: Any, k: int) -> float:
    """An output scale that spreads the outputs over about +-48 levels (few clamped): the accumulator of k
    products of values uniform over 8 bits has a standard deviation of about sqrt(k) * 74 * 74."""
    import numpy as np  # noqa: PLC0415 - see the module's imports: numpy only where the cases run

    return float(x_scale * np.max(w_scale) * np.sqrt(k) * 74 * 74 / 48)


def _q(rng: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    import numpy as np  # noqa: PLC0415

    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _conv(x_dtype: str, w_dtype: str, x_shape: tuple, w_shape: tuple, *, per_channel: bool = False,
          **kw: Any) -> Callable[[Any], Any]:
    def make(rng: Any) -> Any:
        import numpy as np  # noqa: PLC0415

        from ..reference._spec import conv_spec  # noqa: PLC0415

        xd, wd = np.dtype(x_dtype), np.dtype(w_dtype)
        x, w = _q(rng, x_shape, xd), _q(rng, w_shape, wd)
        m, cg, kh, kw_ = w_shape
        x_zp = xd.type(rng.integers(-20, 20) + (128 if xd == np.uint8 else 0))
        if per_channel:
            w_scale = rng.uniform(0.002, 0.02, m).astype(np.float32)
            w_zp = np.full(m, 128 if wd == np.uint8 else 0).astype(wd)
        else:
            w_scale = np.float32(0.01)
            w_zp = wd.type(rng.integers(-10, 10) + (128 if wd == np.uint8 else 0))
        x_scale = 0.05
        bias = rng.integers(-2000, 2000, m).astype(np.int32)
        y_zp = xd.type(rng.integers(-8, 8) + (128 if xd == np.uint8 else 0))
        return conv_spec(x, x_scale, x_zp, w, w_scale, w_zp, _y_scale(x_scale, w_scale, cg * kh * kw_),
                         y_zp, bias, **kw)
    return make


def _matmul(a_dtype: str, b_dtype: str, a_shape: tuple, b_shape: tuple, *, per_column: bool = False
            ) -> Callable[[Any], Any]:
    def make(rng: Any) -> Any:
        import numpy as np  # noqa: PLC0415

        from ..reference._spec import matmul_spec  # noqa: PLC0415

        ad, bd = np.dtype(a_dtype), np.dtype(b_dtype)
        a, b = _q(rng, a_shape, ad), _q(rng, b_shape, bd)
        n = b_shape[-1]
        a_zp = ad.type(rng.integers(-20, 20) + (128 if ad == np.uint8 else 0))
        if per_column:
            b_scale = rng.uniform(0.002, 0.02, n).astype(np.float32)
            b_zp = np.full(n, 128 if bd == np.uint8 else 0).astype(bd)
        else:
            b_scale = np.float32(0.01)
            b_zp = bd.type(rng.integers(-10, 10) + (128 if bd == np.uint8 else 0))
        y_zp = ad.type(rng.integers(-8, 8) + (128 if ad == np.uint8 else 0))
        return matmul_spec(a, 0.05, a_zp, b, b_scale, b_zp, _y_scale(0.05, b_scale, a_shape[-1]), y_zp)
    return make


#: Every convolution kernel (qlinear_conv, _gemm, _gemv, _dwconv3x3, _dwconv) and both matmul kernels, u8, s8 and
#: mixed operands, odd channel counts (not multiples of the 4 packed per word), strides, pads, dilations, groups.
CASES: tuple[Case, ...] = (
    Case("conv3x3_s2_u8", "QLinearConv 3x3 stride 2 pad 1, u8, 5->7 channels 11x9",
         _conv("uint8", "uint8", (1, 5, 11, 9), (7, 5, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    Case("conv3x3_grouped_dilated_s8", "QLinearConv 3x3 group 3 dilation 2 uneven pads, s8, per-channel, relu",
         _conv("int8", "int8", (1, 6, 10, 13), (9, 2, 3, 3), per_channel=True, group=3, dilations=(2, 2),
               pads=(2, 1, 1, 2), activation="relu")),
    Case("conv1x5_mixed", "QLinearConv 1x5 stride (1,2), u8 input with s8 weights, 3->5 channels",
         _conv("uint8", "int8", (2, 3, 8, 12), (5, 3, 1, 5), strides=(1, 2), pads=(0, 2, 0, 1))),
    Case("gemm1x1_s8", "1x1 QLinearConv (GEMM), s8, per-channel, batch 2, 13->10 channels 7x5",
         _conv("int8", "int8", (2, 13, 7, 5), (10, 13, 1, 1), per_channel=True)),
    Case("gemm1x1_s2_u8", "1x1 QLinearConv (GEMM) stride 2, u8, 8->12 channels 9x9",
         _conv("uint8", "uint8", (1, 8, 9, 9), (12, 8, 1, 1), strides=(2, 2))),
    Case("gemv1x1_u8", "1x1 QLinearConv on 3 pixels (GEMV), u8, 37->11 channels",
         _conv("uint8", "uint8", (1, 37, 1, 3), (11, 37, 1, 1))),
    Case("dw3x3_u8", "depthwise 3x3 pad 1, u8, 9 channels 8x7",
         _conv("uint8", "uint8", (1, 9, 8, 7), (9, 1, 3, 3), group=9, pads=(1, 1, 1, 1))),
    Case("dw3x3_s2_s8", "depthwise 3x3 stride 2, s8, per-channel, 6 channels 9x10",
         _conv("int8", "int8", (1, 6, 9, 10), (6, 1, 3, 3), per_channel=True, group=6, strides=(2, 2),
               pads=(1, 0, 0, 1))),
    Case("dw5x5_dilated_mixed", "depthwise 5x5 dilation (2,1) stride (1,2), u8 input with s8 weights, 7 channels",
         _conv("uint8", "int8", (1, 7, 12, 11), (7, 1, 5, 5), group=7, dilations=(2, 1), strides=(1, 2),
               pads=(4, 2, 4, 2))),
    Case("matmul_gemm_s8", "QLinearMatMul (GEMM) 2x33x21 @ 21x9, s8, per-column",
         _matmul("int8", "int8", (2, 33, 21), (21, 9), per_column=True)),
    Case("matmul_gemv_u8", "QLinearMatMul (GEMV) 3x37 @ 37x11, u8",
         _matmul("uint8", "uint8", (3, 37), (37, 11))),
)


def _injected(name: str, path: str) -> bool:
    """Test hook: $VKINFER_SELFTEST_INJECT (module docstring); a "dot:", "plain:" or "frq:" prefix limits it to
    the shader paths with that part."""
    spec = os.environ.get("VKINFER_SELFTEST_INJECT", "").strip()
    only, sep, rest = spec.partition(":")
    if sep and only in ("dot", "plain", "frq"):
        if only not in path.split("+"):
            return False
        spec = rest.strip()
    if not spec or spec.lower() in ("0", "off", "no", "false"):
        return False
    if spec.lower() in ("1", "all", "on", "yes", "true"):
        return True
    return name in {s.strip() for s in spec.split(",")}


def _differ(got: Any, want: Any) -> str:
    import numpy as np  # noqa: PLC0415

    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype} {got.shape}, the C path {want.dtype} {want.shape}"
    bad = np.flatnonzero(got.ravel() != want.ravel())
    if not len(bad):
        return ""
    i = int(bad[0])
    at = tuple(int(v) for v in np.unravel_index(i, want.shape))
    return (f"{len(bad)} of {want.size} values differ from the C path's, first at {at}: "
            f"{got.ravel()[i]} instead of {want.ravel()[i]}")


def run_case(case: Case, dev: Any) -> CaseResult:
    """Run `case` on Vulkan device `dev` and on the C path (one thread) and compare them. A device fault
    (VulkanDeviceError) or a shader compile error is raised, not recorded: it says nothing about wrong results."""
    import numpy as np  # noqa: PLC0415

    from .. import cpu  # noqa: PLC0415
    from ..reference._spec import ConvSpec  # noqa: PLC0415
    from . import Executable, QLinearConv, QLinearMatMul  # noqa: PLC0415

    s = case.make(np.random.default_rng(sum(map(ord, case.name))))
    conv = isinstance(s, ConvSpec)
    t0 = time.perf_counter()
    op = QLinearConv(s, dev) if conv else QLinearMatMul(s, dev)
    got = Executable(op, dev).run(s.x if conv else s.a)
    ms = 1e3 * (time.perf_counter() - t0)
    if conv:
        want = cpu.QLinearConv(s).run(s.x, 1)
    else:
        want = cpu.QLinearMatMul(s).run(s.a, 1)
        got = got.reshape(want.shape)
    if _injected(case.name, path_of(dev)):
        got = got.copy()
        got.view(np.uint8).ravel()[got.size // 2] ^= 0x01
    why = _differ(got, want)
    return CaseResult(case.name, op.kernel, not why, ms, why)


# --- verdicts and their cache ---------------------------------------------------------------------------------


def path_of(dev: Any) -> str:
    """The shader path `dev` runs: "dot" (integer-dot-product shaders, `Device.use_dot`) or "plain", with "+frq"
    where it requantizes in float32 (`Device.use_float_rq`)."""
    base = "dot" if getattr(dev, "use_dot", False) else "plain"
    return base + ("+frq" if getattr(dev, "use_float_rq", False) else "")


def identity_of(dev: Any) -> dict:
    """An open device's identity, the same dict as vkinfer/dispatch/machine.py vulkan_identity gives (no Vulkan
    call)."""
    info, ident = dev.info, dev.identity
    return {"name": info.name, "type": info.type, "vendor_id": info.vendor_id, "device_id": info.device_id,
            "driver_version": ident["driver_version"], "device_uuid": bytes(ident["device_uuid"]).hex(),
            "driver_uuid": bytes(ident["driver_uuid"]).hex(), "shaders": path_of(dev)}


#: This process's verdicts by (device identity, shader path): a device reopened (after a loss, or by a test that
#: drops the open devices) or a changed $VKINFER_CACHE does not rerun the test; `_keys` memoizes each open Device's.
_memo: dict[tuple, Verdict] = {}
_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.RLock()  # check() holds it while run() records


def _memo_key(dev: Any) -> tuple:
    key = _keys.get(dev)
    if key is None or key[1] != path_of(dev):
        key = _keys[dev] = (tuple(sorted(identity_of(dev).items())), path_of(dev))
    return key


def run(dev: Any, cases: tuple[Case, ...] = CASES) -> Verdict:
    """Run the self-test on open device `dev` now (whatever is cached), record the verdict and return it."""
    names_before = set(dev.dispatched)
    t0 = time.perf_counter()
    try:
        results = [run_case(c, dev) for c in cases]
    finally:
        # The shader-coverage tests count what the suite's own cases dispatch (Device.dispatched): not these.
        dev.dispatched.intersection_update(names_before)
    ident = identity_of(dev)
    v = Verdict(all(r.ok for r in results), path_of(dev), results, "run", time.perf_counter() - t0,
                record=str(record_path(ident)))
    _write_record(ident, v)
    with _lock:
        _memo[_memo_key(dev)] = v
    return v


def check(dev: Any) -> Verdict:
    """The device's verdict on its shader path: this process's, else the blocklist's, else the cache's, else the
    self-test's, run now (once per device and process, whatever the threads)."""
    key = _memo_key(dev)
    v = _memo.get(key)
    if v is not None:
        return v
    with _lock:
        v = _memo.get(key)
        if v is not None:
            return v
        path = path_of(dev)
        reason = blocked(dev, "device") or next(
            (r for f in ("dot", "frq") if f in path.split("+") for r in [blocked(dev, f)] if r), None)
        ident = identity_of(dev)
        if reason:
            v = Verdict(False, path, [], "blocklist", reason=reason)
        else:
            rec = read_record(ident)
            v = _verdict_of(rec, path, record_path(ident)) if rec is not None else None
            if v is not None and rec["last"] != path:  # auto, which opens no device, goes by the path used last
                _write_record(ident, v)
        if v is None:
            v = run(dev)
        _memo[key] = v
        return v


def require(dev: Any) -> Any:
    """`dev` when it may be used: its verdict passed, or $VKINFER_SELFTEST=0. Where a path with the integer-dot-
    product shaders or the float32 requantization failed, and $VKINFER_VK_DOT / $VKINFER_VK_FLOAT_RQ do not ask
    for them, the device is reopened without both (a RuntimeWarning; vkinfer._vk.get_device then returns that
    one) and that path is checked instead: a driver that computes a feature wrong costs that feature's speed, not
    the device. Else DeviceUntrustedError naming the device, its driver and the failing case (or the blocklist's
    reason). Returns the device to use."""
    if not enabled():
        return dev
    v = check(dev)
    forced = any(os.environ.get(k, "").strip() == "1" for k in ("VKINFER_VK_DOT", "VKINFER_VK_FLOAT_RQ"))
    if not v.passed and v.path != "plain" and not forced:
        from .._vk import reopen  # noqa: PLC0415

        bad = v.failing
        warnings.warn(f"vkinfer: Vulkan device vulkan:{dev.info.index} ({dev.info.name}) failed the self-test on "
                      f"its {v.path} shaders (case {bad.name if bad else '?'}: {bad.why if bad else v.reason}); "
                      "using its scalar shaders with the integer requantization", RuntimeWarning, stacklevel=3)
        dev = reopen(dev, integer_dot=False, float_rq=False)
        v = check(dev)
    if not v.passed:
        raise untrusted_error(dev, v)
    return dev


def untrusted_error(dev: Any, v: Verdict) -> DeviceUntrustedError:
    """The error for a device whose verdict `v` failed."""
    info = dev.info
    driver = f"{info.driver}{f' ({info.driver_info})' if info.driver_info else ''}"
    where = f"Vulkan device vulkan:{info.index} {info.name!r}, driver {driver}, {v.path} shader path"
    if v.source == "blocklist":
        case, msg = None, f"{where} is on vkinfer's blocklist: {v.reason}"
    else:
        bad = v.failing
        case = bad.name if bad is not None else None
        msg = (f"{where} failed vkinfer's self-test ({'cached verdict' if v.source == 'cached' else 'run now'}, "
               f"{v.record}): case {case} ({bad.kernel if bad else '?'}): {bad.why if bad else 'no result'}")
    return DeviceUntrustedError(
        f"{msg}; the device is untrusted: device=\"auto\" leaves it out, `vkinfer selftest --device "
        f"vulkan:{info.index}` reruns the test, $VKINFER_SELFTEST=0 uses it untested",
        device=f"vulkan:{info.index}", name=info.name, driver=driver, case=case)


def auto_problem(entry: dict) -> str | None:
    """Why device="auto" must leave out a `vulkan_devices()` entry, from the blocklist and the cached verdict
    only (no device is opened): its last-tested shader path failed, or the blocklist names it; else None."""
    if not enabled():
        return None
    reason = blocked(entry, "device")
    if reason:
        return f"on vkinfer's blocklist: {reason}"
    ident = entry.get("identity")
    if not isinstance(ident, dict):
        return None
    rec = read_record(ident)
    if rec is None:
        return None
    v = _verdict_of(rec, rec["last"], record_path(ident))
    if v is None or v.passed:
        return None
    bad = v.failing
    return (f"it failed vkinfer's self-test on its {v.path} shader path (case {bad.name if bad else '?'}: "
            f"{bad.why if bad else 'no result'}; {v.record})")


def describe(entry: dict) -> str:
    """One line on a `vulkan_devices()` entry's self-test for `vkinfer devices`: "passed", "failed" (with the
    case) or "not run" for each shader path recorded, "off" under $VKINFER_SELFTEST=0, or the blocklist's
    reason."""
    if not enabled():
        return "off ($VKINFER_SELFTEST=0: the device is used untested)"
    reason = blocked(entry, "device")
    if reason:
        return f"not run: blocklisted ({reason})"
    with warnings.catch_warnings():  # a damaged record reads as "not run" here; the next use warns and reruns
        warnings.simplefilter("ignore", RuntimeWarning)
        rec = read_record(entry["identity"])
    if rec is None:
        return "not run (runs at the device's first use; `vkinfer selftest` runs it now)"
    parts = []
    for path in sorted(rec["paths"], key=lambda p: p != rec["last"]):
        v = _verdict_of(rec, path, record_path(entry["identity"]))
        if v.passed:
            parts.append(f"passed on the {path} shader path ({len(v.cases)} cases, {v.seconds:.2f} s)")
        else:
            bad = v.failing
            parts.append(f"FAILED on the {path} shader path (case {bad.name if bad else '?'}: "
                         f"{bad.why if bad else 'no result'}): untrusted")
    return "; ".join(parts)
