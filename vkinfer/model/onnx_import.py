"""ONNX -> vkinfer Graph: QOperator, QDQ and dynamically quantized models (onnxruntime.quantization's
quantize_static in both formats and quantize_dynamic).

Reads any IR version the installed `onnx` reads. The graph then goes through passes.optimize (constant
folding, ONNX Runtime's activation removal before QuantizeLinear, QDQ folding into the quantized ops ORT
fuses, activation fusion into the integer ops' clamps). Every node left is checked against the op table of
the session; all unsupported nodes are reported together, each with its name, op type and why.
"""

from __future__ import annotations

import functools
import os
import stat
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import VkInferError
from ..reference._opdef import definitions
from .graph import Graph, Node, TensorInfo, gc_paused
from .passes import optimize

_ELEM = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8,
         onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT64: np.int64}


class UnsupportedModelError(VkInferError, ValueError):
    """The model uses ops or patterns vkinfer cannot run; the message lists every offending node."""


MAX_MODEL_BYTES = 2 << 30  # a model file's (and its external data's) default size limit: 2 GiB


def read_model_file(path: str | os.PathLike, limit: int = MAX_MODEL_BYTES, what: str = "model file",
                    offset: int = 0, length: int | None = None) -> bytes:
    """The bytes of the file at `path` (from `offset`, `length` of them or all the rest), read only when it is a
    regular file and they are at most `limit` bytes: a FIFO, a device (/dev/zero) or a directory raises ValueError
    naming the path, as does a larger read (the file is opened with O_NONBLOCK, so a FIFO without a writer does not
    hang the open). OSError (FileNotFoundError, PermissionError) propagates."""
    p = os.fspath(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a file")
            raise ValueError(f"{what} {p!r} is {kind}, not a regular file")
        want = st.st_size - offset if length is None else length
        if want < 0 or offset + want > st.st_size:
            raise ValueError(f"{what} {p!r}: {want} bytes at offset {offset} asked for, the file has {st.st_size}")
        if want > limit:
            raise ValueError(f"{what} {p!r}: {want} bytes to read, over the limit of {limit} bytes "
                             f"(InferenceSession's max_model_bytes=)")
        chunks, got = [], 0
        while got < want:
            chunk = os.pread(fd, want - got, offset + got)
            if not chunk:  # the file shrank under us
                raise ValueError(f"{what} {p!r}: read {got} bytes, expected {want}")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _ExternalData:
    """Where a model's external-data tensors may be read from: `base` (the model file's folder, or the folder the
    caller gave; None for a model given as bytes without one: such tensors are refused, since reading them
    relative to the current folder would let an uploaded model read a server file into its output), at most
    `limit` bytes in all, from regular files inside `base` only."""

    def __init__(self, base: str | os.PathLike | None, limit: int):
        self.base = None if base is None else os.path.realpath(os.fspath(base))
        self.left = limit

    def load(self, t: onnx.TensorProto, what: str) -> onnx.TensorProto:
        """A copy of `t` with its external data read in (ValueError naming `what` when it may not be read)."""
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if self.base is None:
            raise ValueError(f"{what}: its data is in an external file ({loc!r}); a model given as bytes or a "
                             f"ModelProto reads external data only from a folder given as external_data_dir= "
                             f"(vkinfer is stricter than ONNX Runtime here)")
        real = os.path.realpath(os.path.join(self.base, loc))
        if not loc or os.path.isabs(loc) or os.path.commonpath([real, self.base]) != self.base:
            raise ValueError(f"{what}: external data location {loc!r} is not a file inside {self.base!r}")
        try:
            offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
        except ValueError:
            raise ValueError(f"{what}: external data offset/length {info.get('offset')!r}/{info.get('length')!r} "
                             f"are not integers") from None
        if offset < 0 or (length is not None and length < 0):
            raise ValueError(f"{what}: external data offset {offset} / length {length} is negative")
        try:
            data = read_model_file(real, self.left, f"{what}: external data file", offset, length)
        except OSError as e:  # missing, unreadable: the model's fault, named like any other
            raise ValueError(f"{what}: external data file {loc!r} cannot be read ({e.strerror or e})") from None
        self.left -= len(data)
        out = onnx.TensorProto()
        out.CopyFrom(t)
        del out.external_data[:]
        out.data_location = onnx.TensorProto.DEFAULT
        out.raw_data = data
        return out


def _load(model: str | os.PathLike | bytes | onnx.ModelProto, limit: int = MAX_MODEL_BYTES) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, bytes | bytearray | memoryview):
        model = read_model_file(model, limit)
    try:
        return onnx.load_model_from_string(bytes(model))
    except Exception as e:  # protobuf's DecodeError and friends: a corrupt or truncated file
        raise ValueError(f"not a readable ONNX model ({type(e).__name__}: {e})") from None


def _info(vi: onnx.ValueInfoProto, what: str = "graph input/output") -> TensorInfo:
    """A graph input's or output's name, shape and type. A declared dimension of 0 is a 0-sized tensor, not a
    symbolic one: vkinfer does not run empty tensors, so a graph input declaring one (or a negative one) is refused
    by name. An output's declared shape is only reported (get_outputs), as ONNX Runtime only warns on it."""
    t = vi.type.tensor_type
    if t.elem_type not in _ELEM:
        raise UnsupportedModelError(f"{what} {vi.name!r} has unsupported element type {t.elem_type}")
    shape = None
    if t.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
        for axis, d in enumerate(shape):
            if isinstance(d, int) and d <= 0 and what == "graph input":
                why = "a 0-sized tensor, which vkinfer does not run" if d == 0 else "negative"
                raise UnsupportedModelError(f"{what} {vi.name!r} declares dimension {d} on axis {axis} (shape "
                                            f"{list(shape)}): {why}")
    if shape is not None and np.prod([d for d in shape if isinstance(d, int) and d > 0], dtype=np.float64) >= 2 ** 31:
        raise ValueError(f"{what} {vi.name!r} has shape {list(shape)}: over {2 ** 31 - 1} elements")
    return TensorInfo(vi.name, shape, np.dtype(_ELEM[t.elem_type]))


# Element types whose raw_data numpy_helper.to_array reads with one np.frombuffer (little-endian hosts only).
_RAW_DTYPES = {} if sys.byteorder == "big" else {
    d: helper.tensor_dtype_to_np_dtype(d) for d in (
        onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.UINT16,
        onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL,
        onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64)}


_EXTERNAL = onnx.TensorProto.EXTERNAL


def _array(t: onnx.TensorProto, what: str, external: _ExternalData | None = None) -> np.ndarray:
    """An initializer's or a Constant's tensor as numpy; ValueError naming it when its type or data is bad, or
    when its data is external and may not be read (`external`; see _ExternalData)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        t = (external or _ExternalData(None, 0)).load(t, what)
    dtype = _RAW_DTYPES.get(t.data_type)
    if dtype is not None and t.HasField("raw_data") and not t.HasField("segment"):
        try:  # numpy_helper.to_array's own path for these (its dispatch was 5 us a tensor: 20k tiny initializers)
            return np.frombuffer(t.raw_data, dtype=dtype).reshape(t.dims)
        except Exception:  # noqa: BLE001 - to_array below raises the same error, reported as before
            pass
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # an unknown data_type (KeyError in onnx.helper), data not matching the dims, ...
        raise ValueError(f"{what}: unreadable tensor (data_type {t.data_type}, dims {list(t.dims)}): "
                         f"{type(e).__name__}: {e}") from e


def import_onnx(model, supported: dict[str, str | None], external_data_dir: str | os.PathLike | None = None,
                max_model_bytes: int = MAX_MODEL_BYTES) -> Graph:
    """Graph of an ONNX model. `supported` maps op names (with 'domain:' prefix for non-default
    domains) to None, or to a reason string for ops recognised but not supported.

    `model`: a path (a regular file of at most `max_model_bytes` bytes), bytes or an onnx.ModelProto.
    External-data tensors are read from `external_data_dir`, by default the model file's folder; a model given as
    bytes or a ModelProto has no default folder, and its external-data tensors are refused (ValueError) unless
    `external_data_dir` is given. The external data read may total at most `max_model_bytes`."""
    with gc_paused():  # (graph.gc_paused: its full collections grew faster than the graph)
        return _import_onnx(model, supported, external_data_dir, max_model_bytes)


def _import_onnx(model, supported: dict[str, str | None], external_data_dir, max_model_bytes: int) -> Graph:
    if external_data_dir is None and isinstance(model, str | os.PathLike):
        external_data_dir = os.path.dirname(os.path.abspath(os.fspath(model)))
    external = _ExternalData(external_data_dir, max_model_bytes)
    m = _load(model, max_model_bytes)
    g = m.graph
    consts = {}
    raw_dtype, frombuffer, external_location = _RAW_DTYPES.get, np.frombuffer, _EXTERNAL  # (locals: faster)
    for t in g.initializer:
        name, dtype = t.name, raw_dtype(t.data_type)
        if dtype is not None and t.data_location != external_location and t.HasField("raw_data") \
                and not t.HasField("segment"):
            try:  # _array's first path inline (its call and message were a third of a 100k-initializer model's)
                consts[name] = frombuffer(t.raw_data, dtype).reshape(t.dims[:])  # (a list: faster)
                continue
            except Exception:  # noqa: BLE001 - _array below raises the same error, reported as before
                pass
        consts[name] = _array(t, f"initializer {name!r}", external)
    nodes, problems = [], []
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    taken: set[str] | None = None  # every node's name, gathered at the first node without one
    seen: dict[str, int] = {}
    names: list[str] = []
    # Each node's (op, op type, inputs, outputs, proto), read from the protobuf once for the checks and _meta.
    records: list[tuple[str, str, list[str], list[str], onnx.NodeProto]] = []
    # (op type, domain) -> (op, its domain as named here, max inputs, max outputs: None where unchecked), looked up
    # once per kind of node (the per-node domain test, op string and schema calls were 1.5 us a node).
    kinds: dict[tuple[str, str], tuple[str, str, int | None, int | None]] = {}
    convs = False  # a node _check_kernel_shapes looks at
    record, named, add = records.append, names.append, nodes.append  # (bound once: a cost per node)
    for i, n in enumerate(g.node):
        key = (n.op_type, n.domain)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _kind(*key, opset, supported)
        op, domain, max_in, max_out = kind
        op_type = key[0]
        ins, outs = n.input[:], n.output[:]
        record((op, op_type, ins, outs, n))
        name = n.name
        if name and name not in seen:  # _unique_name's common case inline
            seen[name] = i
        else:
            if taken is None and not name:
                taken = {n.name for n in g.node if n.name}
            name = _unique_name(n, i, taken or set(), seen)
        named(name)
        attrs = {}
        attributes = n.attribute
        if attributes:  # (an empty one's loop was a cost per node)
            for a in attributes:
                try:
                    attrs[a.name] = _attribute(a)
                except Exception as e:  # an attribute type onnx does not know
                    raise ValueError(f"node {name!r} ({op_type}): unreadable attribute {a.name!r} "
                                     f"(type {a.type}): {e}") from e
        if op == "Constant":
            value = attrs.get("value")
            if value is None:
                problems.append(f"{name} (Constant): only the 'value' attribute is supported")
                continue
            if not isinstance(value, onnx.TensorProto):
                raise ValueError(f"node {name!r} (Constant): attribute 'value' must be a tensor, got "
                                 f"{type(value).__name__}")
            if len(outs) != 1 or not outs[0]:
                raise ValueError(f"node {name!r} (Constant) must have one output, has {outs}")
            consts[outs[0]] = _array(value, f"node {name!r} (Constant) attribute 'value'", external)
            continue
        # The op's version (kernels whose semantics changed between opsets read it) and the node itself (its
        # attributes, with the types the model gave them).
        attrs["_opset"] = opset if not domain else None
        attrs["_proto"] = n
        if max_in is not None and len(ins) > max_in:
            _check_input_count(n, name, opset)  # (raises)
        if max_out is not None and len(outs) > max_out:
            _check_output_count(n, name, domain, opset, supported)  # (raises)
        if op in _ANNOTATED:
            if op == "Softmax" and opset is not None and opset < 13:
                attrs["_coerce_2d"] = True  # Softmax-1/11: over all axes from `axis` on, default axis 1
            if op in ("MatMul", "Gemm") and len(ins) > 1:
                # ORT prepacks B (its K blocks of 256) only when B is an initializer, not when vkinfer folds it
                # later (a DequantizeLinear of a constant): vkinfer/reference/float_matmul.py
                attrs["_b_initializer"] = ins[1] in consts
        elif op in _CONV_WEIGHTS and _CONV_WEIGHTS[op] < len(ins) and ins[_CONV_WEIGHTS[op]] not in consts:
            convs = True  # (weights that are a constant now stay one)
        add(Node(op, name, ins[:], outs[:], attrs))
    if convs:
        _check_kernel_shapes(records, consts, names)
    inputs = [_info(vi, "graph input") for vi in g.input if vi.name not in consts]
    graph = optimize(Graph(nodes, inputs, [_info(vi, "graph output") for vi in g.output], consts))
    nodes = graph.nodes
    for n in nodes:
        if n.op not in supported:
            problems.append(f"{n.name} ({n.op}): op not supported")
        elif supported[n.op] is not None:
            problems.append(f"{n.name} ({n.op}): {supported[n.op]}")
    problems += [f"graph output {t.name!r}: a constant (it depends on no graph input), which vkinfer does not "
                 f"support as an output" for t in graph.outputs if t.name in graph.consts]
    if problems:
        raise UnsupportedModelError("the model has nodes vkinfer cannot run:\n  " + "\n  ".join(problems))
    quant_ops = ("QuantizeLinear", "DequantizeLinear", "com.microsoft:QGemm", "ConvInteger", "MatMulInteger")
    eight_bit = any(t.dtype in (np.uint8, np.int8) for t in graph.inputs + graph.outputs)
    if not eight_bit and not any(n.op in quant_ops or n.op.split(":")[-1].startswith("QLinear") for n in nodes):
        raise UnsupportedModelError("the model has no quantized tensors or ops: vkinfer runs 8-bit models; "
                                    "quantize it first, e.g. with onnxruntime.quantization.quantize_static")
    graph.meta = _meta(m, consts, graph, records)
    return graph


_INTS, _INT, _FLOAT, _STRING = (onnx.AttributeProto.INTS, onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT,
                                onnx.AttributeProto.STRING)


def _attribute(a: onnx.AttributeProto):
    """onnx.helper.get_attribute_value(a), its common types first (its chain of comparisons was a cost per node)."""
    if not a.ref_attr_name:
        t = a.type
        if t == _INTS:
            return list(a.ints)
        if t == _INT:
            return a.i
        if t == _FLOAT:
            return a.f
        if t == _STRING:
            return a.s
    return helper.get_attribute_value(a)


@functools.cache
def _schema_limits(op_type: str, opset: int) -> tuple[int, int] | None:
    """(max inputs, max outputs) of ONNX's schema of `op_type` at `opset`, None where onnx does not define it
    (looked up once per op and opset: onnx.defs.get_schema was 10 us a node)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset)
    except Exception:  # noqa: BLE001 - an op onnx does not define: the op table's check names it
        return None
    return schema.max_input, schema.max_output


def _check_input_count(n: onnx.NodeProto, name: str, opset: int) -> None:
    """More inputs than the ONNX op has at this opset: ValueError, as ONNX Runtime refuses the model (tests/ops
    found an Identity with two inputs running, its second ignored)."""
    limits = _schema_limits(n.op_type, opset)
    if limits is not None and len(n.input) > limits[0]:
        raise ValueError(f"node {name!r} ({n.op_type}) has {len(n.input)} inputs; opset {opset}'s {n.op_type} takes "
                         f"at most {limits[0]}")


def _unique_name(n: onnx.NodeProto, i: int, taken: set[str], seen: dict[str, int]) -> str:
    """The node's name, unique in the graph. Two nodes of one name: ValueError naming both, as ONNX Runtime refuses
    the model ('two nodes with same node name'); vkinfer keys placement, lowering and timings by name, and ran the
    second into a KeyError. A node without a name is called '<op type>_<index>' (with a further '_<k>' where a
    node of the model already has that name)."""
    name = n.name
    if name in seen:
        raise ValueError(f"nodes {seen[name]} and {i} ({n.op_type}) are both named {name!r}: node names must be "
                         f"unique")
    if not name:
        base = name = f"{n.op_type}_{i}"
        k = 1
        while name in taken or name in seen:
            name, k = f"{base}_{k}", k + 1
    seen[name] = i
    return name


_ANNOTATED = frozenset({"Softmax", "MatMul", "Gemm"})  # nodes the import loop gives an attribute of its own


def _kind(op_type: str, domain: str, opset: int | None, supported) -> tuple[str, str, int | None, int | None]:
    """(op, domain as the importer names it, the most inputs _check_input_count allows, the most outputs
    _check_output_count allows; None where it checks nothing) of a node of `op_type` in `domain`."""
    domain = domain if domain not in ("", "ai.onnx") else ""
    op = f"{domain}:{op_type}" if domain else op_type
    limits = _schema_limits(op_type, opset) if not domain and opset is not None else None
    max_in = limits[0] if limits is not None else None
    if domain == "com.microsoft" and op in supported:
        max_out = 1
    else:
        max_out = limits[1] if limits is not None else None
    return op, domain, max_in, max_out


def _check_output_count(n: onnx.NodeProto, name: str, domain: str, opset: int | None, supported) -> None:
    """More outputs than the op makes: ValueError naming the node, as ONNX Runtime refuses the model (the attack's
    spliced graphs listed an extra output first, so the real one was never written and a later node's read of
    it was a KeyError)."""
    if domain == "com.microsoft" and f"{domain}:{n.op_type}" in supported:
        most = 1  # every com.microsoft op vkinfer runs makes one output (ORT's contrib schemas)
    elif domain or opset is None:
        return
    else:
        limits = _schema_limits(n.op_type, opset)
        if limits is None:
            return
        most = limits[1]
    if len(n.output) > most:
        raise ValueError(f"node {name!r} ({n.op_type}) lists {len(n.output)} outputs {list(n.output)}; the op "
                         f"makes at most {most}")


_CONV_WEIGHTS = {"QLinearConv": 3, "Conv": 1, "ConvInteger": 1, "ConvTranspose": 1}


def _check_kernel_shapes(records: list[tuple], consts: dict[str, np.ndarray], names: list[str]) -> None:
    """A convolution whose kernel_shape contradicts weights that are a DequantizeLinear of an initializer (a QDQ
    model): ValueError naming the node, as ONNX Runtime refuses it ('kernel_shape is not compatible with W
    shape'); vkinfer folded the pair into a QLinearConv and ignored the attribute. Weights that are an initializer
    themselves are checked with the other geometry attributes (vkinfer/model/attrs.py, in the same words).
    `records`: import_onnx's (op, op type, inputs, outputs, proto) of every node."""
    dq = None  # made at the first convolution whose weights are not an initializer (a QLinearConv chain has none)
    for (op, op_type, ins, _, n), name in zip(records, names, strict=True):
        slot = _CONV_WEIGHTS.get(op)  # the default domain's only (op has a "domain:" prefix otherwise)
        if slot is None or slot >= len(ins) or ins[slot] in consts:
            continue
        if dq is None:
            dq = {outs[0]: ins[0] for _, op_type, ins, outs, _ in records
                  if op_type == "DequantizeLinear" and outs and ins}
        ks = next((list(a.ints) for a in n.attribute
                   if a.name == "kernel_shape" and a.type == onnx.AttributeProto.INTS), None)
        src = dq.get(ins[slot])  # None where no DequantizeLinear makes it (an initializer may be named "")
        w = consts.get(src) if src is not None else None
        if ks is not None and w is not None and ks != list(w.shape[2:]):
            raise ValueError(f"node {name!r} ({op_type}): attribute 'kernel_shape' = {ks}: contradicts the weights "
                             f"{ins[slot]!r} of shape {list(w.shape)} (a DequantizeLinear of "
                             f"{src!r})")


# Quantized ops as the model writes them: the input positions of their output's scale and zero point, and of
# their 8-bit data inputs (each followed by its own scale and zero point).
_Y_PARAMS = {"QuantizeLinear": (1, 2), "com.microsoft:QLinearSoftmax": (3, 4),
             "com.microsoft:QLinearReduceMean": (3, 4)}
_X_SLOTS = {"DequantizeLinear": (0,)}
# The ops defined in their own files carry theirs (vkinfer/reference/_opdef.py).
_Y_PARAMS.update({d.op: d.y_params for d in definitions().values() if d.y_params is not None})
_X_SLOTS.update({d.op: d.x_slots for d in definitions().values() if d.x_slots})


def _meta(m: onnx.ModelProto, consts: dict[str, np.ndarray], graph: Graph, records: list[tuple]) -> dict:
    """Graph.meta of an ONNX model: ONNX Runtime's ModelMetadata fields, and the scale and zero point of each 8-bit
    graph input and output where the model gives them (the QuantizeLinear or QLinear op writing it, else the
    DequantizeLinear or QLinear op reading it: QDQ and QOperator models alike). `records`: import_onnx's (op, op
    type, inputs, outputs, proto) of every node."""
    def params(ins: list[str], i: int, j: int, dtype: np.dtype) -> tuple[float, int] | None:
        scale = consts.get(ins[i]) if i < len(ins) else None
        zp = consts.get(ins[j]) if j < len(ins) and ins[j] else np.zeros((), dtype)
        if scale is None or zp is None or scale.size != 1 or zp.size != 1 or scale.dtype.kind != "f":
            return None
        return float(scale.reshape(())), int(zp.reshape(()))

    quant: dict[str, tuple[float, int]] = {}
    # Only these ops give parameters (the scan of every node's protobuf fields was a cost per node), and only where
    # they read or write an 8-bit graph input or output (the others' turns below change nothing).
    wanted = {t.name for t in [*graph.inputs, *graph.outputs] if t.dtype in (np.uint8, np.int8)}
    relevant = [(o, ins, outs) for o, _, ins, outs, _ in records if (o in _Y_PARAMS or o == "DequantizeLinear")
                and not (wanted.isdisjoint(ins) and wanted.isdisjoint(outs))] if wanted else []
    for t in [*graph.inputs, *graph.outputs]:
        if t.dtype not in (np.uint8, np.int8) or t.name in quant:
            continue
        for o, ins, outs in relevant:
            if t.name in outs and o in _Y_PARAMS and outs[0] == t.name:
                q = params(ins, *_Y_PARAMS[o], t.dtype)
            elif t.name in ins and o != "QuantizeLinear":
                slots = _X_SLOTS.get(o, range(2, len(ins), 3) if o.endswith("QLinearConcat") else (0,))
                i = next((i for i in slots if i < len(ins) and ins[i] == t.name), None)
                q = None if i is None else params(ins, i + 1, i + 2, t.dtype)
            else:
                continue
            if q is not None:
                quant[t.name] = q
                break
    model = {"producer_name": m.producer_name, "producer_version": m.producer_version, "graph_name": m.graph.name,
             "domain": m.domain, "description": m.doc_string, "graph_description": m.graph.doc_string,
             "version": m.model_version if m.HasField("model_version") else 2 ** 63 - 1,
             "custom_metadata_map": {p.key: p.value for p in m.metadata_props}}
    return {"format": "onnx", "model": model, "quantization": quant}
