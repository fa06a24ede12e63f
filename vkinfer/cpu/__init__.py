"""CPU backend: vkinfer's C library (cpu_fallback/) through ctypes.

The library packs weights once per layer for the chosen ISA variant (NEON, AVX2, AVX-512 VNNI or
portable C, picked at run time; `$VKINFER_CPU_ISA` or `device="cpu:<variant>"` forces one), runs
convolutions through an indirection buffer on a thread pool, and gives the same bits as the
reference. Activations cross as NHWC bytes in the canonical unsigned domain (int8 XOR 0x80).
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
from pathlib import Path

import numpy as np

from .._cache import LayerCache
from ..errors import VkInferError
from ..reference._spec import ConvSpec, MatMulSpec
from . import threads as _threads
from .threads import ThreadDefault, core_clusters

# $VKINFER_CPU_LIB loads another build of the library (the sanitizer build in tests/cpu/test_native_graph.py).
LIB_PATH = Path(os.environ.get("VKINFER_CPU_LIB") or Path(__file__).resolve().parent.parent / "libvkinfer_cpu.so")
_u32, _i32 = ctypes.c_uint32, ctypes.c_int32
# The integer ranges of the C arguments. ctypes narrows silently (2**62 passed as a uint32 becomes 0: a mutated
# model's pads ran as a small, meaningless convolution until 2026-11), so every integer crossing into the library
# goes through `checked`.
_LIMITS = {ctypes.c_uint32: (0, 2 ** 32 - 1), ctypes.c_int32: (-2 ** 31, 2 ** 31 - 1),
           ctypes.c_uint64: (0, 2 ** 64 - 1), ctypes.c_size_t: (0, 2 ** 64 - 1)}


def checked(what: str, value, ctype):
    """`value` as an argument of C type `ctype`; ValueError naming `what` when an integer does not fit it."""
    lim = _LIMITS.get(ctype)
    if lim is None or isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return value
    if not lim[0] <= int(value) <= lim[1]:
        raise ValueError(f"{what} = {int(value)} does not fit the C library's {ctype.__name__} "
                         f"[{lim[0]}, {lim[1]}]")
    return int(value)


_FIELD_TYPES: dict[type, dict] = {}
# struct codes of the integer and pointer field types, each exactly its C type's range (struct refuses the rest)
_CODES = {ctypes.c_uint32: "I", ctypes.c_int32: "i", ctypes.c_uint64: "Q", ctypes.c_int64: "q", ctypes.c_void_p: "Q"}
_PACKERS: dict[type, tuple[tuple[str, ...], struct.Struct, tuple[str, ...]] | None] = {}


def _packer(cls: type[ctypes.Structure]) -> tuple[tuple[str, ...], struct.Struct, tuple[str, ...]] | None:
    """(field names in order, a struct.Struct laying them out as ctypes does, zero padding included, the pointer
    fields), or None for a structure with another field type."""
    fmt, pos = "=", 0
    for f in cls._fields_:
        code = _CODES.get(f[1]) if len(f) == 2 else None
        if code is None or struct.calcsize("=" + code) != ctypes.sizeof(f[1]):
            return None
        off = getattr(cls, f[0]).offset
        fmt += "x" * (off - pos) + code
        pos = off + ctypes.sizeof(f[1])
    fmt += "x" * (ctypes.sizeof(cls) - pos)
    st = struct.Struct(fmt)
    ptrs = tuple(f[0] for f in cls._fields_ if f[1] is ctypes.c_void_p)
    return (tuple(f[0] for f in cls._fields_), st, ptrs) if st.size == ctypes.sizeof(cls) else None


_POINTER_AT: dict[type, tuple[int, ...]] = {}  # c_struct_values: each structure's pointer fields' positions


def c_struct_values(cls: type[ctypes.Structure], what: str, values: tuple) -> ctypes.Structure:
    """`c_struct` with the fields' values given in field order: packed at once where struct takes them (no keyword
    dict to build and read back: a convolution descriptor per node of a 100k-node chain), else `c_struct`'s checks,
    so an error is the one they give."""
    pk = _PACKERS.get(cls, False)
    if pk is False:
        pk = _PACKERS[cls] = _packer(cls)
    at = _POINTER_AT.get(cls)
    if at is None and pk is not None:
        at = _POINTER_AT[cls] = tuple(pk[0].index(k) for k in pk[2])  # (an index search per call was 1.6%)
    if pk is not None and len(values) == len(pk[0]) and all(type(values[i]) is int for i in at):
        try:  # (a pointer field takes a plain int only, as in c_struct)
            return cls.from_buffer_copy(pk[1].pack(*values))
        except (struct.error, TypeError, OverflowError, ValueError):
            pass
    return c_struct(cls, what, **dict(zip([f[0] for f in cls._fields_], values, strict=False)))


def c_struct(cls: type[ctypes.Structure], what: str, **fields) -> ctypes.Structure:
    """A ctypes structure with every integer field checked against its C type (see `checked`; a plain int within
    its range is taken as it is, as `checked` takes it, without the call: a convolution's descriptor of 26 fields
    was 10 us a node of a long chain).

    Every field given as a value struct packs (an integer within its C type's range, an int address) is packed at once
    into the structure's bytes (6.4 -> ~2 us a convolution descriptor); anything else (a value out of range, None,
    a missing field) takes the checks below, so an error is the one they give."""
    pk = _PACKERS.get(cls, False)
    if pk is False:
        pk = _PACKERS[cls] = _packer(cls)
    # (a pointer field takes a plain int only: ctypes refuses a numpy integer there, which struct would take)
    if pk is not None and len(fields) == len(pk[0]) and all(type(fields.get(k)) is int for k in pk[2]):
        try:
            return cls.from_buffer_copy(pk[1].pack(*[fields[k] for k in pk[0]]))
        except (KeyError, struct.error, TypeError, OverflowError, ValueError):
            pass
    types = _FIELD_TYPES.get(cls)
    if types is None:
        types = _FIELD_TYPES[cls] = dict(cls._fields_)
    vals = {}
    for k, v in fields.items():
        t = types[k]
        if type(v) is int:
            lim = _LIMITS.get(t)
            if lim is None or lim[0] <= v <= lim[1]:
                vals[k] = v
                continue
        vals[k] = checked(f"{what}.{k}", v, t)
    return cls(**vals)


class _Desc(ctypes.Structure):
    _fields_ = [(f, _u32) for f in ("n", "h", "w", "c", "m", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "pb",
                                    "pr", "groups")] + [
        ("weights", ctypes.c_void_p), ("w_signed", _i32), ("w_zp", ctypes.c_void_p), ("bias", ctypes.c_void_p),
        ("scale", ctypes.c_void_p), ("x_zp", _i32), ("y_zp", _i32), ("y_lo", _i32), ("y_hi", _i32), ("isa", _i32)]


@functools.cache
def lib() -> ctypes.CDLL:
    """The C library (built by `make setup`), with its function signatures declared."""
    if not LIB_PATH.exists():
        raise VkInferError(f"the CPU library {LIB_PATH} is not built: run `make setup`")
    so = ctypes.CDLL(str(LIB_PATH))
    so.vki_conv_create.argtypes = [ctypes.POINTER(_Desc), ctypes.POINTER(ctypes.c_void_p)]
    so.vki_conv_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, _u32]
    so.vki_conv_destroy.argtypes = [ctypes.c_void_p]
    so.vki_conv_output_shape.argtypes = [ctypes.c_void_p, ctypes.POINTER(_u32), ctypes.POINTER(_u32)]
    so.vki_conv_isa.argtypes = [ctypes.c_void_p]
    so.vki_conv_isa.restype = ctypes.c_char_p
    so.vki_conv_kernel.argtypes = [ctypes.c_void_p]
    so.vki_conv_kernel.restype = ctypes.c_char_p
    so.vki_isa_name.restype = ctypes.c_char_p
    so.vki_isa_name.argtypes = [_i32]
    so.vki_isa_available.argtypes = [_i32]
    so.vki_default_threads.restype = _u32
    so.vki_get_default_threads.restype = _u32
    so.vki_set_default_threads.argtypes = [_u32]
    # The library does not count cores itself (its default is 1): it takes this package's policy,
    # so C callers of threads = 0 and Python agree.
    _check_status(so, so.vki_set_default_threads(_machine_threads().count), "CPU default threads")
    so.vki_last_error.restype = ctypes.c_char_p
    so.vki_qlinear_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, _i32,
                                   ctypes.c_float, ctypes.c_float, ctypes.c_float, _i32, _i32]
    so.vki_lut2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                            ctypes.c_void_p]
    return so


ENAN = 4  # VKI_ENAN: a quantize operator met a NaN input (cpu/segment.py names the tensor)


def _check_status(so: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        msg = so.vki_last_error().decode()
        raise (ValueError if status in (1, 3, ENAN) else VkInferError)(f"{what}: {msg}")


def _check(status: int, what: str) -> None:
    _check_status(lib(), status, what)


def variants() -> list[tuple[str, bool]]:
    """Every ISA variant compiled in (best last) and whether this CPU can run it. Tests and
    benchmarks iterate this list."""
    so = lib()
    return [(so.vki_isa_name(i).decode(), bool(so.vki_isa_available(i))) for i in range(so.vki_isa_count())]


def available_variants() -> list[str]:
    """The variants this CPU can run."""
    return [name for name, ok in variants() if ok]


def default_variant() -> str:
    """The variant used when none is named: $VKINFER_CPU_ISA, else the best available."""
    i = lib().vki_isa_default()
    if i < 0:
        raise ValueError(lib().vki_last_error().decode())
    return lib().vki_isa_name(i).decode()


@functools.cache
def _machine_threads() -> ThreadDefault:
    """The machine's default (affinity, fastest cluster, cgroup quota), read once per process: the
    C library gets it when it is loaded, so both see the same number."""
    return _threads.machine_default()


def thread_default() -> ThreadDefault:
    """The default thread count and why (`.count`, `.reason`): $VKINFER_CPU_THREADS, else the CPUs this
    process may run on within the fastest core cluster, capped by the cgroup CPU quota (see
    vkinfer.cpu.threads). Raises ValueError for a bad $VKINFER_CPU_THREADS."""
    return _threads.resolve(machine=_machine_threads())


def default_threads() -> int:
    """The thread count a CPU call uses when given none: `thread_default().count`."""
    return thread_default().count


_RUN_THREADS: dict[str | None, int] = {}


def threads_for_run() -> int:
    """`default_threads()` for a run, memoised per value of $VKINFER_CPU_THREADS (read on every call, so a
    changed value takes effect on the next run; the policy's checks and errors apply once per value)."""
    key = os.environ.get("VKINFER_CPU_THREADS")
    n = _RUN_THREADS.get(key)
    if n is None:
        n = _RUN_THREADS[key] = default_threads()
    return n


def _isa_index(isa: str | None) -> int:
    if isa is None:
        return -1
    names = [n for n, _ in variants()]
    if isa not in names:
        raise ValueError(f"CPU variant {isa!r} is not in this build; have {names}")
    if isa not in available_variants():
        raise ValueError(f"this CPU cannot run the {isa!r} variant; it can run {available_variants()}")
    return names.index(isa)


try:  # the plan runner's address(): the buffer protocol's address, read-only arrays too (0.1 us)
    from .._planrun import address as _address
except ImportError:  # a tree without the extension
    _address = None


def _ptr(a: np.ndarray) -> int:
    """Data address of a C-contiguous array: the plan runner's `address` costs ~0.1 us and c_char.from_buffer ~0.4
    (writable arrays only) where x.ctypes.data costs ~2 us, which matters on layers that run in 30 us and on graph
    builds of 100k nodes; anything else (a strided array) takes the array interface's address."""
    try:
        return _address(a) if _address is not None else ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _to_nhwc_canonical(x: np.ndarray) -> np.ndarray:
    """NCHW uint8/int8 -> NHWC bytes in the unsigned domain (int8 + 128, i.e. XOR 0x80)."""
    b = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).view(np.uint8)
    return b ^ np.uint8(0x80) if x.dtype == np.int8 else b


class _Conv:
    """One prepared C convolution (weights packed once); `run` takes NHWC canonical bytes."""

    def __init__(self, *, n, h, w, c, m, kh, kw, strides, dilations, pads, groups, weights, w_zp, bias, scale,
                 x_zp, out, isa):
        wb = np.ascontiguousarray(weights).view(np.uint8)
        w_zp = np.ascontiguousarray(w_zp, np.int32)
        bias = np.ascontiguousarray(bias, np.int32)
        scale = np.ascontiguousarray(scale, np.float32)
        d = c_struct(_Desc, "convolution", n=n, h=h, w=w, c=c, m=m, kh=kh, kw=kw, sh=strides[0], sw=strides[1],
                     dh=dilations[0], dw=dilations[1], pt=pads[0], pl=pads[1], pb=pads[2], pr=pads[3], groups=groups,
                  weights=wb.ctypes.data, w_signed=int(weights.dtype == np.int8), w_zp=w_zp.ctypes.data,
                  bias=bias.ctypes.data, scale=scale.ctypes.data, x_zp=x_zp, y_zp=out.zero_point, y_lo=out.lo,
                  y_hi=out.hi, isa=_isa_index(isa))
        handle = ctypes.c_void_p()
        _check(lib().vki_conv_create(ctypes.byref(d), ctypes.byref(handle)), "CPU convolution")
        self.handle, self.n, self.m = handle, n, m
        oh, ow = _u32(), _u32()
        lib().vki_conv_output_shape(handle, ctypes.byref(oh), ctypes.byref(ow))
        self.oh, self.ow = oh.value, ow.value
        self.isa = lib().vki_conv_isa(handle).decode()
        # The microkernel family it runs: the variant, or e.g. "avx2-u8s8" when every (w - w_zp) is 7-bit.
        self.kernel = lib().vki_conv_kernel(handle).decode()
        self.in_bytes = n * h * w * c

    def run(self, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        """NHWC canonical input bytes -> NHWC output bytes (n, oh, ow, m)."""
        if x.dtype != np.uint8 or x.size != self.in_bytes or not x.flags.c_contiguous:
            raise ValueError("internal: CPU convolution input has the wrong size or layout")
        y = np.empty((self.n, self.oh, self.ow, self.m), np.uint8)
        t = 0 if threads is None else int(threads)
        if t < 0:
            raise ValueError(f"threads must be >= 1 (or None for the default), got {threads}")
        # The default (0, as in C) is passed explicitly, so $VKINFER_CPU_THREADS goes through the
        # package's policy (and its error for a bad value) on every run, not the C library's parsing.
        t = t or default_threads()
        _check(lib().vki_conv_run(self.handle, _ptr(x), _ptr(y), t), "CPU convolution")
        return y

    def __del__(self):
        # At interpreter exit the module's globals may already be gone (`lib` is None): nothing left to free.
        if getattr(self, "handle", None) and callable(lib):
            lib().vki_conv_destroy(self.handle)
            self.handle = None


class QLinearConv:
    """QLinearConv prepared for the CPU: `run(x_nchw, threads)` -> NCHW output in the spec's type."""

    def __init__(self, s: ConvSpec, isa: str | None = None):
        n, c, h, w = s.x.shape
        m, _, kh, kw = s.w.shape
        self.spec = s
        self.conv = _Conv(n=n, h=h, w=w, c=c, m=m, kh=kh, kw=kw, strides=s.strides, dilations=s.dilations,
                          pads=s.pads, groups=s.group, weights=s.w, w_zp=s.w_zp, bias=s.bias, scale=s.out.m,
                          x_zp=s.x_zp + (128 if s.x.dtype == np.int8 else 0), out=s.out, isa=isa)
        self.isa = self.conv.isa

    def run(self, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        y = self.conv.run(_to_nhwc_canonical(x), threads)
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2)).view(self.spec.out.dtype)


class QLinearMatMul:
    """QLinearMatMul on the CPU: rows of A as the pixels of a 1x1 convolution (one per distinct B)."""

    def __init__(self, s: MatMulSpec, isa: str | None = None):
        nb, m, k = s.a.shape
        bb, _, n = s.b.shape
        self.spec = s
        a_zp = s.a_zp + (128 if s.a.dtype == np.int8 else 0)
        # Shared B: every batch's rows are pixels of one convolution. Batched B: one per batch.
        self.convs = [_Conv(n=nb if bb == 1 else 1, h=1, w=m, c=k, m=n, kh=1, kw=1, strides=(1, 1),
                            dilations=(1, 1), pads=(0, 0, 0, 0), groups=1,
                            weights=np.ascontiguousarray(s.b[i].T)[:, :, None, None], w_zp=s.b_zp,
                            bias=np.zeros(n, np.int32), scale=s.out.m, x_zp=a_zp, out=s.out, isa=isa)
                      for i in range(bb)]
        self.isa = self.convs[0].isa

    def run(self, a: np.ndarray, threads: int | None = None) -> np.ndarray:
        s = self.spec
        rows = np.ascontiguousarray(a).view(np.uint8)
        if a.dtype == np.int8:
            rows = rows ^ np.uint8(0x80)
        if len(self.convs) == 1:
            y = self.convs[0].run(np.ascontiguousarray(rows), threads)
        else:
            y = np.stack([cv.run(np.ascontiguousarray(rows[i]), threads) for i, cv in enumerate(self.convs)])
        return y.view(s.out.dtype).reshape(s.out_shape)


def lut2(a: np.ndarray, b: np.ndarray, table: np.ndarray) -> np.ndarray:
    """y = table[a_byte * 256 + b_byte] elementwise in C (a binary 8-bit op as a 65536-byte table; see
    vkinfer.vulkan.qlinear_lut.binary_table). `b` has a's shape, or is one row of a's last axis (broadcast)."""
    if table.dtype != np.uint8 or table.size != 65536 or not table.flags.c_contiguous:
        raise ValueError("table must be 65536 contiguous bytes")
    if a.dtype not in (np.uint8, np.int8) or b.dtype != a.dtype:
        raise TypeError(f"a and b must both be uint8 or int8, got {a.dtype} and {b.dtype}")
    if b.shape != a.shape and b.size != (a.shape[-1] if a.ndim else 1):
        raise ValueError(f"b must have a's shape {a.shape} or be one row of its last axis, got {b.shape}")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty(a.shape, a.dtype)
    _check(lib().vki_lut2(_ptr(a), _ptr(b), _ptr(y), a.size, 0 if b.shape == a.shape else b.size, _ptr(table)),
           "lut2")
    return y


# Prepared layers for the op-level API.
_CACHE = LayerCache()


def run_conv(s: ConvSpec, isa: str | None = None, threads: int | None = None) -> np.ndarray:
    """QLinearConv of a validated spec on the CPU, reusing a cached prepared layer when there is one."""
    op = _CACHE.get(("conv", default_variant() if isa is None else isa, s.x.shape, s.x.dtype.str, s.x_zp,
                     s.strides, s.pads, s.dilations, s.group, s.out.zero_point, s.out.lo, s.out.hi, s.out.dtype.str),
                    [s.w, s.w_zp, s.bias, s.out.m], lambda: QLinearConv(s, isa))
    return op.run(s.x, threads)


def run_matmul(s: MatMulSpec, isa: str | None = None, threads: int | None = None) -> np.ndarray:
    """QLinearMatMul of a validated spec on the CPU, reusing a cached prepared layer when there is one."""
    op = _CACHE.get(("matmul", default_variant() if isa is None else isa, s.a.shape, s.a.dtype.str, s.a_zp,
                     s.out.zero_point, s.out.lo, s.out.hi, s.out.dtype.str, s.out_shape),
                    [s.b, s.b_zp, s.out.m], lambda: QLinearMatMul(s, isa))
    return op.run(s.a, threads)


# QLinearAdd's C form lives in its op's file, with the CPU lowering (found by name: _discover.py); imported last
# because it calls lib() from here. A name bound after the module's import, so vkinfer.cpu.qlinear_add is the function.
from .qlinear_add import prepare_qlinear_add, qadd_constants, qlinear_add  # noqa: E402

__all__ = ["QLinearConv", "QLinearMatMul", "variants", "available_variants", "default_variant", "default_threads",
           "thread_default", "core_clusters", "ThreadDefault", "run_conv", "run_matmul", "lib", "qlinear_add",
           "qadd_constants", "prepare_qlinear_add"]
