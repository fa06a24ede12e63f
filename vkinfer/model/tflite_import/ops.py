"""The TFLite importer's op table: builtin op name -> its one `Op` entry (options class, minimum inputs, the
vkinfer ops it may produce, check and build), defined beside its functions in ops_quantized.py (8-bit compute),
ops_moves.py (data movement and elementwise tables), ops_xnnpack.py (XNNPACK's integer kernels) and here
(resource variables and CALL_ONCE, which the subgraph importer, subgraphs.py, carries out). Adding an op: its
check, its build and one entry in one of those `OPS` dicts."""

from __future__ import annotations

from functools import cache, partial

import numpy as np

from .builder import Op
from .ops_moves import OPS as _MOVES
from .ops_quantized import OPS as _QUANTIZED
from .ops_xnnpack import OPS as _XNNPACK
from .reader import DTYPES, options

# ---- resource variables and CALL_ONCE (checks here, carried out by subgraphs.import_subgraph) --------------------


def _check_call_once(ins, outs, opts, tensors) -> str | None:
    return "CALL_ONCE takes no inputs and writes no outputs" if ins or outs else None


def _check_var_handle(ins, outs, opts, tensors) -> str | None:
    import tflite

    return None if len(outs) == 1 and tensors[outs[0]].dtype == tflite.TensorType.RESOURCE else (
        "VAR_HANDLE must write one resource tensor")


def _check_variable(ins, outs, opts, tensors, *, assign: bool) -> str | None:
    """READ_VARIABLE, ASSIGN_VARIABLE: a resource tensor and one value of a supported type."""
    import tflite

    if tensors[ins[0]].dtype != tflite.TensorType.RESOURCE:
        return f"input {tensors[ins[0]].name!r} is not a resource tensor"
    value = ins[1] if assign else (outs[0] if len(outs) == 1 else -1)
    if value < 0 or tensors[value].dtype not in DTYPES:
        return "the value must be one tensor of a supported type (float32, int32, int64, int8, uint8)"
    return None


_VARIABLES = {
    "CALL_ONCE": Op("CallOnceOptions", _check_call_once, None, min_inputs=0, writes=False, no_options="invalid"),
    "VAR_HANDLE": Op("VarHandleOptions", _check_var_handle, None, min_inputs=0, no_options="invalid"),
    "READ_VARIABLE": Op(None, partial(_check_variable, assign=False), None),
    "ASSIGN_VARIABLE": Op(None, partial(_check_variable, assign=True), None, min_inputs=2, writes=False),
}

OPS: dict[str, Op] = {**_QUANTIZED, **_MOVES, **_XNNPACK, **_VARIABLES}


@cache
def table() -> dict[int, Op]:
    """The op table by builtin code."""
    import tflite

    return {getattr(tflite.BuiltinOperator, name): op for name, op in OPS.items()}


def needs() -> dict[int, tuple[str, ...]]:
    """builtin code -> the vkinfer ops it may produce (ops that produce none left out); all must be in the
    session's op table."""
    return {code: op.needs for code, op in table().items() if op.needs}


def check(code, ins, outs, opts, tensors) -> str | None:
    """Why an op of builtin `code` cannot be imported, or None."""
    op = table().get(code)
    if op is None:
        return "op not supported"
    if opts is None and op.no_options == "unsupported":
        return f"missing {op.options}"
    return op.check(ins, outs, opts, tensors)


_MAX_ELEMENTS = 2 ** 31 - 1  # the native kernels index with 32-bit integers
_MULTI_OUTPUT = ("SPLIT", "SPLIT_V", "UNPACK")  # the table's ops that write more than one tensor


def validate(tensors, ops, ins, outs, names, main: bool = True) -> None:
    """ValueError naming the op and field when the flatbuffer's structure is inconsistent: tensor indices out of
    range (a negative one other than -1, "no tensor", is never read from the end), an op without the inputs or
    outputs its kind needs or with more outputs than it writes, builtin options of another op's type, non-positive
    strides, filters or dilations, a negative dimension, a subgraph input declaring a dimension of 0."""
    import tflite

    n = len(tensors)
    for what, idx in (("input", ins), ("output", outs)):
        for i in idx:
            if not 0 <= i < n:
                raise ValueError(f"subgraph {what} {i} is not a tensor index (the model has {n} tensors)")
    if not outs and main:
        raise ValueError("the subgraph has no outputs")
    seen: set[int] = set()  # the shapes checked, by id: the reader shares equal shapes (a model has a few)
    for t in tensors:
        if id(t.shape) in seen:
            continue
        elements, negative = 1.0, False  # np.prod's float64 product, without a numpy call per tensor
        for d in t.shape:
            elements *= d if d > 1 else 1
            negative = negative or d < 0
        if int(elements) > _MAX_ELEMENTS:
            raise ValueError(f"tensor {t.name!r} has shape {list(t.shape)}: over {_MAX_ELEMENTS} elements")
        if negative:
            raise ValueError(f"tensor {t.name!r} has a negative dimension: shape {list(t.shape)}")
        seen.add(id(t.shape))  # (alive as long as the tensors: its id stays its own)
    for i in ins:  # a declared 0 is a 0-sized tensor (never a symbolic one), which vkinfer does not run
        if 0 in tensors[i].shape:
            raise ValueError(f"subgraph input tensor {tensors[i].name!r} declares dimension 0 on axis "
                             f"{tensors[i].shape.index(0)} (shape {list(tensors[i].shape)}): a 0-sized tensor, "
                             f"which vkinfer does not run")
    options_type = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    ops_table = table()

    def at(k: int, code: int) -> str:  # made only for an error: a string per op was a cost per node
        return f"op {k} ({names.get(code, f'builtin {code}')})"

    per_code: dict[int, tuple] = {}  # code -> (its entry, whether it must write, may write several, options type)
    for k, (code, op_in, op_out, otype, tab) in enumerate(ops):
        known = per_code.get(code)
        if known is None:
            op = ops_table.get(code)
            known = per_code[code] = (op, op is None or op.writes, names.get(code) in _MULTI_OUTPUT,
                                      getattr(tflite.BuiltinOptions, op.options, None)
                                      if op is not None and op.options is not None else None)
        op, writes, multi, expected = known
        for i in op_in:
            if not -1 <= i < n:
                raise ValueError(f"{at(k, code)}: input tensor index {i} is out of range (the model has {n} tensors)")
        if not op_out and writes:
            raise ValueError(f"{at(k, code)} has no outputs")
        for i in op_out:
            if not 0 <= i < n:
                raise ValueError(f"{at(k, code)}: output tensor index {i} is out of range (the model has {n} tensors)")
        if op is None:
            continue  # reported as unsupported
        if len(op_out) > 1 and not multi:
            raise ValueError(f"{at(k, code)} lists {len(op_out)} output tensors {op_out}; the op writes one")
        need = op.min_inputs
        if len(op_in) < need:
            raise ValueError(f"{at(k, code)} needs {need} input tensors, has {op_in}")
        for i in op_in[:need]:
            if i < 0:
                raise ValueError(f"{at(k, code)} needs {need} input tensors, has {op_in}")
        if not op_out:
            continue  # ASSIGN_VARIABLE, CALL_ONCE
        want = None
        rule = op.shape
        if rule == "same":
            want = tensors[op_in[0]].shape
        elif rule == "broadcast":
            shapes = [tensors[i].shape for i in op_in[:need]]
            first = shapes[0]
            for s in shapes:
                if s != first:
                    try:
                        want = tuple(np.broadcast_shapes(*shapes))
                    except ValueError:
                        raise ValueError(f"{at(k, code)}: input shapes {[list(s) for s in shapes]} do not "
                                         "broadcast") from None
                    break
            else:
                want = tuple(first)  # what np.broadcast_shapes gives for equal shapes
        if want is not None:
            out_shape = tensors[op_out[0]].shape
            if out_shape != want and tuple(out_shape) != tuple(want):
                raise ValueError(f"{at(k, code)}: output tensor {tensors[op_out[0]].name!r} has shape "
                                 f"{list(out_shape)}, the inputs give {list(want)}")
        kind = op.options
        if kind is None:
            continue
        if tab is not None and otype != expected:
            raise ValueError(f"{at(k, code)}: builtin options of type {options_type.get(otype, otype)}, "
                             f"expected {kind}")
        if op.no_options == "invalid" and tab is None:
            raise ValueError(f"{at(k, code)} has no {kind}")
        if op.window:
            o = options(op.options_class(), tab)
            for f in op.window:
                if getattr(o, f)() < 1:
                    raise ValueError(f"{at(k, code)}: {kind}.{f} is {getattr(o, f)()}, must be positive")
            if o.Padding() not in (0, 1):
                raise ValueError(f"{at(k, code)}: {kind}.Padding is {o.Padding()} (SAME=0 or VALID=1)")
