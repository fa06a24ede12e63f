"""Reading a TFLite flatbuffer into plain Python objects: tensors (shape, type, constant data, quantization),
operators, each subgraph's inputs and outputs, and the file's names, metadata and signatures (`file_meta`).

Nothing here knows an op's meaning: vkinfer/model/tflite/ops.py holds the op table."""

from __future__ import annotations

import os
import stat

import numpy as np
from flatbuffers.table import Table

from ..onnx_import import UnsupportedModelError

# TFLite TensorType -> numpy type of the types the importer computes with.
DTYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8}
QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def is_tflite(model) -> bool:
    """True for TFLite flatbuffer bytes or a path to such a file (file identifier "TFL3" at bytes 4..8)."""
    if isinstance(model, bytes | bytearray | memoryview):
        return bytes(model[4:8]) == b"TFL3"
    if isinstance(model, str | os.PathLike):
        try:  # without blocking: a FIFO's open would wait for a writer, and only a regular file is a model
            fd = os.open(model, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, 8, 0)[4:8] == b"TFL3"
        except OSError:
            return False
        finally:
            os.close(fd)
    return False


def builtin_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


class Tensor:
    """A parsed TFLite tensor."""

    __slots__ = ("name", "shape", "dtype", "data", "scale", "zero_point", "qdim", "raw")

    def __init__(self, name, shape, dtype, data, scale, zero_point, qdim, raw=None):
        self.name, self.shape, self.dtype, self.data = name, shape, dtype, data
        self.scale, self.zero_point, self.qdim = scale, zero_point, qdim
        self.raw = raw  # its subgraph's fields as read (bulkread.Columns), for file_meta; None when read slowly


def parse(blob: bytes):
    """Subgraph 0's (tensors, operators, inputs, outputs) (see `parse_all`)."""
    return parse_all(blob)[0]


def parse_all(blob: bytes):
    """[(tensors, operators, inputs, outputs)] per subgraph, all as plain Python objects; any decoding error ->
    ValueError."""
    import tflite

    if len(blob) < 8 or blob[4:8] != b"TFL3":
        raise ValueError("not a TFLite model (no 'TFL3' file identifier at bytes 4..8)")
    try:
        model = tflite.Model.GetRootAsModel(blob, 0)
        if model.SubgraphsLength() == 0:
            raise ValueError("the model has no subgraph")
        codes = []
        for i in range(model.OperatorCodesLength()):
            oc = model.OperatorCodes(i)
            codes.append(max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode())))
        try:  # the fast reader; where it finds anything odd, the tflite classes (the same values or error)
            subgraphs = _parse_fast(blob, codes)
        except Exception:  # noqa: BLE001 - read again below, which raises what the file deserves
            subgraphs = [parse_subgraph(blob, model, model.Subgraphs(k), codes)
                         for k in range(model.SubgraphsLength())]
    except UnsupportedModelError:
        raise
    except ValueError as e:
        raise ValueError(f"not a readable TFLite model ({e})") from None
    except Exception as e:  # flatbuffers reads lazily: a corrupt file fails here with struct/index errors
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    return subgraphs


def _parse_fast(blob: bytes, codes: list[int]):
    """parse_all's subgraphs read by bulkread (or fastread: its values are parse_subgraph's; it raises where it is
    unsure). Each tensor's `raw` is its subgraph's bulkread.Columns, the fields as read, for file_meta."""
    from . import bulkread as br
    from . import fastread as fr

    b, n = blob, len(blob)
    root = fr._U32(b, 0)[0]
    f = fr._slots(b, n, root, 3)
    bufs = fr.buffers(b, root)
    out = []
    for sg in fr._tables(b, n, root + f[2]) if f[2] else []:
        try:
            c = br.tensors(b, sg)
        except br.NotBulk:
            c = br.from_raw(fr.tensors(b, sg))
        tensors = []
        held = [i for i, buf in enumerate(c.buffer) if buf > 0]
        data: list = [None] * len(c.buffer)
        for i, d in zip(held, br.buffer_data(b, bufs, [c.buffer[i] for i in held]), strict=True):
            data[i] = d
        for i, (name, shape, typ, d, scale, zp, qdim) in enumerate(zip(c.name, c.shape, c.type, data, c.scale,
                                                                       c.zero_point, c.qdim, strict=True)):
            if scale is None:
                zp, qdim = None, 0
            elif zp is None:
                zp = np.zeros(scale.size, np.int64)
            tensors.append(Tensor(name.decode() if name else f"tensor_{i}", shape if shape else (), typ, d, scale,
                                  zp, qdim, c))
        ins, outs = fr.io(b, sg)
        out.append((tensors, br.operators(b, sg, codes), ins, outs))
    return out


def parse_subgraph(blob, model, sg, codes):
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        data = None
        if t.Buffer() > 0:
            buf = model.Buffers(t.Buffer())
            if buf.Offset() > 1:  # large models keep data after the flatbuffer
                raw = blob[buf.Offset():buf.Offset() + buf.Size()]
            else:
                raw = buf.DataAsNumpy().tobytes() if buf.DataLength() else b""
            if raw:
                data = raw
        q = t.Quantization()
        scale = zp = None
        qdim = 0
        if q is not None and q.ScaleLength():
            scale = q.ScaleAsNumpy().astype(np.float32)
            zp = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros(scale.size, np.int64)
            qdim = int(q.QuantizedDimension())
        name = t.Name().decode() if t.Name() else f"tensor_{i}"
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        tensors.append(Tensor(name, shape, int(t.Type()), data, scale, zp, qdim))
    ops = []
    for i in range(sg.OperatorsLength()):
        o = sg.Operators(i)
        if not 0 <= o.OpcodeIndex() < len(codes):
            raise ValueError(f"op {i}: opcode index {o.OpcodeIndex()} is out of range ({len(codes)} opcodes)")
        ops.append((codes[o.OpcodeIndex()], [int(v) for v in o.InputsAsNumpy()] if o.InputsLength() else [],
                    [int(v) for v in o.OutputsAsNumpy()] if o.OutputsLength() else [],
                    o.BuiltinOptionsType(), o.BuiltinOptions()))
    ins = [int(v) for v in sg.InputsAsNumpy()] if sg.InputsLength() else []
    outs = [int(v) for v in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    return tensors, ops, ins, outs


def options(kind, table):
    """The op's builtin options as an object of class `kind`, or None."""
    if table is None:
        return None
    o = kind()
    if type(table) is Table:  # what Init(table.Bytes, table.Pos) makes, the op's table itself (no copy an op)
        o._tab = table
    else:
        o.Init(table.Bytes, table.Pos)
    return o


# TFLite TensorType -> numpy type, as ai-edge-litert reports a tensor's dtype (types without one are left out).
DETAIL_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16,
                 8: np.complex64, 9: np.int8, 10: np.float64, 11: np.complex128, 12: np.uint64, 15: np.uint32,
                 16: np.uint16}


def _tensor_meta_slow(sg) -> list[dict]:
    """file_meta's "tensors", read with the tflite classes."""
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        shape = [int(v) for v in t.ShapeAsNumpy()] if t.ShapeLength() else []
        sig = [int(v) for v in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else None
        q = t.Quantization()
        scales = q.ScaleAsNumpy().astype(np.float32) if q is not None and q.ScaleLength() else np.zeros(0, np.float32)
        zps = (q.ZeroPointAsNumpy().astype(np.int32) if q is not None and q.ZeroPointLength()
               else np.zeros(scales.size, np.int32))
        tensors.append({"name": t.Name().decode() if t.Name() else "", "shape": shape, "shape_signature": sig,
                        "type": int(t.Type()), "dtype": DETAIL_TYPES.get(int(t.Type())), "scales": scales,
                        "zero_points": zps, "quantized_dimension": int(q.QuantizedDimension()) if q is not None else 0})
    return tensors


def _tensor_meta(blob: bytes, c) -> list[dict]:
    """file_meta's "tensors" from the fields parse_all read (bulkread.Columns `c`), the shape signatures read now."""
    from .fastread import _ints

    tensors = []
    n = len(blob)
    as_int32: dict[int, np.ndarray] = {}  # the reader's shared zero-point arrays -> int32, once each (ids stay: alive)
    for name, shape, typ, scale, zp, quant, qdim, pos, sig in zip(c.name, c.shape, c.type, c.scale, c.zero_point,
                                                                 c.quant, c.qdim, c.pos, c.sig, strict=True):
        scales = scale if scale is not None else np.zeros(0, np.float32)
        if zp is not None:
            zps = as_int32.get(id(zp))
            if zps is None:
                zps = as_int32[id(zp)] = zp.astype(np.int32)
        else:
            zps = np.zeros(scales.size, np.int32)
        tensors.append({"name": name.decode() if name else "", "shape": list(shape) if shape else [],
                        "shape_signature": (_ints(blob, n, pos + sig) or None) if sig else None, "type": typ,
                        "dtype": DETAIL_TYPES.get(typ), "scales": scales, "zero_points": zps,
                        "quantized_dimension": qdim if quant is not None else 0})
    return tensors


def file_meta(blob: bytes, ins: list[int], outs: list[int], in_names: list[str], out_names: list[str],
              graph_names: list[str], parsed: list[Tensor] | None = None) -> dict:
    """Graph.meta of a TFLite model: what the file says beside the computation, read as it is written.

    "tflite": "tensors" (subgraph 0's tensors by index: name, shape, shape_signature (None where the file has
    none: the shape is the signature), TFLite type, numpy type or None, scales, zero_points,
    quantized_dimension); "inputs" / "outputs" (the subgraph's tensor indices, in order) with "input_names" /
    "output_names" (the graph tensor each one is: the TFLite name, or "name:index" where names repeat);
    "graph_names" (that name for every tensor: the graph's name of its NHWC form); "signatures" (SignatureDef
    key -> {"inputs": {name: tensor index}, "outputs": {...}, "subgraph_index"}); "subgraphs" (their count).
    "model": ONNX Runtime's ModelMetadata fields (the file's description as producer and description, subgraph
    0's name as graph name, the schema version, metadata entries as strings). "quantization": each 8-bit graph
    input and output's per-tensor (scale, zero point).

    `parsed`: subgraph 0's tensors as parse_all read them, whose fields are not read again where the fast reader
    read them (reading every tensor twice was a third of a TFLite chain's import)."""
    import tflite

    model = tflite.Model.GetRootAsModel(blob, 0)
    sg = model.Subgraphs(0)
    tensors = None
    if parsed is not None and all(t.raw is parsed[0].raw is not None for t in parsed):  # one subgraph's columns
        try:
            tensors = _tensor_meta(blob, parsed[0].raw) if parsed else []
        except Exception:  # noqa: BLE001 - read again below, which raises what the file deserves
            tensors = None
    if tensors is None:
        tensors = _tensor_meta_slow(sg)
    signatures = {}
    for k in range(model.SignatureDefsLength()):
        d = model.SignatureDefs(k)

        def tensor_map(n: int, get) -> dict[str, int]:
            return {get(j).Name().decode(): int(get(j).TensorIndex()) for j in range(n)}

        signatures[d.SignatureKey().decode() if d.SignatureKey() else ""] = {
            "inputs": tensor_map(d.InputsLength(), d.Inputs), "outputs": tensor_map(d.OutputsLength(), d.Outputs),
            "subgraph_index": int(d.SubgraphIndex())}
    entries = {}
    for k in range(model.MetadataLength()):
        e = model.Metadata(k)
        raw = b""
        if 0 < e.Buffer() < model.BuffersLength():
            buf = model.Buffers(e.Buffer())
            raw = (blob[buf.Offset():buf.Offset() + buf.Size()] if buf.Offset() > 1
                   else buf.DataAsNumpy().tobytes() if buf.DataLength() else b"")
        try:
            value = raw.rstrip(b"\0").decode()
        except UnicodeDecodeError:
            value = f"<{len(raw)} bytes>"
        entries[e.Name().decode() if e.Name() else f"metadata_{k}"] = value
    description = model.Description().decode() if model.Description() else ""
    meta_model = {"producer_name": description, "producer_version": "", "graph_name": sg.Name().decode()
                  if sg.Name() else "", "domain": "", "description": description, "graph_description": "",
                  "version": int(model.Version()), "custom_metadata_map": entries}
    quant = {}
    for i, name in [*zip(ins, in_names, strict=True), *zip(outs, out_names, strict=True)]:
        t = tensors[i]
        if t["dtype"] in (np.uint8, np.int8) and t["scales"].size == 1:
            quant[name] = (float(t["scales"][0]), int(t["zero_points"][0]))
    return {"format": "tflite", "model": meta_model, "quantization": quant,
            "tflite": {"tensors": tensors, "inputs": list(ins), "outputs": list(outs), "input_names": list(in_names),
                       "output_names": list(out_names), "graph_names": list(graph_names), "signatures": signatures,
                       "subgraphs": int(model.SubgraphsLength())}}



# ---- data movement and elementwise ops on 8-bit tensors ---------------------------------------------------------
