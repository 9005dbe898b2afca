"""An ``onnx.backend.base.Backend`` running models on a devicelayer device.

ONNX names devices "CPU" and "CUDA[:n]"; here "CPU" is the device named by
``DEVICELAYER_ONNX_DEVICE`` (default "host"), "CUDA:n" is ``cuda:n``, and any
devicelayer id ("opencl:0", "vulkan:0") is taken as is.  ``backend_for(id)``
gives a Backend class whose "CPU" is that device, which is how the test suite
runs ONNX's BackendTest once per device.

``prepare(model, device, fallback=True)`` lets ops the device cannot run go to
the host (each placement is visible in ``rep.plan().placement_report()``);
by default nothing falls back.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from ..errors import DeviceLayerError, InvalidArgument
from .loader import read_model
from .model import OnnxModel

try:
    from onnx.backend.base import Backend, BackendRep, namedtupledict
except ImportError:  # pragma: no cover
    raise ImportError("devicelayer.onnx.backend needs the 'onnx' package") from None


def resolve_device(device: str, default: str | None = None) -> str:
    """The devicelayer id for an ONNX device string."""
    if not isinstance(device, str) or not device:
        raise InvalidArgument(f"device must be a string, got {device!r}")
    upper = device.upper()
    if upper == "CPU":
        return default or os.environ.get("DEVICELAYER_ONNX_DEVICE", "host")
    if upper.startswith("CUDA"):
        _, _, index = device.partition(":")
        return f"cuda:{index or 0}"
    return device


class DevicelayerRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs in the model's order (a plan specialised per
    signature of input shapes, see ``devicelayer.onnx.load``)."""

    def __init__(self, model: Any, device_id: str, fallback: bool = False) -> None:
        self.model = model
        self.device_id = device_id
        self.devices = [device_id] + (["host"] if fallback and device_id != "host" else [])
        self.onnx_model = OnnxModel(model)
        self.input_names = [spec.name for spec in self.onnx_model.inputs]
        self.output_names = list(self.onnx_model.output_names)
        self._plan: Any = None

    def plan(self) -> Any:
        """The model's plan (a ``DynamicPlan``) on this device, compiled once."""
        if self._plan is None:
            self._plan = self.onnx_model.compile(self.devices)
        return self._plan

    def run(self, inputs: Any, **kwargs: Any) -> Any:
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise InvalidArgument(f"{len(inputs)} inputs given; the model takes {len(self.input_names)} "
                                      f"({self.input_names})")
            feeds = dict(zip(self.input_names, inputs))
        feeds = {k: v if isinstance(v, (list, tuple)) or v is None else np.asarray(v) for k, v in feeds.items()}
        out = self.plan().run_numpy(feeds)
        return namedtupledict("Outputs", self.output_names)(*[out[n] for n in self.output_names])


class DevicelayerBackend(Backend):
    """ONNX Backend over devicelayer devices."""

    #: the device "CPU" maps to in a class made by backend_for (None: DEVICELAYER_ONNX_DEVICE)
    device_id: str | None = None

    @classmethod
    def _resolve(cls, device: str) -> str:
        if cls.device_id is not None:
            if device.upper() != "CPU" and device != cls.device_id:
                raise InvalidArgument(f"this backend runs on {cls.device_id} only (as 'CPU'), not {device!r}")
            return cls.device_id
        return resolve_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        from ..registry import device as find

        try:
            find(cls._resolve(device))
        except DeviceLayerError:
            return False
        return True

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", fallback: bool = False, **kwargs: Any) -> DevicelayerRep:
        model = read_model(model)
        from ..registry import device as find

        dev_id = find(cls._resolve(device)).id
        return DevicelayerRep(model, dev_id, fallback)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> Any:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None,
                 **kwargs: Any) -> Any:
        """Run one NodeProto on ``inputs`` (a list in the node's input order, or a dict)."""
        import onnx
        from onnx import helper

        names = [n for n in node.input if n]
        if isinstance(inputs, Mapping):
            arrays = [np.asarray(inputs[n]) for n in names]
        else:
            arrays = [np.asarray(x) for x in inputs]
        value_infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                       for n, a in zip(names, arrays)]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        for o, info in zip(outs, outputs_info or []):
            o.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(info[0]))
            o.type.tensor_type.shape.SetInParent()
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], "node", value_infos, outs),
                                  opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
        model = onnx.shape_inference.infer_shapes(model)  # types the outputs
        return cls.run_model(model, dict(zip(names, arrays)), device)


def backend_for(device_id: str) -> type[DevicelayerBackend]:
    """A Backend class whose "CPU" is the devicelayer device ``device_id``."""
    safe = device_id.replace(":", "_")
    return type(f"DevicelayerBackend_{safe}", (DevicelayerBackend,), {"device_id": device_id})


prepare = DevicelayerBackend.prepare
run_model = DevicelayerBackend.run_model
run_node = DevicelayerBackend.run_node
supports_device = DevicelayerBackend.supports_device
