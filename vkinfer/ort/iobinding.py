"""ONNX Runtime's IOBinding and OrtValue over numpy arrays (CPU memory only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..session import NodeArg

if TYPE_CHECKING:
    from ..session import InferenceSession


class OrtValue:
    """ONNX Runtime's OrtValue for host (cpu) memory: a numpy array that `numpy()` returns without copying."""

    def __init__(self, array: np.ndarray):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"OrtValue holds a numpy array, got {type(array).__name__}")
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """An OrtValue over `numpy_obj` (host memory, shared)."""
        _check_cpu("OrtValue", device_type, device_id)
        return OrtValue(np.asarray(numpy_obj))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        """A new host OrtValue of `shape` and `element_type` (a numpy type or an ONNX TensorProto type number)."""
        _check_cpu("OrtValue", device_type, device_id)
        return OrtValue(np.empty(tuple(shape), _np_type(element_type)))

    def numpy(self) -> np.ndarray:
        """The array itself (no copy)."""
        return self._array

    def shape(self) -> list[int]:
        """The array's shape."""
        return list(self._array.shape)

    def element_type(self) -> type:
        """The numpy scalar type (numpy.float32, ...)."""
        return self._array.dtype.type

    def data_type(self) -> str:
        """ONNX Runtime's type string, e.g. "tensor(float)"."""
        name = self._array.dtype.name
        return f"tensor({ {'float32': 'float', 'float64': 'double'}.get(name, name) })"

    def device_name(self) -> str:
        """Always "cpu": host memory."""
        return "cpu"

    def data_ptr(self) -> int:
        """The address of the array's data."""
        return int(self._array.ctypes.data)

    def tensor_size_in_bytes(self) -> int:
        """The array's size in bytes."""
        return int(self._array.nbytes)

    def is_tensor(self) -> bool:
        """Always True: vkinfer's values are tensors."""
        return True

    def has_value(self) -> bool:
        """Always True."""
        return True

    def update_inplace(self, np_arr: np.ndarray) -> None:
        """Copy `np_arr` into this value's memory (same shape and dtype)."""
        np.copyto(self._array, np_arr, casting="no")


def _check_cpu(what: str, device_type: Any, device_id: Any) -> None:
    if not isinstance(device_type, str) or device_type.lower() != "cpu" or device_id not in (0, None):
        raise ValueError(f"{what}: vkinfer binds host memory only (device_type 'cpu', device_id 0), got "
                         f"device_type {device_type!r}, device_id {device_id!r}")


def _np_type(element_type: Any) -> np.dtype:
    if isinstance(element_type, int | np.integer) and not isinstance(element_type, bool):
        from onnx import helper

        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(int(element_type)))
        except KeyError:
            raise ValueError(f"unknown ONNX element type {element_type}") from None
    try:
        return np.dtype(element_type)
    except TypeError:
        raise TypeError(f"element_type must be a numpy type or an ONNX TensorProto type number, got "
                        f"{element_type!r}") from None


def _wrap_pointer(what: str, ptr: Any, element_type: Any, shape: Any) -> np.ndarray:
    """A numpy array over host memory at address `ptr` (ONNX Runtime's buffer_ptr binding)."""
    import ctypes

    if isinstance(ptr, bool) or not isinstance(ptr, int | np.integer) or ptr <= 0:
        raise ValueError(f"{what}: buffer_ptr must be a host memory address (a positive int), got {ptr!r}")
    if element_type is None or shape is None:
        raise ValueError(f"{what}: buffer_ptr needs element_type and shape")
    dt = _np_type(element_type)
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = (ctypes.c_char * n).from_address(int(ptr))
    return np.frombuffer(raw, dtype=dt).reshape(shape)


class IOBinding:
    """ONNX Runtime's IOBinding on host memory: inputs and outputs bound by name, run by
    `session.run_with_iobinding(binding)`. An output bound to a caller's array (`bind_output(name, buffer=arr)`,
    or buffer_ptr with element_type and shape, or an OrtValue) is written into that array at every run: on a
    session whose whole model is one native CPU graph, the graph writes it directly (no allocation); otherwise the
    run's result is copied into it."""

    def __init__(self, session: InferenceSession):
        self._sess = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._results: list[np.ndarray] | None = None

    def _input_name(self, name: str) -> str:
        names = [i.name for i in self._sess.get_inputs()]
        if name not in names:
            raise ValueError(f"unknown input {name!r}; the model's inputs: {names}")
        return name

    def _output_arg(self, name: str) -> NodeArg:
        outs = self._sess.get_outputs()
        for o in outs:
            if o.name == name:
                return o
        raise ValueError(f"unknown output {name!r}; the model's outputs: {[o.name for o in outs]}")

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind input `name` to a host array (read at each run; not copied here)."""
        self._input_name(name)
        if isinstance(arr_on_cpu, np.generic):
            arr_on_cpu = np.asarray(arr_on_cpu)
        if not isinstance(arr_on_cpu, np.ndarray):
            raise TypeError(f"input {name!r}: bind a numpy array, got {type(arr_on_cpu).__name__}")
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                   shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """ONNX Runtime's bind_input: host memory only (device_type "cpu") at address `buffer_ptr` holding
        `shape` elements of `element_type`."""
        self._input_name(name)
        _check_cpu(f"input {name!r}", device_type, device_id)
        self._inputs[name] = _wrap_pointer(f"input {name!r}", buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind input `name` to an OrtValue's array."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"input {name!r}: bind a vkinfer.OrtValue, got {type(ortvalue).__name__}")
        self.bind_cpu_input(name, ortvalue.numpy())

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None, *,
                    buffer: np.ndarray | None = None) -> None:
        """Bind output `name`: to a fresh array each run (no buffer), or into a caller's memory that every run
        fills: `buffer` (a numpy array, vkinfer's addition) or `buffer_ptr` with `element_type` and `shape`
        (ONNX Runtime's). The memory must be a writeable C-contiguous array of the output's dtype and shape
        (ValueError naming the output otherwise)."""
        arg = self._output_arg(name)
        _check_cpu(f"output {name!r}", device_type, device_id)
        if buffer is not None and buffer_ptr is not None:
            raise ValueError(f"output {name!r}: give buffer or buffer_ptr, not both")
        if buffer_ptr is not None:
            buffer = _wrap_pointer(f"output {name!r}", buffer_ptr, element_type, shape)
        if buffer is not None:
            self._check_buffer(arg, buffer)
        self._outputs[name] = buffer

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output `name` into an OrtValue's array."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"output {name!r}: bind a vkinfer.OrtValue, got {type(ortvalue).__name__}")
        self.bind_output(name, buffer=ortvalue.numpy())

    def _check_buffer(self, arg: NodeArg, buf: Any) -> None:
        name = arg.name
        if not isinstance(buf, np.ndarray):
            raise ValueError(f"output {name!r}: buffer must be a numpy array, got {type(buf).__name__}")
        t = next(t for t in self._sess.graph.outputs if t.name == name)
        if buf.dtype != t.dtype:
            raise ValueError(f"output {name!r} is {t.dtype}, the buffer is {buf.dtype}")
        if t.shape is not None and (buf.ndim != len(t.shape) or any(
                isinstance(d, int) and d > 0 and d != s for d, s in zip(t.shape, buf.shape, strict=True))):
            raise ValueError(f"output {name!r} has shape {list(t.shape)}, the buffer {list(buf.shape)}")
        if not buf.flags.c_contiguous or not buf.flags.writeable:
            raise ValueError(f"output {name!r}: the buffer must be a writeable C-contiguous array")

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs in binding order, as OrtValues over the bound arrays (no copy)."""
        if self._results is None:
            raise RuntimeError("no outputs yet: call session.run_with_iobinding(binding) first")
        return [OrtValue(a) for a in self._results]

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """Copies of the last run's outputs, in binding order."""
        return [v.numpy().copy() for v in self.get_outputs()]

    def clear_binding_inputs(self) -> None:
        """Forget every bound input."""
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        """Forget every bound output (and the last run's outputs)."""
        self._outputs.clear()
        self._results = None

    def synchronize_inputs(self) -> None:
        """Nothing to do: host memory."""

    def synchronize_outputs(self) -> None:
        """Nothing to do: host memory."""
