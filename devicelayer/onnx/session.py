"""``InferenceSession``: onnxruntime's calling conventions over devicelayer's ONNX front end.

Code written for onnxruntime switches with one changed import (``import devicelayer.onnx as ort``): the session
takes a path, bytes or a ModelProto, ``sess_options`` and ``providers`` (devicelayer device ids, ``"auto"``, or
onnxruntime's provider names, mapped in ``providers.py``), and answers ``get_inputs()``, ``get_outputs()``,
``get_modelmeta()``, ``get_providers()``, ``run()`` and ``io_binding()`` / ``run_with_iobinding()``.  Under it is
one ``OnnxModel`` compiled into one ``DynamicPlan``, specialised per signature of input shapes by itself; the
session also answers the plan's ``placement_report()``, ``memory_report()`` and profiling (``trace``, ``gantt``).

Errors are devicelayer's: ``InvalidArgument`` names the input or output at fault (unknown, missing, wrong dtype or
shape), ``GraphError`` a malformed model, ``UnsupportedOp`` an op devicelayer lacks.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..casting import to_dtype
from ..errors import InvalidArgument
from ..tensors import Tensor, free_all as _free_all
from . import providers as _providers
from .loader import read_model
from .model import OnnxModel


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimisation levels: ``ORT_DISABLE_ALL`` loads the graph as written (no folding)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes (accepted; devicelayer's scheduler overlaps what it can either way)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


@dataclass
class SessionOptions:
    """onnxruntime's SessionOptions.  devicelayer reads ``graph_optimization_level`` (ORT_DISABLE_ALL: no
    folding), ``enable_profiling`` (every run profiled; ``end_profiling()`` writes the trace) and
    ``profile_file_prefix``; the others are accepted and kept, and onnxruntime's own SessionOptions is read the
    same way."""

    graph_optimization_level: int = GraphOptimizationLevel.ORT_ENABLE_ALL
    enable_profiling: bool = False
    profile_file_prefix: str = "onnxruntime_profile_"
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: int = ExecutionMode.ORT_SEQUENTIAL
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True
    use_deterministic_compute: bool = False
    optimized_model_filepath: str = ""
    config_entries: dict[str, str] = field(default_factory=dict)

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Keep a configuration entry (devicelayer reads none)."""
        self.config_entries[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """A configuration entry set before; InvalidArgument when there is none."""
        if key not in self.config_entries:
            raise InvalidArgument(f"no session config entry {key!r}")
        return self.config_entries[key]


@dataclass
class RunOptions:
    """onnxruntime's RunOptions (accepted; devicelayer reads none of them)."""

    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    terminate: bool = False
    only_execute_path_to_fetches: bool = False


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: ``name``, ``shape`` (ints, dim_param names as strings,
    None for unnamed dynamic dimensions; [] where the model gives no shape) and ``type`` (``"tensor(float)"``)."""

    name: str
    shape: list[Any]
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata as onnxruntime's ``get_modelmeta()`` gives it."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _type_name(type_proto: Any) -> str:
    """onnxruntime's text for an ONNX type: ``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``."""
    from onnx import TensorProto

    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({TensorProto.DataType.Name(type_proto.tensor_type.elem_type).lower()})"
    if which == "sequence_type":
        return f"seq({_type_name(type_proto.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_type_name(type_proto.optional_type.elem_type)})"
    if which == "map_type":
        key = TensorProto.DataType.Name(type_proto.map_type.key_type).lower()
        return f"map({key},{_type_name(type_proto.map_type.value_type)})"
    return "unknown"


def _node_arg(value_info: Any, names: set[str] | None = None) -> NodeArg:
    """The NodeArg of a ValueInfo; a dim_param outside ``names`` (one shape inference made up) reads as None."""
    t = value_info.type
    shape: list[Any] = []
    if t.WhichOneof("value") == "tensor_type" and t.tensor_type.HasField("shape"):
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(d.dim_param if d.dim_param and (names is None or d.dim_param in names) else None)
    return NodeArg(value_info.name, shape, _type_name(t))


def _dim_names(value_infos: Any) -> set[str]:
    return {d.dim_param for vi in value_infos if vi.type.WhichOneof("value") == "tensor_type"
            for d in vi.type.tensor_type.shape.dim if d.dim_param}


def _outputs_typed(proto: Any) -> list[Any]:
    """The graph's outputs, each with the shape ONNX's shape inference gives it where the model declares none
    (onnxruntime describes outputs after inference too)."""
    import onnx

    declared = list(proto.graph.output)
    if all(vi.type.WhichOneof("value") != "tensor_type" or vi.type.tensor_type.HasField("shape") for vi in declared):
        return declared
    try:
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(proto).graph.output}
    except Exception:  # noqa: BLE001 - inference is a nicety here; the declared types stand
        return declared
    return [inferred.get(vi.name, vi) if vi.type.WhichOneof("value") == "tensor_type"
            and not vi.type.tensor_type.HasField("shape") else vi for vi in declared]


class InferenceSession:
    """A model ready to run with onnxruntime's calling conventions (see the module's text)."""

    def __init__(self, path_or_bytes: Any, sess_options: Any = None, providers: Any = None,
                 provider_options: Any = None, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - {"disabled_optimizers"})
        if unknown:
            raise InvalidArgument(f"InferenceSession: unexpected argument(s) {unknown}")
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._model_path = path_or_bytes if isinstance(path_or_bytes, str) else None
        proto = read_model(path_or_bytes)
        level = getattr(self._sess_options, "graph_optimization_level", GraphOptimizationLevel.ORT_ENABLE_ALL)
        self._proto = proto
        self._model = OnnxModel(proto, fold=int(level) != GraphOptimizationLevel.ORT_DISABLE_ALL)
        initializers = {i.name for i in proto.graph.initializer}
        declared = {vi.name: vi for vi in proto.graph.input if vi.name not in initializers}
        self._inputs = [_node_arg(declared[spec.name]) for spec in self._model.inputs]
        names = _dim_names([*proto.graph.input, *proto.graph.output, *proto.graph.value_info])
        self._outputs = [_node_arg(vi, names) for vi in _outputs_typed(proto)]
        self._start_ns = time.time_ns()
        self._plan: Any = None
        self.set_providers(providers, provider_options)

    # -- onnxruntime's interface ---------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded), in order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in order."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers that are also graph inputs: none can be fed here (they are constants of the plan)."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        """Producer, graph name, domain, doc strings, model version and metadata properties."""
        p = self._proto
        version = int(p.model_version) if p.HasField("model_version") else 2**63 - 1  # onnxruntime's "unset"
        return ModelMetadata(p.producer_name, p.graph.name, p.domain, p.doc_string, p.graph.doc_string, version,
                             {e.key: e.value for e in p.metadata_props})

    def get_providers(self) -> list[str]:
        """The providers in use, named as they were asked for (device ids for ``"auto"``)."""
        return [p.name for p in self._providers]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Each provider's options, as strings."""
        return {p.name: dict(p.options) for p in self._providers}

    def get_session_options(self) -> Any:
        """The SessionOptions the session was made with."""
        return self._sess_options

    def get_profiling_start_time_ns(self) -> int:
        """When the session was made (ns since the epoch): where profiles start."""
        return self._start_ns

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        """Run on other providers from now on (the plan is compiled again; specialisations start over)."""
        chosen = _providers.resolve(providers, provider_options)
        plan = self._model.compile([p.device for p in chosen])
        if self._plan is not None:
            self._plan.release()
        self._providers, self._plan = chosen, plan

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
            ) -> list[Any]:
        """The outputs ``output_names`` (None or []: all) as NumPy arrays (lists for sequences), for the inputs
        in ``input_feed`` (NumPy arrays; Tensors and DLPack arrays of any library are taken without a copy)."""
        names = self._output_names(output_names)
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"input_feed must map input names to arrays, got {type(input_feed).__name__}")
        feeds, wrapped = self._feeds(input_feed)
        try:
            out = self._plan.run_numpy(feeds, profile=self._profiling)
        finally:
            _free_all(wrapped)
        return [out[n] for n in names]

    def io_binding(self) -> Any:
        """An IOBinding: inputs and outputs kept on their devices across runs (``run_with_iobinding``)."""
        from .iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        """Run with the inputs and outputs bound in ``iobinding`` (the outputs are complete when it returns)."""
        from .iobinding import IOBinding

        if not isinstance(iobinding, IOBinding) or iobinding.session is not self:
            raise InvalidArgument("run_with_iobinding: expected an IOBinding made by this session's io_binding()")
        iobinding._run()

    def end_profiling(self) -> str:
        """Write the last profiled run as a Chrome/Perfetto trace (``profile_file_prefix`` + time + .json) and
        return its path; "" when nothing was profiled (``SessionOptions.enable_profiling``)."""
        if not self._plan.last_profile:
            return ""
        prefix = getattr(self._sess_options, "profile_file_prefix", "onnxruntime_profile_")
        path = f"{prefix}{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        self._plan.trace(path)
        return path

    # -- what onnxruntime does not offer ---------------------------------------------------------------
    @property
    def plan(self) -> Any:
        """The DynamicPlan the session runs."""
        return self._plan

    def placement_report(self) -> str:
        """Where each node of the last run went and why, the specialisation cache and the host waits."""
        return self._plan.placement_report()

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Per device: arena peak, lower bound, no-reuse total and the constants (bytes)."""
        return self._plan.memory_report()

    @property
    def last_profile(self) -> list[dict[str, Any]] | None:
        """Per node of the last profiled run: device, host overhead, device time."""
        return self._plan.last_profile

    def trace(self, path: Any) -> Any:
        """Write the last profiled run as a Chrome/Perfetto trace JSON."""
        return self._plan.trace(path)

    def gantt(self, path: Any, title: str = "devicelayer run") -> Any:
        """Draw the last profiled run as a Gantt PNG, one row per device."""
        return self._plan.gantt(path, title)

    @property
    def profiling(self) -> bool:
        """True while every run is profiled (``SessionOptions.enable_profiling``, or set here)."""
        return self._profiling

    @profiling.setter
    def profiling(self, value: bool) -> None:
        self._sess_options.enable_profiling = bool(value)

    @property
    def _profiling(self) -> bool:
        return bool(getattr(self._sess_options, "enable_profiling", False))

    # -- helpers ------------------------------------------------------------------------------------
    def _output_names(self, output_names: Any) -> list[str]:
        every = [o.name for o in self._outputs]
        if output_names is None:
            return every
        if isinstance(output_names, (str, bytes)) or not isinstance(output_names, Sequence):
            raise InvalidArgument(f"output_names must be a list of output names or None, got {output_names!r}")
        if not output_names:
            return every
        unknown = [n for n in output_names if n not in every]
        if unknown:
            raise InvalidArgument(f"invalid output name(s) {unknown}; the model's outputs are {every}")
        return list(output_names)

    def _feeds(self, input_feed: Mapping[str, Any]) -> tuple[dict[str, Any], list[Tensor]]:
        """The feeds with DLPack arrays of other libraries wrapped as Tensors (and the wrappers, to free)."""
        from ..interop import from_dlpack

        feeds: dict[str, Any] = {}
        wrapped: list[Tensor] = []
        kinds = {spec.name: spec for spec in self._model.inputs}
        try:
            for name, x in input_feed.items():
                spec = kinds.get(name)
                if isinstance(x, (list, tuple)) and spec is not None and spec.kind == "tensor":
                    x = to_dtype(x, spec.dtype, f"input {name!r}")  # nested lists, as onnxruntime takes them
                elif not isinstance(x, (np.ndarray, np.generic, Tensor, list, tuple)) and hasattr(x, "__dlpack__"):
                    x = from_dlpack(x)
                    wrapped.append(x)
                feeds[name] = x
        except BaseException:
            _free_all(wrapped)
            raise
        return feeds, wrapped

    def __repr__(self) -> str:
        return (f"<InferenceSession {self._model.name}: inputs {[i.name for i in self._inputs]}, "
                f"providers {self.get_providers()}>")


def get_available_providers() -> list[str]:
    """onnxruntime provider names that have a device here, then every devicelayer device id."""
    return _providers.available_providers()


def get_all_providers() -> list[str]:
    """Every provider name a session accepts: onnxruntime's that devicelayer maps, and device ids."""
    return list(_providers.PROVIDER_MEMORY) + [d.id for d in _providers._every()]


def get_device() -> str:
    """"GPU" where a GPU device is present, else "CPU" (as onnxruntime reports its build)."""
    return "GPU" if any(d.info.device_type == "gpu" for d in _providers._every()) else "CPU"
