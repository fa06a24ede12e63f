"""A subgraph's tensors read column by column with numpy, for reader.py: the fields fastread.tensors reads, at the
same offsets, gathered for every tensor at once (a flatbuffer's tensors share a few vtables, so each field lies at
one offset from its table in every tensor that shares one).

fastread.tensors read a tensor with a dozen `unpack_from`s and two objects (4-5 us a tensor, 40% of a long TFLite
chain's import); here a tensor costs its name's slice and its share of a few array operations. Every position is
checked against the file (a negative one too: numpy would index from the end); anything odd (a position outside
the file, many distinct vtables) raises fastread._Corrupt or `NotBulk`, and the caller reads the subgraph the
per-tensor way (or with the tflite classes), which gives the same values or error."""

from __future__ import annotations

import numpy as np
from flatbuffers.table import Table

from .fastread import _Corrupt, _slots, _vector
from .fastread import buffer_data as fastread_buffer_data

_MAX_VTABLES = 64  # more distinct vtables than this: the per-tensor reader


class NotBulk(Exception):
    """The subgraph is read the per-tensor way (fastread.tensors): no error in the file implied."""


class _Views:
    """Overlapping views of the file: view(fmt)[k] is the value of type `fmt` at byte k (unaligned reads)."""

    def __init__(self, b: bytes):
        self.b, self.n, self._v = b, len(b), {}

    def at(self, fmt: str, pos: np.ndarray) -> np.ndarray:
        """The `fmt` values at byte positions `pos`; _Corrupt where one lies outside the file."""
        dt = np.dtype(fmt)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) + dt.itemsize > self.n):
            raise _Corrupt
        v = self._v.get(fmt)
        if v is None:
            count = self.n - dt.itemsize + 1
            if count <= 0:
                raise _Corrupt
            v = self._v[fmt] = np.ndarray((count,), dt, buffer=self.b, offset=0, strides=(1,))
        return v[pos]

    def rows(self, fmt: str, start: np.ndarray, length: int) -> np.ndarray:
        """(len(start), length) values of `fmt`, row k from byte start[k] on."""
        dt = np.dtype(fmt)
        pos = start[:, None] + dt.itemsize * np.arange(length, dtype=np.int64)[None, :]
        return self.at(fmt, pos.reshape(-1)).reshape(len(start), length)


def _table_slots(b: bytes, n: int, P: np.ndarray, V: _Views, count: int) -> np.ndarray:
    """(len(P), count) vtable entries of the tables at P (as _slots reads them), computed once per vtable."""
    vt = P - V.at("<i4", P).astype(np.int64)
    if vt.size and int(vt.min()) < 0:
        raise _Corrupt
    uniq, first, inv = np.unique(vt, return_index=True, return_inverse=True)
    if len(uniq) > _MAX_VTABLES:
        raise NotBulk
    table = np.array([_slots(b, n, int(P[k]), count) for k in first], np.int64).reshape(len(uniq), count)
    return table[inv.reshape(-1)]


def _deref(V: _Views, at: np.ndarray) -> np.ndarray:
    """The positions the offsets stored at `at` point to (a vector's length, a table)."""
    return at + V.at("<u4", at).astype(np.int64)


def _factorize(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first row of each distinct row, each row's group) of the rows of `m`, from its bytes read
    as 64-bit chunks, one 1-D np.unique a chunk (np.unique over rows sorts them as records: 40x slower)."""
    if (m == m[0]).all():  # one content (bits compared: the rows are integers): no sort
        return np.zeros(1, np.int64), np.zeros(len(m), np.int64)
    w = m.shape[1] * m.itemsize
    raw = np.zeros((len(m), -(-w // 8) * 8), np.uint8)
    raw[:, :w] = np.ascontiguousarray(m).view(np.uint8).reshape(len(m), w)
    chunks = raw.view(np.uint64).T
    if len(chunks) == 1:
        _, first, inv = np.unique(chunks[0], return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    key = np.zeros(len(m), np.int64)
    for chunk in chunks:
        u, inv = np.unique(chunk, return_inverse=True)
        key = key * len(u) + inv.reshape(-1)
        _, key = np.unique(key, return_inverse=True)
        key = key.reshape(-1)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def _objects(values: list) -> np.ndarray:
    """`values` as a 1-D object array (tuples and arrays kept whole)."""
    a = np.empty(len(values), object)
    for j, v in enumerate(values):
        a[j] = v
    return a


def _shared_rows(V: _Views, start: np.ndarray, length: np.ndarray, fmt: str, make) -> np.ndarray:
    """For each k, make(values) of the `length[k]` values of `fmt` from byte start[k] (an object array), one
    object per distinct content (shared: never written); the rows grouped by length, distinct rows made once."""
    out = np.empty(len(start), object)
    for L in np.unique(length).tolist():
        sel = np.nonzero(length == L)[0]
        if L == 0:
            out[sel] = _objects([make(np.zeros(0, fmt))])[np.zeros(len(sel), np.int64)]
            continue
        m = V.rows(fmt, start[sel], L)
        first, inv = _factorize(m)
        out[sel] = _objects([make(m[j]) for j in first.tolist()])[inv]
    return out


def _scatter(count: int, idx: np.ndarray, values, fill=None) -> list:
    """A list of `count` items: values[j] at idx[j], `fill` elsewhere."""
    out = np.full(count, fill, object)
    out[idx] = values
    return out.tolist()


class Columns:
    """A subgraph's tensors as read, field by field (lists indexed by tensor; see fastread.RawTensor)."""

    __slots__ = ("name", "shape", "type", "buffer", "quant", "scale", "zero_point", "qdim", "pos", "sig")


def tensors(b: bytes, sg: int) -> Columns:
    """The tensors of the SubGraph table at `sg`, as fastread.tensors reads them, in columns."""
    n = len(b)
    c = Columns()
    f = _slots(b, n, sg, 1)
    count = 0
    if f[0]:
        start, count = _vector(b, n, sg + f[0], 4)
    V = _Views(b)
    P = np.arange(count, dtype=np.int64) * 4 + start + np.frombuffer(b, "<u4", count, start) if count else (
        np.zeros(0, np.int64))
    S = _table_slots(b, n, P, V, 8) if count else np.zeros((0, 8), np.int64)
    c.pos, c.sig = P.tolist(), S[:, 7].tolist()
    # shape: a tuple per distinct content (None where absent)
    has = np.nonzero(S[:, 0])[0]
    c.shape = [None] * count
    if has.size:
        v = _deref(V, P[has] + S[has, 0])
        length = V.at("<u4", v).astype(np.int64)
        if int((v + 4 + 4 * length).max()) > n:
            raise _Corrupt
        c.shape = _scatter(count, has, _shared_rows(V, v + 4, length, "<i4", lambda r: tuple(r.tolist())))
    typ = np.zeros(count, np.int64)
    sel = np.nonzero(S[:, 1])[0]
    typ[sel] = V.at("<i1", P[sel] + S[sel, 1])
    c.type = typ.tolist()
    buf = np.zeros(count, np.int64)
    sel = np.nonzero(S[:, 2])[0]
    buf[sel] = V.at("<u4", P[sel] + S[sel, 2])
    c.buffer = buf.tolist()
    c.name = [None] * count
    sel = np.nonzero(S[:, 3])[0]
    if sel.size:  # sliced as the flatbuffers runtime slices it (a length past the end: what is there)
        v = _deref(V, P[sel] + S[sel, 3])
        length = V.at("<u4", v)
        names = np.empty(len(sel), object)
        names[:] = [b[s:e] for s, e in zip((v + 4).tolist(), (v + 4 + length).tolist(), strict=True)]
        c.name = _scatter(count, sel, names)
    _quantization(b, n, V, P, S[:, 4], c)
    return c


def _quantization(b: bytes, n: int, V: _Views, P: np.ndarray, slot: np.ndarray, c: Columns) -> None:
    """The QuantizationParameters of each tensor: its position, scale (float32) and zero point (int64) arrays,
    one per distinct vector (None where absent or empty), quantized dimension."""
    count = len(P)
    c.quant, c.scale, c.zero_point, c.qdim = [None] * count, [None] * count, [None] * count, [0] * count
    has = np.nonzero(slot)[0]
    if not has.size:
        return
    q = _deref(V, P[has] + slot[has])
    c.quant = _scatter(count, has, q)
    Q = _table_slots(b, n, q, V, 7)
    for col, name, fmt, dt in ((2, "scale", "<u4", np.dtype("<f4")), (3, "zero_point", "<i8", np.dtype("<i8"))):
        sel = np.nonzero(Q[:, col])[0]
        if not sel.size:
            continue
        v = _deref(V, q[sel] + Q[sel, col])
        length = V.at("<u4", v).astype(np.int64)
        if int((v + 4 + dt.itemsize * length).max()) > n:
            raise _Corrupt
        keep = np.nonzero(length)[0]  # an empty vector: None
        made = _shared_rows(V, v[keep] + 4, length[keep], fmt, lambda r, dt=dt, fmt=fmt: np.frombuffer(
            r.astype(fmt).tobytes(), dt).astype(dt.newbyteorder("=")))  # (the bytes read as the values' type)
        setattr(c, name, _scatter(count, has[sel[keep]], made))
    sel = np.nonzero(Q[:, 6])[0]
    if sel.size:
        qdim = np.zeros(count, np.int64)
        qdim[has[sel]] = V.at("<i4", q[sel] + Q[sel, 6])
        c.qdim = qdim.tolist()


def from_raw(raws: list) -> Columns:
    """Columns of fastread.tensors' RawTensors (a subgraph the bulk reader leaves to it)."""
    c = Columns()
    for f in Columns.__slots__:
        setattr(c, f, [getattr(t, f) for t in raws])
    return c


def _int_lists(V: _Views, n: int, at: np.ndarray) -> list[list[int]]:
    """The int32 vectors whose offsets are stored at `at`, as lists (fastread._ints of each)."""
    v = _deref(V, at)
    length = V.at("<u4", v).astype(np.int64)
    if v.size and int((v + 4 + 4 * length).max()) > n:
        raise _Corrupt
    out: list = [None] * len(at)
    for L in np.unique(length).tolist():
        sel = np.nonzero(length == L)[0]
        rows = V.rows("<i4", v[sel] + 4, L).tolist() if L else [[] for _ in range(len(sel))]
        for k, r in zip(sel.tolist(), rows, strict=True):
            out[k] = r
    return out


def operators(b: bytes, sg: int, codes: list[int]) -> list[tuple]:
    """fastread.operators of the SubGraph at `sg`, every op's fields gathered at once."""
    n = len(b)
    f = _slots(b, n, sg, 4)
    if not f[3]:
        return []
    start, count = _vector(b, n, sg + f[3], 4)
    if not count:
        return []
    V = _Views(b)
    P = np.arange(count, dtype=np.int64) * 4 + start + np.frombuffer(b, "<u4", count, start)
    S = _table_slots(b, n, P, V, 5)
    code = np.zeros(count, np.int64)
    sel = np.nonzero(S[:, 0])[0]
    code[sel] = V.at("<u4", P[sel] + S[sel, 0])
    if int(code.min()) < 0 or int(code.max()) >= len(codes):
        raise _Corrupt  # the slow reader names it
    builtin = np.array(codes, np.int64)[code].tolist()
    empty: list = [[] for _ in range(count)]
    ins, outs = list(empty), [[] for _ in range(count)]
    for col, lists in ((1, ins), (2, outs)):
        sel = np.nonzero(S[:, col])[0]
        for k, r in zip(sel.tolist(), _int_lists(V, n, P[sel] + S[sel, col]), strict=True):
            lists[k] = r
    otype = np.zeros(count, np.int64)
    sel = np.nonzero(S[:, 3])[0]
    otype[sel] = V.at("<u1", P[sel] + S[sel, 3])
    opts: list = [None] * count
    sel = np.nonzero(S[:, 4])[0]
    for k, pos in zip(sel.tolist(), _deref(V, P[sel] + S[sel, 4]).tolist(), strict=True):
        opts[k] = Table(b, pos)
    return list(zip(builtin, ins, outs, otype.tolist(), opts, strict=True))


def buffer_data(b: bytes, bufs: list[int], index: list[int]) -> list[bytes | None]:
    """fastread.buffer_data of the Buffer tables bufs[i] for i in `index`, gathered at once (data past the
    flatbuffer, at offsets above 1, read one by one)."""
    n = len(b)
    if not index:
        return []
    idx = np.array(index, np.int64)
    if int(idx.min()) < 0 or int(idx.max()) >= len(bufs):
        raise _Corrupt
    V = _Views(b)
    P = np.array(bufs, np.int64)[idx]
    S = _table_slots(b, n, P, V, 3)
    out: list = [None] * len(P)
    far = np.zeros(len(P), bool)
    sel = np.nonzero(S[:, 1])[0]
    far[sel] = V.at("<u8", P[sel] + S[sel, 1]) > 1
    for k in np.nonzero(far)[0].tolist():
        out[k] = fastread_buffer_data(b, int(P[k]))
    sel = np.nonzero(~far & (S[:, 0] != 0))[0]
    if sel.size:
        v = _deref(V, P[sel] + S[sel, 0])
        length = V.at("<u4", v).astype(np.int64)
        if int((v + 4 + length).max()) > n:
            raise _Corrupt
        for k, s, e in zip(sel.tolist(), (v + 4).tolist(), (v + 4 + length).tolist(), strict=True):
            out[k] = b[s:e] or None
    return out
