"""The Vulkan backend (the ``vulkan`` package): ``backend`` is the backend itself; ``memory`` sub-allocates
device memory, ``spirv`` compiles GLSL to SPIR-V and caches it.
"""

from typing import Any

__all__ = ["VulkanBackend"]


def __getattr__(name: str) -> Any:
    """``VulkanBackend`` on first use, so that importing one of the modules beside it does not start the backend."""
    if name == "VulkanBackend":
        from .backend import VulkanBackend

        return VulkanBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
