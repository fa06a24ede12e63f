"""The native graph (cpu_fallback/include/vkinfer_graph.h) through ctypes: operators added once, one C call
per run over one arena.

    g = NativeGraph(arena_bytes, ext_bytes=[in_bytes, out_bytes])
    g.add("lut1", n, table, Ref(1, 0, n), Ref(0, 0, n))     # a ref: (buffer, offset, bytes); buffer 0 is
    g.run([x, y])                                          # the arena, k >= 1 external buffer k - 1

Operators take 8-bit tensors in the canonical unsigned domain (int8 XOR 0x80) and 4-D activations NHWC
(see the header). Each `add` checks every range against its buffer in C; `run` checks the external arrays'
sizes here, so the C code never touches memory outside them.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import VkInferError
from . import _check, _ptr, c_struct, checked, lib

try:  # the plan runner (vkinfer/_native/planrun.c, built by `make cpu`); without it runs go through ctypes
    from .. import _planrun
except ImportError:  # pragma: no cover - a package installed without the extension
    _planrun = None

_u32, _i32, _u64, _f32, _vp = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_float, ctypes.c_void_p


class _Ref(ctypes.Structure):
    _fields_ = [("ext", _u32), ("unused", _u32), ("offset", _u64), ("bytes", _u64)]


class Ref(NamedTuple):
    """A tensor's byte range: buffer 0 is the arena, k >= 1 the run's external buffer k - 1."""

    buf: int
    offset: int
    nbytes: int

    def c(self) -> _Ref:
        return c_struct(_Ref, "tensor reference", ext=self.buf, unused=0, offset=self.offset, bytes=self.nbytes)


_REF = _Ref
# The C type of each letter of an operator's signature in the library's table (vkinfer_graph.h, vki_graph_op_info).
_LETTERS = {"I": _u32, "i": _i32, "Q": _u64, "f": _f32, "p": _vp, "R": _REF}


class _OpInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("signature", ctypes.c_char_p), ("entry", _vp)]


def _read_signatures(so: ctypes.CDLL) -> dict[str, list]:
    """Operator name -> ctypes argument types after the graph handle, from the library's own operator table
    (vki_graph_op_table, which the C preprocessor writes from cpu_fallback/include/vkinfer_graph_ops.def, the one
    list that also gives the C prototypes). Refs are passed by value."""
    so.vki_graph_op_table.argtypes = [ctypes.POINTER(_u32)]
    so.vki_graph_op_table.restype = ctypes.POINTER(_OpInfo)
    count = _u32()
    table = so.vki_graph_op_table(ctypes.byref(count))
    sigs: dict[str, list] = {}
    packers: dict[str, tuple[int, str, struct.Struct]] = {}
    for i in range(count.value):
        name, letters = table[i].name.decode(), table[i].signature.decode()
        unknown = sorted(set(letters) - set(_LETTERS))
        if unknown:
            raise VkInferError(f"the CPU library's operator {name} has argument types {unknown} this package does "
                               "not know: the library and the package are from different builds")
        sigs[name] = [_LETTERS[c] for c in letters]
        packers[name] = (i, letters, struct.Struct("<q" + "".join(_WORDS[c] for c in letters)))
    so._vki_graph_packers = packers if hasattr(so, "vki_graph_packed_add") else {}
    return sigs


# vki_graph_packed_add's words per signature letter: integers and addresses one int64, a float a double (struct's
# "d" converts as ctypes' c_float argument does, PyFloat_AsDouble, and C narrows it the same), a ref three.
_WORDS = {"I": "q", "i": "q", "Q": "q", "f": "d", "p": "q", "R": "qqq"}


_TAILS: dict[int, struct.Struct] = {}  # the words of k trailing refs


def _ref_words(tail: struct.Struct, refs) -> bytes | None:
    """The words of trailing refs as `_pack` packs them (Refs of plain ints only): None for any other ref (`_pack`
    or the direct call judges it), b"" for one out of int64's range (the direct call gives its error)."""
    flat = []
    for rf in refs:
        if type(rf) is not Ref:
            return None
        x, y, z = rf
        if not (type(x) is int and type(y) is int and type(z) is int):
            return None
        flat += rf
    try:
        return tail.pack(*flat)
    except struct.error:
        return b""


def _is_int(v) -> bool:
    """Whether `v` is an integer `checked` checks (an int, a bool, a numpy integer)."""
    return type(v) is int or type(v) is bool or isinstance(v, np.integer)


# Arrays of at most this many bytes have their address kept per graph (`_pack`'s `ptrs`), at most _PTR_CACHE of
# them: a chain's nodes pass the same shape, stride and table arrays (their lowering's memoised form), and _ptr was
# four calls of ~0.4 us a QLinearAdd node.
_PTR_CACHE_BYTES, _PTR_CACHE = 1024, 1024


def _pack(packer: tuple[int, str, struct.Struct], args: tuple, ptrs: dict | None = None) -> bytes | None:
    """An operator's words for vki_graph_packed_add, or None where an argument is not a plain int, float, numpy
    array, None pointer or Ref of the kind the direct call takes (that call then converts or refuses it).
    `ptrs`: id -> (array, address) of small arrays seen before (held, so the id is not reused while kept)."""
    index, letters, st = packer
    if len(args) != len(letters):
        return None
    flat: list = [index]
    append = flat.append
    for a, c in zip(args, letters, strict=True):
        t = type(a)
        if t is int:  # the common case first: an integer or float argument
            if c == "p" or c == "R":
                return None  # an address given as an int: the direct call (what it points at is the caller's)
            append(a)
        elif t is Ref:
            if c != "R":
                return None
            x, y, z = a
            if not (type(x) is int and type(y) is int and type(z) is int) \
                    and not (_is_int(x) and _is_int(y) and _is_int(z)):
                return None
            flat += a
        elif t is np.ndarray and c == "p":
            hit = None if ptrs is None else ptrs.get(id(a))
            if hit is not None and hit[0] is a:
                append(hit[1])
            else:
                p = _ptr(a)
                if ptrs is not None and a.nbytes <= _PTR_CACHE_BYTES and len(ptrs) < _PTR_CACHE:
                    ptrs[id(a)] = (a, p)
                append(p)
        elif a is None and c == "p":
            append(0)
        elif (c == "f" and (t is float or t is bool or isinstance(a, (np.floating, np.integer)))) \
                or (c in "IiQ" and _is_int(a)):
            append(a)  # a float argument takes real scalars only (the direct call passes an array's address)
        else:
            return None  # `checked` passes other objects to ctypes as they are, which converts them its own way
    try:
        return st.pack(*flat)
    except (struct.error, OverflowError, TypeError, ValueError):
        return None  # out of int64's range or not a number: the direct call gives the error it always gave


def __getattr__(name: str) -> dict[str, list]:
    """`SIGNATURES`: operator name -> ctypes argument types after the graph handle, as the library's table gives
    them (`_read_signatures`). Read when first asked for: importing this module loads no library."""
    if name == "SIGNATURES":
        return _declare(lib())._vki_graph_signatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _declare(so: ctypes.CDLL) -> ctypes.CDLL:
    if getattr(so, "_vki_graph_declared", False):
        return so
    so.vki_graph_create.argtypes = [_u64, _u32, _vp, ctypes.POINTER(_vp)]
    so.vki_graph_destroy.argtypes = [_vp]
    so.vki_graph_run.argtypes = [_vp, _vp, _u32]
    so.vki_graph_op_count.argtypes = [_vp]
    so.vki_graph_op_count.restype = _u32
    so.vki_graph_op_name.argtypes = [_vp, _u32]
    so.vki_graph_op_name.restype = ctypes.c_char_p
    so.vki_graph_set_profiling.argtypes = [_vp, _i32]
    so.vki_graph_op_ns.argtypes = [_vp, _u32]
    so.vki_graph_op_ns.restype = _u64
    so.vki_graph_overhead_ns.argtypes = [_vp]
    so.vki_graph_overhead_ns.restype = _u64
    so.vki_graph_reset_profile.argtypes = [_vp]
    so.vki_graph_write.argtypes = [_vp, _u64, _vp, _u64]
    so._vki_graph_signatures = _read_signatures(so)
    for op, types in so._vki_graph_signatures.items():
        getattr(so, f"vki_graph_add_{op}").argtypes = [_vp, *types]
    if so._vki_graph_packers:
        so.vki_graph_packed_add.argtypes = [_vp, ctypes.c_char_p, _u64]
    so._vki_graph_declared = True
    return so


def _arg(v):
    """numpy arrays go as their data address (kept alive by the caller), refs as structs."""
    if isinstance(v, Ref):
        return v.c()
    if isinstance(v, np.ndarray):
        return _ptr(v)
    return v


class NativeGraph:
    """A native graph: an arena of `arena_bytes` and external buffers of `ext_bytes` bytes each."""

    def __init__(self, arena_bytes: int, ext_bytes: Sequence[int]):
        so = _declare(lib())
        self._so = so
        self.ext_bytes = [int(b) for b in ext_bytes]
        sizes = (_u64 * max(1, len(self.ext_bytes)))(*self.ext_bytes)
        handle = _vp()
        _check(so.vki_graph_create(int(arena_bytes), len(self.ext_bytes), sizes, ctypes.byref(handle)), "native graph")
        self.handle = handle
        self.arena_bytes = int(arena_bytes)
        self._ptrs_type = _vp * max(1, len(self.ext_bytes))
        self._packers = so._vki_graph_packers
        self._add_packed = so.vki_graph_packed_add if self._packers else None
        self._ptr_memo: dict[int, tuple[np.ndarray, int]] = {}  # _pack's `ptrs`
        self._last_packed: dict[str, tuple[tuple, bytes, struct.Struct]] = {}  # _pack_like_last's, per operator
        self._form_words: dict[int, tuple[tuple, bytes, struct.Struct]] = {}  # add_form's: id -> (form, words, tail)
        self._run = so.vki_graph_run
        # The plan runner's arguments, fixed per graph: vki_graph_run's address in the library loaded above (so
        # the ASan build or another worktree's library is the one called) and the expected sizes.
        self._fast = (ctypes.cast(so.vki_graph_run, _vp).value, handle.value, tuple(self.ext_bytes)) \
            if _planrun is not None else None

    def add(self, op: str, *args) -> None:
        """Append operator `op` (SIGNATURES) with its C arguments; arrays are copied by C or kept by the op.

        Plain arguments go packed, in one call of three (vki_graph_packed_add checks every integer against its C
        type as `checked` does here: 6.6 us a node where the call below took 22.5 on a 20k-node QLinearAdd chain);
        where that call refuses, the direct call below runs, so an error is the one it always was."""
        packer = self._packers.get(op)
        if packer is not None:
            words = self._pack_like_last(op, packer, args)
            if words is not None and self._add_packed(self.handle, words, len(words) >> 3) == 0:
                return
        fn = getattr(self._so, f"vki_graph_add_{op}")
        types = self._so._vki_graph_signatures[op]
        if len(args) != len(types):
            raise ValueError(f"internal: native {op} takes {len(types)} arguments, got {len(args)}")
        args = [checked(f"native {op} argument {i}", a, t) for i, (a, t) in enumerate(zip(args, types, strict=True))]
        _check(fn(self.handle, *[_arg(a) for a in args]), f"native {op}")

    def add_form(self, op: str, form: tuple, *refs) -> None:
        """add(op, *form, *refs) where `form` (the operator's arguments before its trailing refs) is one tuple many
        nodes share (a lowering's memoised form): its words are packed once per form object and only the refs per
        call (a chain node's add was 3.4 us with `_pack_like_last` comparing its ten to fourteen arguments one by
        one; the same words, so the same checks and errors: anything but plain int Refs takes `add`)."""
        hit = self._form_words.get(id(form))
        if hit is not None and hit[0] is form and len(refs) * 24 == hit[2].size:
            w = _ref_words(hit[2], refs)
            if w and self._add_packed(self.handle, hit[1] + w, (len(hit[1]) + len(w)) >> 3) == 0:
                return
        self.add(op, *form, *refs)
        last = self._last_packed.get(op)  # what add packed for this form (its words before the refs), if it did
        if last is not None and len(last[0]) == len(form) and all(a is b for a, b in zip(last[0], form, strict=True)) \
                and len(self._form_words) < _PTR_CACHE:
            self._form_words[id(form)] = (form, last[1], last[2])

    def _pack_like_last(self, op: str, packer: tuple, args: tuple) -> bytes | None:
        """`_pack(packer, args)`, its words before the trailing refs taken from the last call of `op` where those
        arguments are the same objects (a chain's nodes pass one memoised form: packing it was 3.1 of a QLinearAdd
        node's 4.7 us); only the refs are then checked and packed, by the rules `_pack` applies to them."""
        last = self._last_packed.get(op)
        if last is not None:
            prefix, words, tail = last
            n = len(prefix)
            if len(args) == n + tail.size // 24:
                for a, b in zip(prefix, args, strict=False):
                    if a is not b:
                        break
                else:
                    w = _ref_words(tail, args[n:])
                    if w is None:
                        return _pack(packer, args, self._ptr_memo)
                    return words + w if w else None
        out = _pack(packer, args, self._ptr_memo)
        letters = packer[1]
        refs = len(letters) - len(letters.rstrip("R"))
        if out is not None and refs and len(args) == len(letters):
            n = len(args) - refs
            tail = _TAILS.get(refs) or _TAILS.setdefault(refs, struct.Struct("<" + "qqq" * refs))
            self._last_packed[op] = (args[:n], out[:len(out) - tail.size], tail)
        return out

    def write(self, offset: int, data: np.ndarray) -> None:
        """Copy `data`'s bytes into the arena at `offset` (constant operands, once, before any run)."""
        b = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        _check(self._so.vki_graph_write(self.handle, int(offset), _ptr(b), b.size), "native graph write")

    def run(self, ext: Sequence[np.ndarray], threads: int = 0) -> None:
        """Run every operator once; ext[k] is external buffer k (a C-contiguous array of exactly that size)."""
        fast = self._fast
        if fast is not None:
            # 0.3 us where the ctypes path below takes 1.6 (an 8x8x8 3x3 convolution computes in 0.66 us)
            if len(ext) != len(fast[2]):
                raise ValueError(f"internal: {len(ext)} external buffers for a graph of {len(fast[2])}")
            status = _planrun.run(fast[0], fast[1], tuple(ext), fast[2], threads)
            if status:
                _check(status, "native graph run")
            return
        sizes = self.ext_bytes
        if len(ext) != len(sizes):
            raise ValueError(f"internal: {len(ext)} external buffers for a graph of {len(sizes)}")
        ptrs = self._ptrs_type()  # per call: concurrent runs must not share it
        for k, a in enumerate(ext):
            if a.nbytes != sizes[k] or not a.flags.c_contiguous:
                raise ValueError(f"internal: external buffer {k} is {a.nbytes} bytes, the graph needs {sizes[k]}")
            ptrs[k] = _ptr(a)
        status = self._run(self.handle, ptrs, threads)
        if status:
            _check(status, "native graph run")

    def ops(self) -> list[str]:
        """The operators' names in order ("conv:avx512vnni", "lut1", ...)."""
        so = self._so
        return [so.vki_graph_op_name(self.handle, i).decode() for i in range(so.vki_graph_op_count(self.handle))]

    def profile(self, on: bool = True) -> None:
        """Turn per-operator timers on (and reset them) or off."""
        self._so.vki_graph_reset_profile(self.handle)
        self._so.vki_graph_set_profiling(self.handle, int(on))

    def times_ns(self) -> tuple[list[int], int]:
        """(per-operator ns, ns spent in the run loop outside the operators), summed since `profile()`."""
        so, h = self._so, self.handle
        return [so.vki_graph_op_ns(h, i) for i in range(so.vki_graph_op_count(h))], so.vki_graph_overhead_ns(h)

    def __del__(self):
        if getattr(self, "handle", None):
            self._so.vki_graph_destroy(self.handle)
            self.handle = None
