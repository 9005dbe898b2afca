"""Epilogues: a chain of pointwise ops applied to each output element of an op before it is stored.

An op that takes one (matmul, gemm) has the attributes ``epilogue``, the chain's steps in ``fused_elementwise``'s
form (``(op, attrs, operands)``; operand 0 is the op's own result, operands 1 to ``epilogue_inputs`` the extra
inputs appended after the op's own, higher ones earlier steps), and ``epilogue_inputs``.  The last step's result
is the op's output: it keeps the op's shape and dtype, and the extra inputs broadcast to it as a suffix of its
shape (a bias of the last dimension, a scalar, a tensor of the output's shape), so a kernel reads extra input j
at ``flat index % size``.

The NumPy forms apply the chain with ``fused_elementwise`` (in place, in blocks); kernels splice the lines
``code`` composes (``fused.compose``: the members' own dialect statements) before their store.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import DeviceLayerError
from ...info import DeviceInfo
from ..dialect import Param, dialect_type
from ..op import Op, TensorType, get
from .fused import HOST_BLOCK, MAX_BUFFERS, MAX_SCALAR_BYTES, compose

#: extra inputs an epilogue takes
MAX_EPILOGUE_INPUTS = 8


@dataclass(frozen=True)
class Epilogue:
    """An epilogue as a kernel takes it: dialect ``text`` storing the chain's value of ``dl_x0`` (the op's value,
    of its element type) to ``y[dl_at]``, the extra buffers' and scalars' parameters, and the scalars' values."""

    text: str
    buffers: tuple[Param, ...]
    scalars: tuple[Param, ...]
    values: tuple[Any, ...]
    digest: str


def split(op: Op, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[list[TensorType], list[TensorType]]:
    """(the op's own inputs, the epilogue's extra inputs) of a call; InvalidArgument for a bad count."""
    n = attrs.get("epilogue_inputs", 0)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 0 <= n <= min(MAX_EPILOGUE_INPUTS,
                                                                                        len(inputs)):
        raise op.error(f"'epilogue_inputs' must count at most {MAX_EPILOGUE_INPUTS} of the inputs, got {n!r}")
    n = int(n)
    return list(inputs[:len(inputs) - n]), list(inputs[len(inputs) - n:])


def check(op: Op, product: TensorType, extras: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
    """The checked epilogue attributes (``{}`` where there is none) of an op whose own result is ``product``."""
    steps = attrs.get("epilogue") or ()
    if not steps:
        if extras:
            raise op.error(f"{len(extras)} epilogue input(s) but no epilogue")
        return {}
    fused = get("fused_elementwise")
    try:
        checked, out = fused.prepare([product, *extras], {"steps": tuple(steps), "outputs": (len(steps) - 1,)})
    except DeviceLayerError as exc:
        raise op.error(f"epilogue: {exc}") from None
    if out[0] != product:
        raise op.error(f"epilogue: its result {out[0].shape} {out[0].dtype} is not the op's {product.shape} "
                       f"{product.dtype}")
    for j, t in enumerate(extras):
        shape = tuple(t.shape)
        while shape and shape[0] == 1:
            shape = shape[1:]
        if shape and tuple(product.shape[len(product.shape) - len(shape):]) != shape:
            raise op.error(f"epilogue input {j} of shape {t.shape} is not a suffix of the output's "
                           f"{product.shape}")
    return {"epilogue": checked["steps"], "epilogue_inputs": len(extras)}


def _chain(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"steps": attrs["epilogue"], "outputs": (len(attrs["epilogue"]) - 1,)}


def apply(y: np.ndarray, extras: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """``y`` (writable) with the epilogue applied in place (returned)."""
    if not attrs.get("epilogue"):
        return y
    fused = get("fused_elementwise")
    if y.flags.c_contiguous:
        # (the last step writes y: where it reads y too, from a copy, since an op may write its output in passes)
        src = y.copy() if 0 in attrs["epilogue"][-1][2] else y
        fused.reference_into([src, *extras], [y], _chain(attrs))
    else:
        y[...] = fused.reference([y, *extras], _chain(attrs))[0]
    return y


def bind(y: np.ndarray, extras: Sequence[np.ndarray], attrs: dict[str, Any]) -> Callable[[], None] | None:
    """``apply`` on these arrays as a call made once (a recorded host launch); None without an epilogue.  A
    product of one host block or less runs the chain's steps bound (``fused_elementwise.bind_into``)."""
    if not attrs.get("epilogue"):
        return None
    fused = get("fused_elementwise")
    if not y.flags.c_contiguous or y.size > HOST_BLOCK:
        return functools.partial(apply, y, extras, attrs)
    last, _, operands = attrs["epilogue"][-1]
    if 0 in operands and not (get(last).in_place and operands[0] == 0):
        # the last step reads y as it writes it, other than as input 0 of an op that may: from a copy, as ``apply``
        src = np.empty_like(y)
        copy, chain = functools.partial(np.copyto, src, y), fused.bind_into([src, *extras], [y], _chain(attrs))

        def copied() -> None:
            copy()
            chain()
        return copied
    return fused.bind_into([y, *extras], [y], _chain(attrs))


def apply_reference(y: np.ndarray, extras: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """``y`` with the epilogue applied by the members' reference forms (a new array)."""
    if not attrs.get("epilogue"):
        return y
    return get("fused_elementwise").reference([y, *extras], _chain(attrs))[0]


#: verdicts of ``unsupported`` by call (placement, fusion and planning ask it of every conv or product several
#: times a compile, and composing the epilogue's code is most of a call's cost); cleared when full
_verdicts: dict[Any, str | None] = {}
_VERDICTS_KEPT = 4096


def _frozen(x: Any) -> Any:
    """``x`` (step attributes: numbers, strings, arrays and containers of them) as a hashable value that tells
    unequal values apart; TypeError for anything else."""
    if isinstance(x, dict):
        return ("dict", tuple(sorted((k, _frozen(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_frozen(v) for v in x))
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, np.generic):
        return ("scalar", x.dtype.str, x.tobytes())
    if x is None or isinstance(x, (bool, int, float, str)):
        return (type(x).__name__, x)
    raise TypeError(f"no frozen form for {type(x).__name__}")


def unsupported(product: TensorType, extras: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo,
                buffers: int, scalar_bytes: int) -> str | None:
    """Why the epilogue cannot run in the op's kernel on the device (None where it can); ``buffers`` and
    ``scalar_bytes`` count the op's own buffers and scalar arguments."""
    if not attrs.get("epilogue"):
        return None
    try:
        key = (product, tuple(extras), _frozen(attrs["epilogue"]), info.id, info.backend, info.name,
               info.driver_version, buffers, scalar_bytes)
    except TypeError:
        return _unsupported(product, extras, attrs, info, buffers, scalar_bytes)
    try:
        return _verdicts[key]
    except KeyError:
        pass
    why = _unsupported(product, extras, attrs, info, buffers, scalar_bytes)
    if len(_verdicts) >= _VERDICTS_KEPT:
        _verdicts.clear()
    _verdicts[key] = why
    return why


def _unsupported(product: TensorType, extras: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo,
                 buffers: int, scalar_bytes: int) -> str | None:
    why = get("fused_elementwise").unsupported([product, *extras], _chain(attrs), info)
    if why is not None:
        return f"epilogue: {why}"
    if info.kernel_language == "python":
        return None
    if buffers + len(extras) > MAX_BUFFERS:
        return f"epilogue: {buffers + len(extras)} buffers; a kernel takes {MAX_BUFFERS}"
    made = code(product, extras, attrs)
    extra = sum(8 if p.type == "f64" else 4 for p in made.scalars) if made is not None else 0
    if scalar_bytes + extra > MAX_SCALAR_BYTES:
        return f"epilogue: the scalars take {scalar_bytes + extra} bytes; every device takes {MAX_SCALAR_BYTES}"
    return None


def code(product: TensorType, extras: Sequence[TensorType], attrs: dict[str, Any]) -> Epilogue | None:
    """The epilogue as a kernel takes it (see ``Epilogue``); None where there is none."""
    steps = attrs.get("epilogue")
    if not steps:
        return None
    types = get("fused_elementwise").step_types([product, *extras], steps)
    lines = []
    buffers = []
    for j, t in enumerate(extras, start=1):
        buffers.append(Param(f"dl_e{j}", dialect_type(t.dtype), "in"))
        at = "0" if t.size == 1 else "dl_at" if t.size == product.size else f"dl_at % {t.size}"
        lines.append(f"        {dialect_type(t.dtype)} dl_x{j} = dl_e{j}[{at}];\n")
    body, scalars = compose([product, *extras], steps, types)
    lines += body
    lines.append(f"        y[dl_at] = dl_v{len(steps) - 1};\n")
    text = "".join(lines)
    params = tuple(p for p, _ in scalars)
    digest = hashlib.sha1((text + repr(buffers) + repr(params)).encode()).hexdigest()[:12]
    return Epilogue(text, tuple(buffers), params, tuple(v for _, v in scalars), digest)


__all__ = ["Epilogue", "MAX_EPILOGUE_INPUTS", "split", "check", "apply", "apply_reference", "unsupported", "code"]
