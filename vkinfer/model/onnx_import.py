"""ONNX -> vkinfer Graph: QOperator, QDQ and dynamically quantized models (onnxruntime.quantization's
quantize_static in both formats and quantize_dynamic).

Reads any IR version the installed `onnx` reads. The graph then goes through passes.optimize (constant
folding, ONNX Runtime's activation removal before QuantizeLinear, QDQ folding into the quantized ops ORT
fuses, activation fusion into the integer ops' clamps). Every node left is checked against the op table of
the session; all unsupported nodes are reported together, each with its name, op type and why.
"""

from __future__ import annotations

import functools
import itertools
import operator
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
    consts, raws = _initializers_at_once(g)
    if consts is None:
        consts = _initializers(g, external, raws)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    # (op type, domain) -> (op, its domain as named here, max inputs, max outputs: None where unchecked), looked up
    # once per kind of node (the per-node domain test, op string and schema calls were 1.5 us a node).
    kinds: dict[tuple[str, str], tuple[str, str, int | None, int | None]] = {}
    read = _nodes_at_once(g, opset, supported, consts, kinds)
    if read is None:  # something only the node-by-node reading handles (or reports, in its words)
        read = _nodes(g, opset, supported, consts, external, kinds)
    nodes, problems, convs, op_types = read
    if convs:
        _check_kernel_shapes(convs, nodes, op_types(), consts)
    inputs = [_info(vi, "graph input") for vi in g.input if vi.name not in consts]
    imported = nodes  # (the nodes as the model gave them, for _meta: no pass changes a Node in place)
    graph = optimize(Graph(nodes, inputs, [_info(vi, "graph output") for vi in g.output], consts))
    nodes = graph.nodes
    for n in nodes if not all(supported.get(op, "") is None for op in set(map(_OP, nodes))) else ():
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
    graph.meta = _meta(m, consts, graph, imported)
    return graph


def _initializers(g: onnx.GraphProto, external: _ExternalData, raws: list[bytes] | None = None
                  ) -> dict[str, np.ndarray]:
    """The graph's initializers as numpy arrays, by name, one at a time (any tensor _array reads; its errors).
    `raws`: each one's raw_data where _initializers_at_once read them already (not copied from the protobuf again:
    a real model's weights)."""
    consts = {}
    raw_dtype, frombuffer, external_location = _RAW_DTYPES.get, np.frombuffer, _EXTERNAL  # (locals: faster)
    for t, raw in zip(g.initializer, raws or itertools.repeat(None), strict=False):
        name, dtype = t.name, raw_dtype(t.data_type)
        if dtype is not None and t.data_location != external_location and t.HasField("raw_data") \
                and not t.HasField("segment"):
            try:  # _array's first path inline (its call and message were a third of a 100k-initializer model's)
                raw = t.raw_data if raw is None else raw
                consts[name] = frombuffer(raw, dtype).reshape(t.dims[:])  # (a list: faster)
                continue
            except Exception:  # noqa: BLE001 - _array below raises the same error, reported as before
                pass
        consts[name] = _array(t, f"initializer {name!r}", external)
    return consts


_NAME = operator.attrgetter("name")
_DATA_TYPE, _LOCATION, _RAW_DATA = (operator.attrgetter("data_type"), operator.attrgetter("data_location"),
                                     operator.attrgetter("raw_data"))
_DIMS, _SEGMENT = operator.attrgetter("dims"), operator.methodcaller("HasField", "segment")
_NBYTES = operator.attrgetter("nbytes")
_OP = operator.attrgetter("op")
_ALL = operator.itemgetter(slice(None))  # a repeated field's values as a list (faster than list(), 0.4 us)


def _initializers_at_once(g: onnx.GraphProto) -> tuple[dict[str, np.ndarray] | None, list[bytes]]:
    """(_initializers(g, ...), each one's raw_data) where every initializer is raw data of a type _RAW_DTYPES reads,
    of the size its dims give (else (None, the raw_data read, or []): _initializers reads them, and reports what it
    cannot read): each protobuf field read for all tensors at once and each array made by one np.ndarray call on
    the raw bytes, the array np.frombuffer(raw, dtype).reshape(dims) makes (100k initializers: 0.21 -> 0.16 s)."""
    inits = g.initializer[:]
    # (a map per field, into a set, any() or np.ndarray: zip(*) of one attrgetter of them all was 0.015 s slower)
    if not _RAW_DTYPES.keys() >= set(map(_DATA_TYPE, inits)) or any(map(_LOCATION, inits)) \
            or any(map(_SEGMENT, inits)):
        return None, []  # (a data_location but DEFAULT is EXTERNAL)
    raws = list(map(_RAW_DATA, inits))
    if not all(raws):  # (raw data that is there is a raw_data field that is set: HasField's test)
        return None, raws  # (ONNX Runtime's quantizer writes scales and zero points as float_data, int32_data)
    dtypes = map(_RAW_DTYPES.__getitem__, map(_DATA_TYPE, inits))  # (each one it reads: tested above)
    try:  # (negative dims: np.ndarray infers a lone -1 as reshape does, raises on others: _initializers reads them)
        arrays = list(map(np.ndarray, map(_ALL, map(_DIMS, inits)), dtypes, raws))  # (dims as lists: faster)
    except (ValueError, TypeError):  # (TypeError: a buffer too small)
        return None, raws
    if list(map(_NBYTES, arrays)) != list(map(len, raws)):
        return None, raws  # a buffer longer than the dims take: np.ndarray takes its start, reshape raises
    return dict(zip(map(_NAME, inits), arrays, strict=True)), raws


_NODE_KEY = operator.attrgetter("op_type", "domain")
_INPUT, _OUTPUT, _ATTRIBUTE = (operator.attrgetter("input"), operator.attrgetter("output"),
                               operator.attrgetter("attribute"))


def _nodes_at_once(g: onnx.GraphProto, opset: int | None, supported, consts: dict[str, np.ndarray],
                   kinds: dict) -> tuple | None:
    """_nodes(g, ...) for a graph without Constant nodes in which _nodes finds nothing to refuse (else None, and
    _nodes reads the graph, reporting what it finds in its words): each protobuf field read for all nodes at once,
    the checks on whole lists, a Python loop only over the nodes with attributes or an annotation (a 100k-node
    QLinearAdd chain: 0.40 -> 0.29 s)."""
    pbs = g.node[:]
    count = len(pbs)
    keys = list(map(_NODE_KEY, pbs))
    distinct = set(keys)
    for key in distinct.difference(kinds):
        kinds[key] = _kind(*key, opset, supported)
    op_of = {key: kinds[key][0] for key in distinct}
    ops = list(map(op_of.__getitem__, keys))
    present = set(op_of.values())
    if "Constant" in present:
        return None
    names = list(map(_NAME, pbs))
    if len(set(names)) != count or "" in names:
        taken = {n for n in names if n}
        if len(taken) != count - names.count(""):
            return None  # two nodes of one name: _nodes names them in its error
        made: set[str] = set()
        for i in [i for i, n in enumerate(names) if not n]:  # _unique_name's names, as it makes them in turn
            base = name = f"{keys[i][0]}_{i}"
            k = 1
            while name in taken or name in made:
                name, k = f"{base}_{k}", k + 1
            made.add(name)
            names[i] = name
    ins = list(map(_ALL, map(_INPUT, pbs)))
    outs = list(map(_ALL, map(_OUTPUT, pbs)))
    for lists, at in ((ins, 2), (outs, 3)):  # more inputs or outputs than allowed: _nodes raises
        bounds = [k[at] for k in kinds.values() if k[at] is not None]  # (kinds: this graph's)
        if bounds and max(map(len, lists)) > min(bounds):  # (then node by node, by maps: a QDQ graph's Relu takes 1)
            limit = {key: sys.maxsize if kinds[key][at] is None else kinds[key][at] for key in distinct}
            if any(map(operator.gt, map(len, lists), map(limit.__getitem__, keys))):
                return None
    opsets = {key: opset if not kinds[key][1] else None for key in distinct}
    if len(set(opsets.values())) == 1:
        value = opsets[keys[0]]
        attrs = [{"_opset": value} for _ in range(count)]
    else:
        attrs = [{"_opset": v} for v in map(opsets.__getitem__, keys)]
    if any(map(_ATTRIBUTE, pbs)):
        with_attributes = list(map(_ATTRIBUTE, pbs))
        for i in itertools.compress(range(count), with_attributes):
            read = {}
            for a in with_attributes[i]:
                try:
                    read[a.name] = _attribute(a)
                except Exception:  # noqa: BLE001 - an attribute type onnx does not know: _nodes reports it
                    return None
            read["_opset"] = opsets[keys[i]]
            attrs[i] = read
    convs = []
    if not present.isdisjoint(_ANNOTATED) or not present.isdisjoint(_CONV_WEIGHTS):
        for i, op in enumerate(ops):
            if op in _ANNOTATED:
                _annotate(op, opset, ins[i], attrs[i], consts)
            elif op in _CONV_WEIGHTS and _CONV_WEIGHTS[op] < len(ins[i]) and ins[i][_CONV_WEIGHTS[op]] not in consts:
                convs.append((i, pbs[i]))
    return list(map(Node, ops, names, ins, outs, attrs)), [], convs, lambda: [k[0] for k in keys]


def _annotate(op: str, opset: int | None, ins: list[str], attrs: dict, consts: dict[str, np.ndarray]) -> None:
    """The attributes the import gives a node of an _ANNOTATED op."""
    if op == "Softmax" and opset is not None and opset < 13:
        attrs["_coerce_2d"] = True  # Softmax-1/11: over all axes from `axis` on, default axis 1
    if op in ("MatMul", "Gemm") and len(ins) > 1:
        # ORT prepacks B (its K blocks of 256) only when B is an initializer, not when vkinfer folds it later (a
        # DequantizeLinear of a constant): vkinfer/reference/float_matmul.py
        attrs["_b_initializer"] = ins[1] in consts


def _nodes(g: onnx.GraphProto, opset: int | None, supported, consts: dict[str, np.ndarray],
           external: _ExternalData, kinds: dict) -> tuple:
    """(the graph's nodes as Nodes, problems found, [(index, NodeProto)] of the convolutions whose weights are not
    a constant when read, a function giving the op type of each node), read node by node: the outputs of
    Constant nodes go into `consts`. A malformed node raises ValueError naming it."""
    nodes, problems = [], []
    taken: set[str] | None = None  # every node's name, gathered at the first node without one
    seen: dict[str, int] = {}
    op_types: list[str] = []
    convs = []
    typed, add = op_types.append, nodes.append  # (bound once: a cost per node)
    for i, n in enumerate(g.node):
        key = (n.op_type, n.domain)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _kind(*key, opset, supported)
        op, domain, max_in, max_out = kind
        op_type = key[0]
        ins, outs = n.input[:], n.output[:]
        name = n.name
        if name and name not in seen:  # _unique_name's common case inline
            seen[name] = i
        else:
            if taken is None and not name:
                taken = {n.name for n in g.node if n.name}
            name = _unique_name(n, i, taken or set(), seen)
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
        # The op's version: kernels whose semantics changed between opsets read it.
        attrs["_opset"] = opset if not domain else None
        if max_in is not None and len(ins) > max_in:
            _check_input_count(n, name, opset)  # (raises)
        if max_out is not None and len(outs) > max_out:
            _check_output_count(n, name, domain, opset, supported)  # (raises)
        if op in _ANNOTATED:
            _annotate(op, opset, ins, attrs, consts)
        elif op in _CONV_WEIGHTS and _CONV_WEIGHTS[op] < len(ins) and ins[_CONV_WEIGHTS[op]] not in consts:
            convs.append((len(nodes), n))  # (weights that are a constant now stay one)
        typed(op_type)
        add(Node(op, name, ins, outs, attrs))
    return nodes, problems, convs, lambda: op_types


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


def _check_kernel_shapes(convs: list[tuple[int, onnx.NodeProto]], nodes: list[Node], op_types: list[str],
                         consts: dict[str, np.ndarray]) -> None:
    """A convolution whose kernel_shape contradicts weights that are a DequantizeLinear of an initializer (a QDQ
    model): ValueError naming the node, as ONNX Runtime refuses it ('kernel_shape is not compatible with W
    shape'); vkinfer folded the pair into a QLinearConv and ignored the attribute. Weights that are an initializer
    themselves are checked with the other geometry attributes (vkinfer/model/attrs.py, in the same words).
    `convs`: (index in `nodes`, NodeProto) of each convolution whose weights were not a constant when it was read;
    `op_types`: each node's op type (as the model writes it: DequantizeLinear of any domain)."""
    dq = None  # made at the first convolution whose weights are not an initializer (a QLinearConv chain has none)
    for k, n in convs:
        node = nodes[k]
        ins, slot = node.inputs, _CONV_WEIGHTS[node.op]
        if ins[slot] in consts:  # (a Constant node's output, read later)
            continue
        if dq is None:
            dq = {d.outputs[0]: d.inputs[0] for d, op_type in zip(nodes, op_types, strict=True)
                  if op_type == "DequantizeLinear" and d.outputs and d.inputs}
        ks = next((list(a.ints) for a in n.attribute
                   if a.name == "kernel_shape" and a.type == onnx.AttributeProto.INTS), None)
        src = dq.get(ins[slot])  # None where no DequantizeLinear makes it (an initializer may be named "")
        w = consts.get(src) if src is not None else None
        if ks is not None and w is not None and ks != list(w.shape[2:]):
            raise ValueError(f"node {node.name!r} ({op_types[k]}): attribute 'kernel_shape' = {ks}: contradicts the "
                             f"weights {ins[slot]!r} of shape {list(w.shape)} (a DequantizeLinear of "
                             f"{src!r})")


# Quantized ops as the model writes them: the input positions of their output's scale and zero point, and of
# their 8-bit data inputs (each followed by its own scale and zero point).
_Y_PARAMS = {"QuantizeLinear": (1, 2), "com.microsoft:QLinearSoftmax": (3, 4),
             "com.microsoft:QLinearReduceMean": (3, 4)}
_X_SLOTS = {"DequantizeLinear": (0,)}
# The ops defined in their own files carry theirs (vkinfer/reference/_opdef.py).
_Y_PARAMS.update({d.op: d.y_params for d in definitions().values() if d.y_params is not None})
_X_SLOTS.update({d.op: d.x_slots for d in definitions().values() if d.x_slots})


def _meta(m: onnx.ModelProto, consts: dict[str, np.ndarray], graph: Graph, nodes: list[Node]) -> dict:
    """Graph.meta of an ONNX model: ONNX Runtime's ModelMetadata fields, and the scale and zero point of each 8-bit
    graph input and output where the model gives them (the QuantizeLinear or QLinear op writing it, else the
    DequantizeLinear or QLinear op reading it: QDQ and QOperator models alike). `nodes`: the model's nodes as
    imported, before any pass (its Constant nodes left out: they give no parameters)."""
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
    relevant = [(n.op, n.inputs, n.outputs) for n in nodes if (n.op in _Y_PARAMS or n.op == "DequantizeLinear")
                and not (wanted.isdisjoint(n.inputs) and wanted.isdisjoint(n.outputs))] if wanted else []
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
