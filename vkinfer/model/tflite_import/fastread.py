"""A subgraph's tensors and operators read straight from the flatbuffer with `struct`, for reader.py.

The generated `tflite` classes take about 100 us of Python calls per tensor (each field is an object, a vtable
walk and type checks): 5 s of a 20k-layer TFLite chain's load, with file_meta reading every tensor again. Here a
tensor is a vtable read and a few `unpack_from`s, read once for both.

The values are the ones the `tflite` classes give, read at the same offsets. This reader is stricter: any offset
outside the file (or negative: the flatbuffers runtime raises on those too), an index past its vector, a vtable
running off the end, raises `_Corrupt`; the caller then reads the file again with the `tflite` classes, so that a
corrupt file fails (or, where that runtime reads on regardless, succeeds) exactly as it did, with the same error.
"""

from __future__ import annotations

import struct

import numpy as np
from flatbuffers.table import Table

_U8 = struct.Struct("<B").unpack_from
_I8 = struct.Struct("<b").unpack_from
_U16 = struct.Struct("<H").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_THREE = struct.Struct("<3H").unpack_from
_FOUR = struct.Struct("<4H").unpack_from
_FIVE = struct.Struct("<5H").unpack_from
_SEVEN = struct.Struct("<7H").unpack_from
_EIGHT = struct.Struct("<8H").unpack_from
_F32 = np.dtype("<f4")
_I64 = np.dtype("<i8")


class _Corrupt(Exception):
    """Something this reader does not read the way the flatbuffers runtime would: read the slow way."""


def _slots(b: bytes, n: int, pos: int, count: int) -> tuple[int, ...]:
    """The first `count` vtable entries (field offsets from `pos`, 0 where absent) of the table at `pos`."""
    if pos < 0 or pos + 4 > n:
        raise _Corrupt
    vt = pos - _I32(b, pos)[0]
    if vt < 0 or vt + 4 > n:
        raise _Corrupt
    have = max(0, (_U16(b, vt)[0] - 3) // 2)  # entries at vt + 4 + 2k < vt + vtable length
    if have >= count:
        if vt + 4 + 2 * count > n:
            raise _Corrupt
        return struct.unpack_from(f"<{count}H", b, vt + 4)
    if vt + 4 + 2 * have > n:
        raise _Corrupt
    return struct.unpack_from(f"<{have}H", b, vt + 4) + (0,) * (count - have)


def _vector(b: bytes, n: int, at: int, width: int) -> tuple[int, int]:
    """(start of the data, length) of the vector whose offset is stored at `at`."""
    if at + 4 > n:
        raise _Corrupt
    v = at + _U32(b, at)[0]
    if v + 4 > n:
        raise _Corrupt
    length = _U32(b, v)[0]
    if v + 4 + length * width > n:
        raise _Corrupt
    return v + 4, length


def _ints(b: bytes, n: int, at: int) -> list[int]:
    start, length = _vector(b, n, at, 4)
    return list(struct.unpack_from(f"<{length}i", b, start))


def _table(b: bytes, n: int, at: int) -> int:
    """The table whose offset is stored at `at`."""
    if at + 4 > n:
        raise _Corrupt
    return at + _U32(b, at)[0]


def _tables(b: bytes, n: int, at: int) -> list[int]:
    start, length = _vector(b, n, at, 4)
    return [start + 4 * j + off for j, off in enumerate(struct.unpack_from(f"<{length}I", b, start))]


class RawTensor:
    """A tensor's fields as read: `name` (bytes, None when absent), `shape` (tuple, None when absent), `type`,
    `buffer` (index), `quant` (the QuantizationParameters table's position, None when absent), its `scale`
    (float32 array) and `zero_point` (int64 array; each None when absent or empty), `qdim`, the position `pos` of
    the tensor's table and `sig`, its shape_signature's vtable entry (0: absent), for the file's metadata."""

    __slots__ = ("name", "shape", "type", "buffer", "quant", "scale", "zero_point", "qdim", "pos", "sig")


def tensors(b: bytes, sg: int) -> list[RawTensor]:
    """The tensors of the SubGraph table at `sg`. (The reads are inlined: a struct call raises past the end of the
    file, and the one offset that can go negative, a vtable's, is checked; a short vtable takes `_slots`.)"""
    n = len(b)
    f = _slots(b, n, sg, 1)
    if not f[0]:
        return []
    out = []
    u32, i32, u16 = _U32, _I32, _U16
    # Equal scale (zero point) vectors are one array, made once (the arrays are never written: reader.py's users
    # copy what they hand out); a model's tensors have a few sets, and two numpy calls a tensor were 15% of the read.
    scales: dict[bytes, np.ndarray] = {}
    shapes: dict[bytes, tuple[int, ...]] = {}  # (tuples: never written either)
    zps: dict[bytes, np.ndarray] = {}
    for pos in _tables(b, n, sg + f[0]):
        t = RawTensor()
        t.pos = pos
        vt = pos - i32(b, pos)[0]
        if vt < 0:
            raise _Corrupt
        have = (u16(b, vt)[0] - 3) // 2
        if have >= 8:  # shape_signature's entry too (file_meta reads the field where it is there)
            s_shape, s_type, s_buf, s_name, s_quant, _, _, t.sig = _EIGHT(b, vt + 4)
        elif have >= 5:
            s_shape, s_type, s_buf, s_name, s_quant = _FIVE(b, vt + 4)
            t.sig = 0
        else:
            s_shape, s_type, s_buf, s_name, s_quant = _slots(b, n, pos, 5)
            t.sig = 0
        if s_shape:
            v = pos + s_shape
            v += u32(b, v)[0]
            length = u32(b, v)[0]
            raw = b[v + 4:v + 4 + 4 * length]
            if len(raw) != 4 * length:  # past the end of the file
                raise _Corrupt
            t.shape = shapes.get(raw)
            if t.shape is None:
                t.shape = shapes[raw] = struct.unpack_from(f"<{length}i", b, v + 4)
        else:
            t.shape = None
        t.type = _I8(b, pos + s_type)[0] if s_type else 0
        t.buffer = u32(b, pos + s_buf)[0] if s_buf else 0
        if s_name:  # sliced as the flatbuffers runtime slices it (a length past the end: what is there)
            v = pos + s_name
            v += u32(b, v)[0]
            t.name = b[v + 4:v + 4 + u32(b, v)[0]]
        else:
            t.name = None
        t.scale = t.zero_point = None
        t.qdim = 0
        if s_quant:
            q = pos + s_quant
            q = t.quant = q + u32(b, q)[0]
            vt = q - i32(b, q)[0]
            if vt < 0:
                raise _Corrupt
            have = (u16(b, vt)[0] - 3) // 2
            if have >= 7:
                _, _, s_scale, s_zp, _, _, s_qdim = _SEVEN(b, vt + 4)
            elif have >= 4:  # min, max, scale, zero point (no quantized dimension: a per-tensor one)
                _, _, s_scale, s_zp = _FOUR(b, vt + 4)
                s_qdim = 0
            else:
                _, _, s_scale, s_zp, _, _, s_qdim = _slots(b, n, q, 7)
            if s_scale:
                t.scale = _shared(b, q + s_scale, _F32, scales)
            if s_zp:
                t.zero_point = _shared(b, q + s_zp, _I64, zps)
            if s_qdim:
                t.qdim = i32(b, q + s_qdim)[0]
        else:
            t.quant = None
        out.append(t)
    return out


def _shared(b: bytes, at: int, dt: np.dtype, seen: dict):
    """The vector of `dt` (float32 scales, int64 zero points) whose offset is at `at`, one array per distinct
    content in `seen` (read-only use: shared by every tensor with those bytes); None when empty."""
    v = at + _U32(b, at)[0]
    length = _U32(b, v)[0]
    if not length:
        return None
    raw = b[v + 4:v + 4 + dt.itemsize * length]
    if len(raw) != dt.itemsize * length:  # past the end of the file
        raise _Corrupt
    got = seen.get(raw)
    if got is None:
        got = seen[raw] = np.frombuffer(b, dt, length, v + 4).astype(dt.newbyteorder("="))
    return got


def buffers(b: bytes, model: int) -> list[int]:
    """The Buffer tables of the Model table at `model`."""
    n = len(b)
    f = _slots(b, n, model, 5)
    return _tables(b, n, model + f[4]) if f[4] else []


def buffer_data(b: bytes, pos: int) -> bytes | None:
    """The data of the Buffer table at `pos` (kept after the flatbuffer in large models), None when empty."""
    n = len(b)
    vt = pos - _I32(b, pos)[0] if 0 <= pos else -1  # _slots inlined where the vtable has the three entries
    have = (_U16(b, vt)[0] - 3) // 2 if 0 <= vt else -1
    if have >= 3:
        s_data, s_off, s_size = _THREE(b, vt + 4)
    elif have >= 1:  # the data alone (a buffer inside the flatbuffer)
        (s_data,), s_off, s_size = _U16(b, vt + 4), 0, 0
    else:
        s_data, s_off, s_size = _slots(b, n, pos, 3)
    offset = size = 0
    if s_off:
        if pos + s_off + 8 > n:
            raise _Corrupt
        offset = _U64(b, pos + s_off)[0]
    if offset > 1:
        if s_size:
            if pos + s_size + 8 > n:
                raise _Corrupt
            size = _U64(b, pos + s_size)[0]
        raw = b[offset:offset + size]
    elif s_data:
        start, length = _vector(b, n, pos + s_data, 1)
        raw = b[start:start + length]
    else:
        raw = b""
    return raw or None


def operators(b: bytes, sg: int, codes: list[int]) -> list[tuple]:
    """(builtin code, inputs, outputs, options type, options Table or None) of each op of the SubGraph at `sg`;
    an opcode index out of range raises ValueError (as reader.parse_subgraph did)."""
    n = len(b)
    f = _slots(b, n, sg, 4)
    if not f[3]:
        return []
    ops = []
    i32, u16 = _I32, _U16
    for pos in _tables(b, n, sg + f[3]):
        vt = pos - i32(b, pos)[0]  # _slots inlined where the vtable has the five entries (raises past the end)
        if 0 <= vt and (u16(b, vt)[0] - 3) // 2 >= 5:
            s_code, s_in, s_out, s_otype, s_opts = _FIVE(b, vt + 4)
        else:
            s_code, s_in, s_out, s_otype, s_opts = _slots(b, n, pos, 5)
        code = 0
        if s_code:
            if pos + s_code + 4 > n:
                raise _Corrupt
            code = _U32(b, pos + s_code)[0]
        if not 0 <= code < len(codes):
            raise _Corrupt  # the slow reader names it
        otype = 0
        if s_otype:
            if pos + s_otype >= n:
                raise _Corrupt
            otype = _U8(b, pos + s_otype)[0]
        opts = Table(b, _table(b, n, pos + s_opts)) if s_opts else None
        ops.append((codes[code], _ints(b, n, pos + s_in) if s_in else [], _ints(b, n, pos + s_out) if s_out else [],
                    otype, opts))
    return ops


def io(b: bytes, sg: int) -> tuple[list[int], list[int]]:
    """The SubGraph's input and output tensor indices."""
    n = len(b)
    _, s_in, s_out = _slots(b, n, sg, 3)
    return _ints(b, n, sg + s_in) if s_in else [], _ints(b, n, sg + s_out) if s_out else []


def shape_signature(b: bytes, t: RawTensor) -> list[int] | None:
    """The tensor's shape_signature, None when the file has none (or an empty one)."""
    if not t.sig:
        return None
    sig = _ints(b, len(b), t.pos + t.sig)
    return sig or None


# Options classes whose FusedActivationFunction is their first field, an int8 (field 0: vtable entry 4).
_ACTIVATION_FIRST = ("AddOptions", "MulOptions")


def fused_activation(opts) -> int:
    """opts.FusedActivationFunction() of an ADD's or MUL's options (the flatbuffers runtime's checked reads were 2
    us an op, read twice), read at the same offsets where the table and its vtable lie plainly inside the file;
    anything else (another class, an odd offset) by the method itself: the same value or error."""
    if type(opts).__name__ in _ACTIVATION_FIRST:
        tab = opts._tab
        b, pos = tab.Bytes, tab.Pos
        n = len(b)
        if type(b) is bytes and 0 <= pos and pos + 4 <= n:
            vt = pos - _I32(b, pos)[0]
            if 0 <= vt and vt + 6 <= n:
                o = _U16(b, vt + 4)[0] if 4 < _U16(b, vt)[0] else 0
                if not o:
                    return 0
                if pos + o < n:
                    return _I8(b, pos + o)[0]
    return opts.FusedActivationFunction()
