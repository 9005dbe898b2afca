"""``IOBinding``: a session's inputs and outputs kept on their devices, with onnxruntime's methods.

An input is bound to a devicelayer Tensor, to any library's DLPack array, to a NumPy
array (``bind_cpu_input``) or, as onnxruntime does, to raw memory (``device_type``, ``device_id``,
``element_type``, ``shape``, ``buffer_ptr``).  A DLPack array is taken again at every run without a copy, so
the producer's latest writes are ordered before the run by DLPack's stream handshake.  An output is bound to a
device (``"cpu"``, ``"cuda"`` with ``device_id``, a device id) or to memory it is written into (a Tensor, a
DLPack array, raw memory).  ``run_with_iobinding`` returns once the outputs are complete; nothing goes through
the host on the way unless a binding asks for the host.

The outputs of a run (``get_outputs()``: devicelayer Tensors, which other libraries take through DLPack) live
until the next run of the binding or ``clear_binding_outputs()``; keep one longer with ``t.to(device)``,
``np.asarray(t)`` or ``devicelayer.from_dlpack(t, copy=True)``.  Memory a DLPack consumer still holds is
released only once the consumer lets go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device import Device
from ..dlpack import Foreign
from ..errors import InvalidArgument
from ..events import Event
from ..interop import from_dlpack
from ..memory import check_shape, device_dtype
from ..tensors import Tensor, free_all as _free_all, tensor
from ..transfer import copy_between
from .providers import device_named


@dataclass
class _Binding:
    """One bound input or output: a Tensor, a DLPack array (taken at each run), a NumPy array, or a device."""

    value: Any = None  # Tensor, NumPy array or DLPack producer
    device: Device | None = None  # an output bound to a device (made there by the run)
    owned: bool = False  # ``value`` is a Tensor this binding made (raw memory): freed with the binding
    readonly: bool = False  # the memory may not be written


def _element_type(element_type: Any) -> np.dtype:
    """A NumPy dtype from a NumPy type or an ONNX TensorProto element type (an int)."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        from .loader import np_dtype

        return np_dtype(int(element_type))
    return device_dtype(element_type, "element_type")


def _raw_tensor(device_type: Any, device_id: Any, element_type: Any, shape: Any, buffer_ptr: Any) -> Tensor:
    """A Tensor over memory another library owns, given by address (onnxruntime's ``buffer_ptr``); the caller
    keeps that memory alive while it is bound, as with onnxruntime."""
    if element_type is None or shape is None:
        raise InvalidArgument("element_type and shape must be given with buffer_ptr")
    if isinstance(buffer_ptr, bool) or not isinstance(buffer_ptr, (int, np.integer)) or buffer_ptr <= 0:
        raise InvalidArgument(f"buffer_ptr must be a memory address (a positive int), got {buffer_ptr!r}")
    dev = device_named(device_type, device_id)
    dtype = _element_type(element_type)
    shape = check_shape(shape, "shape")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not nbytes:
        raise InvalidArgument(f"shape {shape} holds no elements")
    handle, offset = dev.pool.wrap_foreign(int(buffer_ptr), 0, nbytes, None)
    foreign = Foreign(dev.pool.dlpack_device(), f"memory at {int(buffer_ptr):#x}", None)
    return Tensor(dev.pool.adopt(handle, nbytes, dtype, offset=offset, foreign=foreign), shape, dtype)


class IOBinding:
    """Inputs and outputs of one session bound to device memory (see the module's text)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._inputs: dict[str, _Binding] = {}
        self._outputs: dict[str, _Binding] = {}
        self._results: list[Any] = []
        self._result_names: list[str] = []

    # -- inputs -----------------------------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind input ``name`` to a NumPy array (read at each run, no copy until then)."""
        self._check_input(name)
        if not isinstance(arr_on_cpu, np.ndarray):
            raise InvalidArgument(f"bind_cpu_input: input {name!r} needs a NumPy array, got {type(arr_on_cpu).__name__}")
        self._set(self._inputs, name, _Binding(arr_on_cpu))

    def bind_input(self, name: str, device_type: Any, device_id: int = 0, element_type: Any = None,
                   shape: Any = None, buffer_ptr: Any = None) -> None:
        """Bind input ``name`` to a Tensor or DLPack array (``bind_input(name, x)``), or to raw memory as
        onnxruntime does (``device_type`` "cpu"/"cuda" or a device id, ``device_id``, ``element_type``, ``shape``,
        ``buffer_ptr``)."""
        self._check_input(name)
        self._set(self._inputs, name, self._memory(device_type, device_id, element_type, shape, buffer_ptr, "input"))

    def bind_ortvalue_input(self, name: str, ortvalue: Any) -> None:
        """Bind input ``name`` to a Tensor or DLPack array."""
        self.bind_input(name, ortvalue)

    def synchronize_inputs(self) -> None:
        """Wait until every bound input Tensor is written."""
        for b in self._inputs.values():
            if isinstance(b.value, Tensor):
                b.value.ready.wait()

    def clear_binding_inputs(self) -> None:
        """Forget every bound input."""
        for name in list(self._inputs):
            self._set(self._inputs, name, None)

    # -- outputs ----------------------------------------------------------------------------------------------
    def bind_output(self, name: str, device_type: Any = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Any = None, buffer_ptr: Any = None) -> None:
        """Bind output ``name`` to a device (``"cpu"``, ``"cuda"`` with ``device_id``, a device id: the run makes
        the output there), or to memory it is written into: a Tensor or DLPack array, or raw memory as
        onnxruntime gives it (``element_type``, ``shape``, ``buffer_ptr``)."""
        self._check_output(name)
        if buffer_ptr is None and (isinstance(device_type, (str, Device))):
            if element_type is not None or shape is not None:
                raise InvalidArgument("bind_output: element_type and shape go with buffer_ptr")
            binding = _Binding(device=device_named(device_type, device_id))
        else:
            binding = self._memory(device_type, device_id, element_type, shape, buffer_ptr, "output")
            if binding.readonly:
                raise InvalidArgument(f"bind_output: output {name!r} is bound to read-only memory")
        self._set(self._outputs, name, binding)

    def bind_ortvalue_output(self, name: str, ortvalue: Any) -> None:
        """Bind output ``name`` to memory it is written into (a Tensor or DLPack array)."""
        self.bind_output(name, ortvalue)

    def get_outputs(self) -> list[Any]:
        """The outputs of the last run, in binding order (all outputs when none was bound): Tensors on their
        devices (lists of Tensors for sequences), or the memory an output was bound to (a Tensor or DLPack
        array)."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The outputs of the last run as NumPy arrays."""
        return [_host_copy(r) for r in self._results]

    def synchronize_outputs(self) -> None:
        """Wait until the outputs of the last run are written (they are when ``run_with_iobinding`` returns)."""
        for t in _tensors(self._results):
            t.ready.wait()

    def clear_binding_outputs(self) -> None:
        """Forget every bound output, and free the outputs of the last run."""
        for name in list(self._outputs):
            self._set(self._outputs, name, None)
        self._drop_results()

    # -- running ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        session = self.session
        expected = [i.name for i in session.get_inputs()]
        missing = [n for n in expected if n not in self._inputs]
        if missing:
            raise InvalidArgument(f"run_with_iobinding: input(s) {missing} are not bound (bind_input or "
                                  "bind_cpu_input)")
        taken: list[Tensor] = []  # DLPack arrays wrapped for this run
        feeds: dict[str, Any] = {}
        try:
            for name, b in self._inputs.items():
                feeds[name] = self._take(b.value, taken)
            results = session.plan.run(feeds, profile=session._profiling)
        except BaseException:
            _free_all(taken)
            raise
        names = list(self._outputs) or [o.name for o in session.get_outputs()]
        keep = {id(t.buffer.root) for t in feeds.values() if isinstance(t, Tensor)}  # never free what was fed
        made: list[Any] = []
        pending: list[Event] = []
        try:
            for name in names:
                made.append(self._place(name, results[name], taken, keep, pending))
            for ev in pending:
                ev.wait()
        except BaseException:  # a failure or a Ctrl-C: the run's outputs go
            _free_all(t for r in results.values() for t in _tensors(r) if id(t.buffer.root) not in keep)
            _free_all(taken)
            raise
        placed = {id(t) for r in made for t in _tensors(r)}
        _free_all(t for r in results.values() for t in _tensors(r)
                  if id(t) not in placed and id(t.buffer.root) not in keep)
        _free_all(taken)
        self._drop_results()
        self._results, self._result_names = made, names

    def _place(self, name: str, result: Any, taken: list[Tensor], keep: set[int], pending: list[Event]) -> Any:
        """Output ``name`` where its binding wants it (its device, or the memory it is written into)."""
        binding = self._outputs.get(name)
        if isinstance(result, list):
            if binding is not None and binding.value is not None:
                raise InvalidArgument(f"output {name!r} is a sequence; bind it to a device, not to memory")
            return [self._place_tensor(e, binding, keep) for e in result]
        if not isinstance(result, Tensor):  # an output known on the host
            dev = binding.device if binding is not None and binding.device is not None else None
            result = tensor(np.asarray(result), dev or self.session.plan.devices[0])
        if binding is None or binding.value is None:
            return self._place_tensor(result, binding, keep)
        dest = binding.value if isinstance(binding.value, Tensor) else self._wrap(binding.value, taken)
        if dest.readonly:
            raise InvalidArgument(f"output {name!r} is bound to read-only memory")
        if dest.shape != result.shape or dest.dtype != result.dtype:
            raise InvalidArgument(f"output {name!r} is {result.shape} {result.dtype}; the memory bound to it is "
                                  f"{dest.shape} {dest.dtype}")
        if result.nbytes:
            dest.buffer.check_alive(f"output {name!r}")
            event = copy_between(dest.buffer.view(0, dest.nbytes, np.uint8),
                                 result.buffer.view(0, result.nbytes, np.uint8), [result.ready, dest.ready])
            dest.ready = event
            pending.append(event)
        return binding.value  # the memory written into: the caller's Tensor or DLPack array

    @staticmethod
    def _place_tensor(t: Tensor, binding: _Binding | None, keep: set[int]) -> Tensor:
        if binding is None or binding.device is None or t.device is binding.device:
            return t
        moved = t.to(binding.device)
        if id(t.buffer.root) not in keep:
            t.free()
        return moved

    @classmethod
    def _take(cls, value: Any, taken: list[Tensor]) -> Any:
        """A bound input as the plan takes it: a Tensor or NumPy array as is, a DLPack array wrapped afresh."""
        return value if isinstance(value, (Tensor, np.ndarray)) else cls._wrap(value, taken)

    @staticmethod
    def _wrap(value: Any, taken: list[Tensor]) -> Tensor:
        """A DLPack array as a Tensor, taken again for this run (its producer's pending work ordered first)."""
        t = from_dlpack(value)
        taken.append(t)
        return t

    # -- helpers ------------------------------------------------------------------------------------------------
    def _memory(self, value: Any, device_id: Any, element_type: Any, shape: Any, buffer_ptr: Any,
                what: str) -> _Binding:
        if buffer_ptr is not None:
            return _Binding(_raw_tensor(value, device_id, element_type, shape, buffer_ptr), owned=True)
        if isinstance(value, Tensor):
            value.buffer.check_alive(f"bind_{what}")
            return _Binding(value, readonly=value.readonly)
        if isinstance(value, np.ndarray) and what == "input":
            return _Binding(value)
        if hasattr(value, "__dlpack__"):
            probe = from_dlpack(value)  # checks now that devicelayer can take it (no copy is made)
            probe.free()
            return _Binding(value, readonly=probe.readonly)
        raise InvalidArgument(f"bind_{what}: expected a Tensor, a DLPack array or (device_type, device_id, "
                              f"element_type, shape, buffer_ptr), got {type(value).__name__}")

    def _check_input(self, name: Any) -> None:
        names = [i.name for i in self.session.get_inputs()]
        if name not in names:
            raise InvalidArgument(f"invalid input name {name!r}; the model's inputs are {names}")

    def _check_output(self, name: Any) -> None:
        names = [o.name for o in self.session.get_outputs()]
        if name not in names:
            raise InvalidArgument(f"invalid output name {name!r}; the model's outputs are {names}")

    @staticmethod
    def _set(table: dict[str, _Binding], name: str, binding: _Binding | None) -> None:
        old = table.pop(name, None)
        if old is not None and old.owned:
            old.value.free()
        if binding is not None:
            table[name] = binding

    def _drop_results(self) -> None:
        bound = {id(b.value) for b in self._outputs.values()}
        _free_all(t for r in self._results for t in _tensors(r) if id(t) not in bound and not t.buffer.freed
                  and not _is_bound_memory(t, self._outputs))
        self._results, self._result_names = [], []

    def __repr__(self) -> str:
        return f"<IOBinding inputs {sorted(self._inputs)}, outputs {sorted(self._outputs)}>"


def _is_bound_memory(t: Tensor, outputs: dict[str, _Binding]) -> bool:
    return any(isinstance(b.value, Tensor) and b.value.buffer.root is t.buffer.root for b in outputs.values())


def _host_copy(x: Any) -> Any:
    """A NumPy copy of an output (a Tensor, a list of them, or a DLPack array it was written into)."""
    if isinstance(x, list):
        return [_host_copy(e) for e in x]
    if isinstance(x, Tensor):
        return x.numpy()
    t = from_dlpack(x)
    try:
        return t.numpy()
    finally:
        t.free()


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, list):
        return [t for e in x for t in _tensors(e)]
    return []


