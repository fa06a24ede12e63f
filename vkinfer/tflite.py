"""LiteRT's (TFLite's) Python Interpreter API over vkinfer: a script written for ai_edge_litert runs with only the
import changed.

    from vkinfer.tflite import Interpreter        # was: from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path="model.tflite", num_threads=2)          # device="cpu" | "vulkan" | ... (vkinfer's)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    scale, zero_point = inp["quantization"]
    it.set_tensor(inp["index"], x)
    it.invoke()
    y = it.get_tensor(out["index"])

Tensor names, indices, shapes, shape signatures, dtypes and quantization parameters are the .tflite file's (read by
vkinfer.model.tflite_import into the graph's metadata), in ai_edge_litert's dict layout. The model runs in a
vkinfer InferenceSession: `device` (default "auto": the dispatcher places every node), `placement`, `objective`,
`profile` are vkinfer's keywords; `num_threads` is its CPU thread count (None or -1: vkinfer's default; 0 means 1,
as in LiteRT). Streaming (stateful) models keep their resource variables across `invoke` calls, as LiteRT does;
`reset_all_variables()` restores their initial values.

Differences from LiteRT: `get_tensor` and `tensor` reach the model's inputs and outputs only (vkinfer fuses or lays
out intermediate tensors differently: asking for one raises ValueError); `experimental_delegates` take the
delegates of `load_delegate("vulkan" | "vulkan:<which>" | "cpu")` (any other library raises DelegateLoadError, an
OSError as ai_edge_litert raises and a ValueError as LiteRT documents); the other `experimental_*` arguments are
accepted and have no effect (a non-default op resolver warns: vkinfer computes what LiteRT's default XNNPACK
kernels compute). `resize_tensor_input` may change the batch (first) dimension only: vkinfer's import fixes
attributes from the file's static shapes (SAME padding, RESHAPE targets, split sizes), so `allocate_tensors`
traces the model at the new shape, checks that every tensor has the file's shape with its batch scaled, compiles
it, and raises RuntimeError otherwise (LiteRT's error class for a shape a model cannot take; LiteRT itself would
also accept new spatial sizes).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Interpreter", "SignatureRunner", "Delegate", "DelegateLoadError", "load_delegate", "OpResolverType"]


class OpResolverType(enum.Enum):
    """LiteRT's op resolver choice (accepted; vkinfer computes what the default, AUTO / BUILTIN, computes)."""

    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


class DelegateLoadError(OSError, ValueError):
    """A delegate library vkinfer does not provide: an OSError as ai_edge_litert raises for a library it cannot
    open, and a ValueError as LiteRT documents."""


class Delegate:
    """A vkinfer device given as a LiteRT delegate (made by `load_delegate`)."""

    def __init__(self, library: str, options: dict | None = None):
        self.library, self.options = library, dict(options or {})
        kind, _, which = library.partition(":")
        if kind not in ("vulkan", "cpu"):
            raise DelegateLoadError(f"Failed to load delegate from {library}: vkinfer's delegates are 'vulkan', "
                             f"'vulkan:<index|name|type>' and 'cpu' (vkinfer runs its own devices, no delegate "
                             f"libraries)")
        bad = [k for k in self.options if k != "device"]
        if bad:
            raise ValueError(f"delegate {library!r}: unknown option(s) {bad}; its option: 'device'")
        if "device" in self.options:
            if which:
                raise ValueError(f"delegate {library!r}: give the device in the name or in options, not both")
            which = str(self.options["device"])
        self.device = f"{kind}:{which}" if which else kind

    def __repr__(self) -> str:
        return f"Delegate({self.device!r})"


def load_delegate(library: str, options: dict | None = None) -> Delegate:
    """LiteRT's load_delegate for vkinfer's devices: "vulkan" (options {"device": index, name or type}),
    "vulkan:<which>" or "cpu"; DelegateLoadError (an OSError and a ValueError) for anything else."""
    if not isinstance(library, str):
        raise DelegateLoadError(f"Failed to load delegate from {library!r}: give a device name")
    return Delegate(library, options)


def _num_threads(n: Any) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise ValueError(f"type of num_threads should be int, got {type(n).__name__} {n!r}")
    if n < -1:
        raise ValueError(f"num_threads should be >= -1, got {n}")
    return None if n == -1 else max(int(n), 1)


class Interpreter:
    """ai_edge_litert.interpreter.Interpreter's API over a vkinfer InferenceSession (module docstring).

    model_path / model_content: the .tflite file or its bytes (exactly one). experimental_delegates: delegates
    from `load_delegate` (choosing the device). num_threads: CPU threads (None or -1: vkinfer's default).
    vkinfer_kwargs: `device` ("auto" by default), `placement`, `objective`, `profile` of
    vkinfer.session.InferenceSession."""

    def __init__(self, model_path: str | os.PathLike | None = None, model_content: bytes | None = None,
                 experimental_delegates: list[Delegate] | None = None, num_threads: int | None = None,
                 experimental_op_resolver_type: OpResolverType | Any = OpResolverType.AUTO,
                 experimental_preserve_all_tensors: bool = False, **vkinfer_kwargs: Any):
        from .model.tflite_import import is_tflite
        from .session import InferenceSession

        if (model_path is None) == (model_content is None):
            raise ValueError("`model_path` or `model_content` must be specified (exactly one)")
        if model_path is not None:
            if not isinstance(model_path, str | os.PathLike):
                raise ValueError(f"model_path must be a path, got {type(model_path).__name__}")
            from .model.onnx_import import read_model_file

            blob = read_model_file(model_path)  # a regular file of bounded size (never a FIFO or a device)
        else:
            if not isinstance(model_content, bytes | bytearray | memoryview):
                raise ValueError(f"model_content must be bytes, got {type(model_content).__name__}")
            blob = bytes(model_content)
        if not is_tflite(blob):
            raise ValueError("Model provided has model identifier that is not 'TFL3': not a TFLite model")
        ignored = [k for k in vkinfer_kwargs if k.startswith("experimental_")]
        for k in ignored:
            vkinfer_kwargs.pop(k)
        bad = [k for k in vkinfer_kwargs if k not in ("device", "placement", "objective", "profile")]
        if bad:
            raise TypeError(f"Interpreter got unexpected keyword argument(s) {bad}")
        name = getattr(experimental_op_resolver_type, "name", str(experimental_op_resolver_type))
        if name not in ("AUTO", "BUILTIN"):
            warnings.warn(f"experimental_op_resolver_type={name}: vkinfer computes what LiteRT's default kernels "
                          f"(XNNPACK) compute", RuntimeWarning, stacklevel=2)
        device = vkinfer_kwargs.pop("device", None)
        for d in experimental_delegates or ():
            if not isinstance(d, Delegate):
                raise ValueError(f"experimental_delegates: {d!r} is not a vkinfer delegate (use "
                                 f"vkinfer.tflite.load_delegate('vulkan'))")
            if device is not None and device != d.device:
                raise ValueError(f"the delegates and device= name different devices ({device!r}, {d.device!r})")
            device = d.device
        self._session = InferenceSession(blob, device=device or "auto", threads=_num_threads(num_threads),
                                         **vkinfer_kwargs)
        meta = self._session.graph.meta["tflite"]
        self._tensors: list[dict] = meta["tensors"]
        self._signatures: dict[str, dict] = meta["signatures"]
        self._subgraphs: int = meta["subgraphs"]
        # tensor index -> graph tensor name (user inputs, then outputs, as the file lists them)
        self._in = dict(zip(meta["inputs"], meta["input_names"], strict=True))
        self._out = dict(zip(meta["outputs"], meta["output_names"], strict=True))
        self._shapes = {i: tuple(self._tensors[i]["shape"]) for i in [*self._in, *self._out]}
        self._infos = {t.name: t for t in self._session.graph.inputs}
        self._allocated = False
        self._buffers: dict[int, np.ndarray] = {}

    # ---- details ----
    def _details(self, i: int) -> dict[str, Any]:
        t = self._tensors[i]
        scales, zps = t["scales"], t["zero_points"]
        shape = self._shapes.get(i, t["shape"])
        sig = t["shape_signature"] if t["shape_signature"] is not None else shape  # LiteRT's rule
        return {"name": t["name"], "index": i, "shape": np.array(shape, np.int32),
                "shape_signature": np.array(sig, np.int32), "dtype": t["dtype"],
                "quantization": (float(scales[0]), int(zps[0])) if scales.size == 1 else (0.0, 0),
                "quantization_parameters": {"scales": scales.copy(), "zero_points": zps.copy(),
                                            "quantized_dimension": t["quantized_dimension"], "block_size": 0},
                "sparsity_parameters": {}}

    def get_input_details(self) -> list[dict[str, Any]]:
        """Per model input, in the file's order: name, index, shape, shape_signature, dtype, quantization (scale,
        zero_point), quantization_parameters (scales, zero_points, quantized_dimension, block_size),
        sparsity_parameters: as ai_edge_litert gives them."""
        return [self._details(i) for i in self._in]

    def get_output_details(self) -> list[dict[str, Any]]:
        """Per model output, as get_input_details."""
        return [self._details(i) for i in self._out]

    def get_tensor_details(self, subgraph_index: int = 0) -> list[dict[str, Any]]:
        """Details of every named tensor of subgraph 0 whose type numpy has (only inputs and outputs hold data)."""
        self._check_subgraph(subgraph_index)
        return [self._details(i) for i, t in enumerate(self._tensors) if t["name"] and t["dtype"] is not None]

    def num_subgraphs(self) -> int:
        """The model's subgraph count (vkinfer runs subgraph 0, evaluating CALL_ONCE init subgraphs at load)."""
        return self._subgraphs

    # ---- shapes and memory ----
    def resize_tensor_input(self, input_index: int, tensor_size, strict: bool = False) -> None:
        """Give input `input_index` a new shape, in effect from the next allocate_tensors(). `strict`: only the
        dimensions the shape signature leaves unknown (-1) may change."""
        i = self._index(input_index, "resize_tensor_input", inputs_only=True)
        try:
            shape = tuple(int(s) for s in np.asarray(tensor_size).reshape(-1))
        except (TypeError, ValueError):
            raise ValueError(f"resize_tensor_input: tensor_size must be a list of ints, got {tensor_size!r}") from None
        if any(s < 1 for s in shape):
            raise ValueError(f"resize_tensor_input: input {i} ({self._tensors[i]['name']!r}): dimensions must be "
                             f"positive, got {list(shape)}")
        sig = self._tensors[i]["shape_signature"] or self._tensors[i]["shape"]
        if strict and (len(shape) != len(sig) or any(d != -1 and d != s for d, s in zip(sig, shape, strict=True))):
            raise ValueError(f"resize_tensor_input: input {i} ({self._tensors[i]['name']!r}) has shape signature "
                             f"{list(sig)}: with strict=True only its -1 dimensions may change, got {list(shape)}")
        if shape != self._shapes[i]:
            self._shapes[i] = shape
            self._allocated = False

    def allocate_tensors(self) -> None:
        """Make the input and output buffers for the current input shapes (compiling the model for resized
        inputs; RuntimeError where it cannot take them)."""
        sess = self._session
        g = sess.graph
        changed = False
        for k, t in enumerate(g.inputs):
            idx = next((i for i, n in self._in.items() if n == t.name), None)
            want = self._infos[t.name].shape if idx is None else self._shapes[idx]
            if tuple(t.shape) != tuple(want):
                g.inputs[k] = dataclasses.replace(t, shape=tuple(want))
                changed = True
        if changed or any(tuple(self._shapes[i]) != tuple(self._infos[n].shape) for i, n in self._in.items()):
            out_shapes = self._resized(g)
        else:
            out_shapes = {i: tuple(self._tensors[i]["shape"]) for i in self._out}
        for i in self._in:
            t = self._infos[self._in[i]]
            buf = self._buffers.get(i)
            if buf is None or buf.shape != self._shapes[i]:
                self._buffers[i] = np.zeros(self._shapes[i], t.dtype)
        for i, n in self._out.items():
            self._shapes[i] = out_shapes[i]
            dt = next(t.dtype for t in g.outputs if t.name == n)
            buf = self._buffers.get(i)
            if buf is None or buf.shape != out_shapes[i]:
                self._buffers[i] = np.zeros(out_shapes[i], dt)
        self._allocated = True

    def _resized(self, g) -> dict[int, tuple[int, ...]]:
        """The output shapes for resized inputs, after checking that the model takes them: vkinfer's import bakes
        the file's static shapes into some attributes (SAME padding, RESHAPE targets, split sizes), so only the
        batch dimension may change, every tensor the trace gives must have the file's shape with its batch scaled
        alike, and the plan must compile; RuntimeError otherwise (LiteRT's error class for a shape a model cannot
        take)."""
        from .compiler.plan import trace

        shapes = {self._tensors[i]["name"]: list(self._shapes[i]) for i in self._in}

        def refuse(why: str) -> RuntimeError:
            return RuntimeError(f"allocate_tensors: the model cannot run with input shapes {shapes}: {why}")

        ratios = set()
        for i in self._in:
            old, new = self._tensors[i]["shape"], self._shapes[i]
            if len(old) != len(new) or list(old[1:]) != list(new[1:]) or not old:
                raise refuse(f"vkinfer compiles a TFLite model for the file's shapes except the batch (first) "
                             f"dimension; input {self._tensors[i]['name']!r} is {list(old)} in the file")
            ratios.add(new[0] / old[0])
        if len(ratios) != 1:
            raise refuse("the inputs' batch dimensions do not scale alike")
        r = ratios.pop()
        feed = {t.name: np.zeros(t.shape, t.dtype) for t in g.inputs}
        try:
            info = trace(g, feed)
        except (ValueError, TypeError) as e:
            raise refuse(str(e)) from e
        names = self._session.graph.meta["tflite"]["graph_names"]
        for t, name in zip(self._tensors, names, strict=True):
            if name in info and name not in g.consts and t["shape"]:
                want = (t["shape"][0] * r, *t["shape"][1:])
                if tuple(info[name][0]) != want:
                    raise refuse(f"tensor {t['name']!r} would be {list(info[name][0])}, not the file's "
                                 f"{list(t['shape'])} with the batch scaled ({[int(d) for d in want]}): a shape the "
                                 f"import fixed")
        try:
            self._session.plan(feed)
        except (ValueError, TypeError) as e:
            raise refuse(str(e)) from e
        return {i: tuple(info[n][0]) for i, n in self._out.items()}

    # ---- data ----
    def _check_subgraph(self, subgraph_index: int) -> None:
        if subgraph_index != 0:
            raise ValueError(f"subgraph_index {subgraph_index}: vkinfer reaches subgraph 0's tensors only (the model "
                             f"has {self._subgraphs} subgraphs)")

    def _index(self, tensor_index: Any, what: str, inputs_only: bool = False) -> int:
        if isinstance(tensor_index, bool) or not isinstance(tensor_index, int | np.integer):
            raise ValueError(f"{what}: tensor index must be an int, got {type(tensor_index).__name__} "
                             f"{tensor_index!r}")
        i = int(tensor_index)
        if not 0 <= i < len(self._tensors):
            raise ValueError(f"{what}: invalid tensor index {i} (the model's tensors are 0 to "
                             f"{len(self._tensors) - 1}; inputs {list(self._in)}, outputs {list(self._out)})")
        if inputs_only and i not in self._in:
            raise ValueError(f"{what}: tensor {i} ({self._tensors[i]['name']!r}) is not an input of the model; "
                             f"its inputs: {self._names(self._in)}")
        if i not in self._in and i not in self._out:
            raise ValueError(f"{what}: tensor {i} ({self._tensors[i]['name']!r}) is neither an input nor an output: "
                             f"vkinfer keeps only the model's inputs {self._names(self._in)} and outputs "
                             f"{self._names(self._out)} (it fuses or lays out intermediate tensors differently)")
        return i

    def _names(self, which: dict[int, str]) -> list[str]:
        return [f"{i} ({self._tensors[i]['name']!r})" for i in which]

    def _ready(self, what: str, error: type[Exception] = ValueError) -> None:
        if not self._allocated:
            raise error(f"{what}: tensors are not allocated: call allocate_tensors() first")

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None:
        """Copy `value` into input `tensor_index` (its dtype and current shape exactly)."""
        i = self._index(tensor_index, "set_tensor", inputs_only=True)
        self._ready("set_tensor")
        if isinstance(value, np.generic) or not isinstance(value, np.ndarray):
            value = np.asarray(value)
        buf = self._buffers[i]
        name = self._tensors[i]["name"]
        if value.dtype != buf.dtype:
            raise ValueError(f"Cannot set tensor: got value of type {value.dtype} but expected type {buf.dtype} for "
                             f"input {i}, name: {name}")
        if value.shape != buf.shape:
            raise ValueError(f"Cannot set tensor: got shape {list(value.shape)} but expected {list(buf.shape)} for "
                             f"input {i}, name: {name} (resize_tensor_input and allocate_tensors change it)")
        np.copyto(buf, value)

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """A copy of input or output `tensor_index` (an output: as the last invoke() left it)."""
        self._check_subgraph(subgraph_index)
        i = self._index(tensor_index, "get_tensor")
        self._ready("get_tensor")
        return self._buffers[i].copy()

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        """A function returning the input or output buffer itself (no copy): writing an input's changes the next
        invoke(); an output's is refilled in place by each invoke(). allocate_tensors() after a resize replaces
        the buffers, as in LiteRT."""
        i = self._index(tensor_index, "tensor")

        def view() -> np.ndarray:
            self._ready("tensor")
            return self._buffers[i]

        return view

    def invoke(self) -> None:
        """Run the model on the input buffers; the outputs go to the output buffers (a streaming model's
        variables carry over to the next invoke)."""
        self._ready("Invoke called on model that is not ready", RuntimeError)
        outs = self._session.run(None, {n: self._buffers[i] for i, n in self._in.items()})
        names = [o.name for o in self._session.get_outputs()]
        got = dict(zip(names, outs, strict=True))
        for i, n in self._out.items():
            v = got[n]
            buf = self._buffers[i]
            if buf.shape == v.shape and buf.dtype == v.dtype:
                np.copyto(buf, v)
            else:  # shapes known only after a run (device "reference" after a resize)
                self._buffers[i] = np.array(v, copy=True)
                self._shapes[i] = v.shape

    def reset_all_variables(self) -> None:
        """A streaming model's resource variables back to their initial values (the init subgraph's)."""
        self._session.reset_state()

    # ---- signatures ----
    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        """{signature key: {"inputs": [names], "outputs": [names]}} from the file's SignatureDefs (names sorted, as
        ai_edge_litert lists them); {} for a model without any."""
        return {k: {"inputs": sorted(s["inputs"]), "outputs": sorted(s["outputs"])}
                for k, s in self._signatures.items()}

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        """A callable running SignatureDef `signature_key` (None: the model's only one) with keyword inputs and
        returning {output name: array}."""
        if signature_key is None:
            if len(self._signatures) != 1:
                raise ValueError(f"SignatureDef signature_key is None and model has {len(self._signatures)} "
                                 f"Signatures. None is only allowed when the model has 1 SignatureDef")
            signature_key = next(iter(self._signatures))
        return SignatureRunner(self, signature_key)

    @property
    def session(self):
        """The vkinfer InferenceSession running the model (placement, explain(), ...)."""
        return self._session


class SignatureRunner:
    """ai_edge_litert's SignatureRunner: `runner(**inputs)` -> {output name: array}, by the SignatureDef's names."""

    def __init__(self, interpreter: Interpreter, signature_key: str):
        if signature_key not in interpreter._signatures:
            raise ValueError(f'Invalid signature_key provided: "{signature_key}" (the model\'s: '
                             f"{list(interpreter._signatures)})")
        sig = interpreter._signatures[signature_key]
        if sig["subgraph_index"] != 0:
            raise ValueError(f"signature {signature_key!r} runs subgraph {sig['subgraph_index']}: vkinfer runs "
                             f"subgraph 0 only")
        self._it, self._key = interpreter, signature_key
        # by name, as ai_edge_litert orders them
        self._inputs: dict[str, int] = dict(sorted(sig["inputs"].items()))
        self._outputs: dict[str, int] = dict(sorted(sig["outputs"].items()))
        for name, i in [*self._inputs.items(), *self._outputs.items()]:
            if i not in interpreter._in and i not in interpreter._out:
                raise ValueError(f"signature {signature_key!r}: {name!r} is tensor {i}, not an input or output of "
                                 f"subgraph 0")

    def __call__(self, **kwargs: np.ndarray) -> dict[str, np.ndarray]:
        it = self._it
        if len(kwargs) != len(self._inputs):
            raise ValueError(f"Invalid number of inputs provided for running a SignatureDef, expected "
                             f"{len(self._inputs)} vs provided {len(kwargs)} (its inputs: {sorted(self._inputs)})")
        for name, value in kwargs.items():
            if name not in self._inputs:
                raise ValueError(f"Invalid Input name ({name}) for SignatureDef; its inputs: {sorted(self._inputs)}")
            it.resize_tensor_input(self._inputs[name], np.shape(value))
        if not it._allocated:
            it.allocate_tensors()
        for name, value in kwargs.items():
            it.set_tensor(self._inputs[name], value)
        it.invoke()
        return {name: it.get_tensor(i) for name, i in self._outputs.items()}

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        """{signature input name: tensor details}."""
        return {n: self._it._details(i) for n, i in self._inputs.items()}

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        """{signature output name: tensor details}."""
        return {n: self._it._details(i) for n, i in self._outputs.items()}
