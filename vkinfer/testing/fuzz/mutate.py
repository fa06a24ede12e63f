"""Structure-aware mutations of model files: ONNX through a generic protobuf wire-format tree, TFLite through the
offsets of its flatbuffer's fields, and plain byte edits for both.

Every mutator takes the model's bytes and a `random.Random` and returns (what it did, the new bytes), so a plain
seeded loop and atheris's custom mutator share them. The readers never trust their input (a mutated file is
mutated again): a file that does not parse falls back to byte edits.

The vocabulary is the one the attack on issue 26 used: a varint field set to an interesting value ("varint field
8@174 1->4294967296"), fields deleted, duplicated, swapped or spliced from another place or model, a string
replaced by another of the model's names, raw data cut or flipped; TFLite tensor shapes, op input/output indices,
buffer and opcode indices, options, quantization scales and zero points set to edge values.
"""

from __future__ import annotations

import copy
import random
import struct
from collections.abc import Sequence

# Sizes and counts at and around every boundary vkinfer narrows or multiplies through.
INTERESTING_INTS = (0, 1, 2, 3, 4, 7, 8, 16, 64, 255, 256, 65535, 65536, 1 << 20, 1 << 24, 2 ** 31 - 1, 2 ** 31,
                    2 ** 32 - 1, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63 - 1, -1, -2, -128, -(2 ** 31), -(2 ** 63))
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e-38, 3.4e38, -3.4e38, float("inf"), float("-inf"),
                      float("nan"), 1e-10, 65504.0, 2.0 ** 31)


def _int_value(rng: random.Random, old: int) -> int:
    r = rng.random()
    if r < 0.6:
        return rng.choice(INTERESTING_INTS)
    if r < 0.85:
        return old + rng.choice((-1, 1, -2, 2))
    return rng.getrandbits(rng.choice((8, 16, 32, 64)))


# ------------------------------------------------------------------------------------------------- byte edits

def mutate_bytes(blob: bytes, rng: random.Random, donors: Sequence[bytes] = ()) -> tuple[str, bytes]:
    """Flip bits, set a run of bytes, truncate, duplicate a span, or splice a span of another model in."""
    if not blob:
        return "extend empty", bytes(rng.getrandbits(8) for _ in range(8))
    b = bytearray(blob)
    kind = rng.choice(("flip", "flip", "set", "truncate", "copy", "splice"))
    if kind == "flip":
        k = rng.randint(1, 8)
        for _ in range(k):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return f"flip {k} bits", bytes(b)
    if kind == "set":
        p = rng.randrange(len(b))
        v = rng.choice((0, 0xFF, 0x7F, 0x80, 1))
        n = min(rng.choice((1, 2, 4, 8)), len(b) - p)
        b[p:p + n] = bytes([v]) * n
        return f"set {n} bytes at {p} to {v:#x}", bytes(b)
    if kind == "truncate":
        p = rng.randrange(len(b))
        return f"truncate at {p}", bytes(b[:p])
    if kind == "splice" and donors:
        o = rng.choice(donors)
        p, q, n = rng.randrange(len(b)), rng.randrange(max(1, len(o))), rng.randint(1, 256)
        return f"splice {n} bytes of a donor at {p}", bytes(b[:p]) + o[q:q + n] + bytes(b[p + n:])
    p, q, n = rng.randrange(len(b)), rng.randrange(len(b)), rng.randint(1, 64)
    return f"copy {n} bytes from {p} to {q}", bytes(b[:q]) + bytes(b[p:p + n]) + bytes(b[q + n:])


# --------------------------------------------------------------------------------------------- protobuf (ONNX)

class PbField:
    """One wire-format field: number, wire type, value (int for varints, bytes otherwise) and, for a
    length-delimited value that parses as a message, its fields (`kids`, which then define the value)."""

    __slots__ = ("num", "wt", "val", "kids", "pos")

    def __init__(self, num: int, wt: int, val, kids: list | None, pos: int):
        self.num, self.wt, self.val, self.kids, self.pos = num, wt, val, kids, pos


def _varint(b: bytes, p: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if p >= len(b) or shift > 63:
            raise ValueError("bad varint")
        c = b[p]
        p += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            if c == 0 and shift > 7:  # not minimal: re-encoding would change bytes nobody edited
                raise ValueError("non-minimal varint")
            return v, p


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def pb_parse(b: bytes, base: int = 0, depth: int = 0) -> list[PbField] | None:
    """The fields of `b` as a message, or None when `b` is not one (sub-messages parsed to depth 8)."""
    fields: list[PbField] = []
    p = 0
    try:
        while p < len(b):
            start = p
            key, p = _varint(b, p)
            num, wt = key >> 3, key & 7
            if num == 0:
                return None
            if wt == 0:
                val, p = _varint(b, p)
                kids = None
            elif wt in (1, 5):
                n = 8 if wt == 1 else 4
                if p + n > len(b):
                    return None
                val, p = b[p:p + n], p + n
                kids = None
            elif wt == 2:
                n, p = _varint(b, p)
                if p + n > len(b):
                    return None
                val, p = b[p:p + n], p + n
                kids = pb_parse(val, base + p - n, depth + 1) if depth < 8 and len(val) >= 2 else None
            else:
                return None
            fields.append(PbField(num, wt, val, kids, base + start))
    except ValueError:
        return None
    return fields


def pb_dump(fields: Sequence[PbField]) -> bytes:
    """The wire bytes of `fields` (lengths recomputed from the kids)."""
    out = bytearray()
    for f in fields:
        out += _enc_varint(f.num << 3 | f.wt)
        if f.wt == 0:
            out += _enc_varint(f.val)
        elif f.wt == 2:
            v = pb_dump(f.kids) if f.kids is not None else f.val
            out += _enc_varint(len(v)) + v
        else:
            out += f.val
    return bytes(out)


def _walk(fields: list[PbField], out: list) -> list[tuple[list[PbField], int]]:
    for i, f in enumerate(fields):
        out.append((fields, i))
        if f.kids is not None:
            _walk(f.kids, out)
    return out


def mutate_onnx(blob: bytes, rng: random.Random, donors: Sequence[bytes] = ()) -> tuple[str, bytes]:
    """One protobuf-level edit of a model (or a byte edit when it does not parse, and one time in ten)."""
    tree = pb_parse(blob) if rng.random() >= 0.1 else None
    if not tree:
        return mutate_bytes(blob, rng, donors)
    slots = _walk(tree, [])
    kind = rng.choice(("varint", "varint", "varint", "fixed", "delete", "dup", "swap", "splice", "string",
                       "bytes"))
    if kind == "varint":
        cand = [s for s in slots if s[0][s[1]].wt == 0]
        if cand:
            parent, i = rng.choice(cand)
            f = parent[i]
            old, f.val = f.val, _int_value(rng, f.val) & ((1 << 64) - 1)
            return f"varint field {f.num}@{f.pos} {old}->{f.val}", pb_dump(tree)
        kind = "delete"
    if kind == "fixed":
        cand = [s for s in slots if s[0][s[1]].wt in (1, 5)]
        if cand:
            parent, i = rng.choice(cand)
            f = parent[i]
            if f.wt == 5:
                v = rng.choice(INTERESTING_FLOATS)
                f.val = struct.pack("<f", v)
            else:
                v = rng.choice(INTERESTING_INTS)
                f.val = struct.pack("<Q", v & ((1 << 64) - 1))
            return f"fixed field {f.num}@{f.pos} -> {v!r}", pb_dump(tree)
        kind = "delete"
    parent, i = rng.choice(slots)
    f = parent[i]
    if kind == "delete":
        del parent[i]
        return f"delete field {f.num}@{f.pos}", pb_dump(tree)
    if kind == "dup":
        for _ in range(rng.choice((1, 1, 2, 7))):
            parent.insert(i, copy.deepcopy(f))
        return f"dup field {f.num}@{f.pos}", pb_dump(tree)
    if kind == "swap" and len(parent) > 1:
        j = rng.randrange(len(parent))
        parent[i], parent[j] = parent[j], parent[i]
        return f"swap fields {f.num}@{f.pos} {parent[i].num}@{parent[i].pos}", pb_dump(tree)
    if kind == "splice":
        donor = pb_parse(rng.choice(donors)) if donors and rng.random() < 0.5 else None
        src = rng.choice(_walk(donor, [])) if donor else rng.choice(slots)
        g = copy.deepcopy(src[0][src[1]])
        msgs = [s for s in slots if s[0][s[1]].kids is not None]
        into = tree
        if msgs and rng.random() < 0.7:
            host = rng.choice(msgs)
            into = host[0][host[1]].kids
        into.insert(rng.randint(0, len(into)), g)
        return f"splice field {g.num} into {f.num}@{f.pos}", pb_dump(tree)
    strings = [s[0][s[1]] for s in slots if s[0][s[1]].wt == 2 and len(s[0][s[1]].val) < 64]
    if kind == "string" and strings and f.wt == 2:
        new = rng.choice(strings).val if rng.random() < 0.8 else rng.choice((b"", b"x", b"\xff\xfe", b"a" * 300))
        old, f.val, f.kids = f.val, new, None
        return f"string field {f.num}@{f.pos} {old[:24]!r}->{new[:24]!r}", pb_dump(tree)
    if f.wt == 2 and f.kids is None and f.val:
        what, f.val = mutate_bytes(f.val, rng)
        return f"bytes of field {f.num}@{f.pos}: {what}", pb_dump(tree)
    return mutate_bytes(blob, rng, donors)


# ------------------------------------------------------------------------------------------- flatbuffer (TFLite)

class _Fb:
    """Bounds-checked reads of a flatbuffer (any bad offset raises ValueError)."""

    def __init__(self, b: bytes):
        self.b = b

    def _u(self, fmt: str, p: int) -> int:
        if p < 0 or p + struct.calcsize(fmt) > len(self.b):
            raise ValueError("offset out of range")
        return struct.unpack_from(fmt, self.b, p)[0]

    def field(self, tab: int, slot: int) -> int | None:
        """The position of table `tab`'s field `slot`, or None when absent."""
        vt = tab - self._u("<i", tab)
        vt_len = self._u("<H", vt)
        off = 4 + 2 * slot
        if off + 2 > vt_len:
            return None
        o = self._u("<H", vt + off)
        return tab + o if o else None

    def ref(self, p: int) -> int:
        return p + self._u("<I", p)

    def table(self, tab: int, slot: int) -> int | None:
        p = self.field(tab, slot)
        return None if p is None else self.ref(p)

    def vector(self, tab: int, slot: int) -> tuple[int, int]:
        """(start, length) of a vector field, (0, 0) when absent."""
        p = self.field(tab, slot)
        if p is None:
            return 0, 0
        v = self.ref(p)
        n = self._u("<I", v)
        if n > len(self.b):
            raise ValueError("vector too long")
        return v + 4, n


# A slot: (position, struct format, label).
Slot = tuple[int, str, str]


def _int_vector(fb: _Fb, tab: int, slot: int, label: str) -> list[Slot]:
    """An int32 vector's elements and its length."""
    v, m = fb.vector(tab, slot)
    return [(v + 4 * j, "<i", f"{label}[{j}]") for j in range(m)] + ([(v - 4, "<I", f"{label}.len")] if v else [])


def tflite_slots(blob: bytes) -> list[Slot]:
    """Every scalar of a .tflite file worth mutating: tensor shapes, types, buffers and quantization, operator
    codes, op inputs/outputs/options, subgraph inputs/outputs, vector lengths. Empty when it does not parse."""
    fb, out = _Fb(blob), []
    try:
        root = fb.ref(0)
        start, n = fb.vector(root, 1)  # operator_codes
        for k in range(n):
            oc = fb.ref(start + 4 * k)
            for slot, fmt, name in ((0, "<b", "deprecated_code"), (2, "<i", "version"), (3, "<i", "builtin_code")):
                if (p := fb.field(oc, slot)) is not None:
                    out.append((p, fmt, f"opcode{k}.{name}"))
        sgs, nsg = fb.vector(root, 2)
        for s in range(nsg):
            sg = fb.ref(sgs + 4 * s)
            for slot, name in ((1, "inputs"), (2, "outputs")):
                out += _int_vector(fb, sg, slot, f"sg{s}.{name}")
            ts, nt = fb.vector(sg, 0)
            for t in range(nt):
                tab = fb.ref(ts + 4 * t)
                out += _int_vector(fb, tab, 0, f"tensor{t}.shape")
                for slot, fmt, name in ((1, "<B", "type"), (2, "<I", "buffer")):
                    if (p := fb.field(tab, slot)) is not None:
                        out.append((p, fmt, f"tensor{t}.{name}"))
                q = fb.table(tab, 4)
                if q is not None:
                    for slot, fmt, name in ((2, "<f", "scale"), (3, "<q", "zero_point")):
                        v, m = fb.vector(q, slot)
                        out += [(v + struct.calcsize(fmt) * j, fmt, f"tensor{t}.{name}[{j}]") for j in range(min(m, 4))]
                        if m:
                            out.append((v - 4, "<I", f"tensor{t}.{name}.len"))
                    if (p := fb.field(q, 6)) is not None:
                        out.append((p, "<i", f"tensor{t}.quantized_dimension"))
            ops, nop = fb.vector(sg, 3)
            for k in range(nop):
                op = fb.ref(ops + 4 * k)
                if (p := fb.field(op, 0)) is not None:
                    out.append((p, "<I", f"op{k}.opcode_index"))
                for slot, name in ((1, "inputs"), (2, "outputs")):
                    out += _int_vector(fb, op, slot, f"op{k}.{name}")
                if (p := fb.field(op, 3)) is not None:
                    out.append((p, "<B", f"op{k}.options_type"))
                opt = fb.table(op, 4)
                if opt is not None:
                    vt = opt - fb._u("<i", opt)
                    for j in range((fb._u("<H", vt) - 4) // 2):
                        if (p := fb.field(opt, j)) is not None:
                            out.append((p, "<B", f"op{k}.options[{j}]"))
    except (ValueError, struct.error):
        return []
    return [s for s in out if 0 <= s[0] and s[0] + struct.calcsize(s[1]) <= len(blob)]


def mutate_tflite(blob: bytes, rng: random.Random, donors: Sequence[bytes] = ()) -> tuple[str, bytes]:
    """One flatbuffer-level edit (a scalar set to an edge value, or copied from another slot), or a byte edit
    when the file does not parse (and one time in five)."""
    slots = tflite_slots(blob) if rng.random() >= 0.2 else []
    if not slots:
        return mutate_bytes(blob, rng, donors)
    p, fmt, label = rng.choice(slots)
    b = bytearray(blob)
    old = struct.unpack_from(fmt, b, p)[0]
    if fmt == "<f":
        new = rng.choice(INTERESTING_FLOATS)
    elif rng.random() < 0.25:
        q, qfmt, _ = rng.choice([s for s in slots if s[1] == fmt])  # rewire: another slot's value
        new = struct.unpack_from(qfmt, b, q)[0]
    else:
        new = _int_value(rng, old)
        bits = struct.calcsize(fmt) * 8
        new &= (1 << bits) - 1
        if fmt.islower() and fmt[-1] != "f" and new >= 1 << (bits - 1):
            new -= 1 << bits
    struct.pack_into(fmt, b, p, new)
    return f"fb {label}@{p} {old!r}->{new!r}", bytes(b)


def mutate_model(blob: bytes, rng: random.Random, donors: Sequence[bytes] = ()) -> tuple[str, bytes]:
    """One edit of an ONNX or TFLite model, chosen by the file's identifier."""
    if blob[4:8] == b"TFL3":
        return mutate_tflite(blob, rng, donors)
    return mutate_onnx(blob, rng, donors)


__all__ = ["INTERESTING_INTS", "INTERESTING_FLOATS", "mutate_bytes", "mutate_onnx", "mutate_tflite", "mutate_model",
           "pb_parse", "pb_dump", "tflite_slots"]
