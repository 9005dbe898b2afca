"""devicelayer: one interface to every compute device on a machine."""

from __future__ import annotations


def _source_tree_packages() -> None:
    """Run from a source checkout: map ``backends/`` and ``shaders/`` to their installed package names."""
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for sub in ("backends", "shaders"):
        name = f"{__name__}.{sub}"
        init = here.parent / sub / "__init__.py"
        if name in sys.modules or (here / sub).exists() or not init.is_file():
            continue
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


_source_tree_packages()

from .device import Device, Program  # noqa: E402
from .dlpack import DLDeviceType  # noqa: E402
from .errors import (  # noqa: E402
    BackendUnavailable, CompileError, CopyWarning, DeviceLayerError, DeviceNotFound, DLPackError, EventError,
    EventTimeout, GraphError, InvalidArgument, LaunchError, NodeError, OutOfMemory, UnsupportedOp)
from .events import CompletedEvent, Event, UserEvent, when_all  # noqa: E402
from .info import DeviceInfo  # noqa: E402
from .memory import Buffer, MemoryPool  # noqa: E402
from .registry import Backend, Unavailable, device, devices, reset, unavailable  # noqa: E402
from .signature import Arg, parse_signature  # noqa: E402
from .tensors import Tensor, empty, tensor  # noqa: E402
from .interop import from_dlpack  # noqa: E402
from .transfer import transfer  # noqa: E402



def __getattr__(name: str):
    if name in ("Graph", "ExecutionPlan"):
        from . import graph
        return getattr(graph, name)
    if name == "ops":
        import importlib
        return importlib.import_module(".ops", __name__)
    raise AttributeError(f"module 'devicelayer' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Arg", "Backend", "BackendUnavailable", "Buffer", "CompileError", "CompletedEvent", "Device",
    "DeviceInfo", "DeviceLayerError", "DeviceNotFound", "Event", "EventError", "EventTimeout",
    "GraphError", "InvalidArgument", "LaunchError", "MemoryPool", "NodeError", "OutOfMemory", "Program",
    "Unavailable", "UnsupportedOp", "UserEvent", "device", "devices", "parse_signature", "reset",
    "transfer", "unavailable", "when_all", "Graph", "ExecutionPlan", "ops", "Tensor", "tensor", "empty",
    "from_dlpack", "DLDeviceType", "DLPackError", "CopyWarning",
]
