"""What a device lacks for an op call whose tensors are of several dtypes (quantized, index and float tensors
side by side): shared by the ops whose inputs and outputs do not all share one element type."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...info import DeviceInfo
from ..dialect import FROM_DTYPE
from ..op import Op, TensorType
from ..render import BFLOAT16_LANGUAGES, lacks


def device_gap(op: Op, tensors: Sequence[TensorType], info: DeviceInfo, compute: np.dtype | None = None,
               code: str = "") -> str | None:
    """Why ``op`` cannot run on a device like ``info`` with these tensors (inputs and outputs): a dtype the
    device does not store, one the kernel dialect has no type for, a ``compute`` dtype the device lacks, or
    math in ``code`` the kernel language has no form of for it; None when it can."""
    names = [t.dtype.name for t in tensors] + ([np.dtype(compute).name] if compute is not None else [])
    for name in names:
        if name not in info.dtypes:
            return f"{info.id} has no {name}"
    if info.kernel_language == "python":
        return None
    for name in names:
        if name not in FROM_DTYPE or (name == "bfloat16" and info.kernel_language not in BFLOAT16_LANGUAGES):
            return f"{op.name} has no {info.kernel_language} kernel for {name}"
    if code and compute is not None:
        why = lacks(code, info.kernel_language, FROM_DTYPE[np.dtype(compute).name])
        if why:
            return f"{op.name}: {why}"
    return None


__all__ = ["device_gap"]
