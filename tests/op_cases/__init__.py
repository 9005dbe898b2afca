"""Op test cases, one module per op family; tests/test_ops.py runs every case on every device."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Case:
    """One op call: inputs made by ``make(rng)`` (a list of arrays), attributes, tolerance.

    ``dtype`` is the element dtype under test (skips devices without it);
    ``exact`` compares bit for bit (integer and data-movement results).
    """

    op: str
    make: Callable[[np.random.Generator], list[np.ndarray]]
    attrs: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    dtype: str = "float32"
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False


def rand(*shape: int, dtype: str = "float32", low: float = -2.0, high: float = 2.0) -> Callable:
    """A maker for one random array (never zeros)."""
    def make(rng: np.random.Generator) -> np.ndarray:
        if np.dtype(dtype).kind in "iu":
            return rng.integers(int(low), int(high), shape).astype(dtype)
        return rng.uniform(low, high, shape).astype(dtype)
    return make


def inputs(*makers: Callable) -> Callable[[np.random.Generator], list[np.ndarray]]:
    """Combine per-array makers into a case's ``make``."""
    return lambda rng: [m(rng) for m in makers]


def all_cases() -> list[Case]:
    """Every case of every family module in this package (each defines ``CASES``), and each float16 case again
    in bfloat16 where the op takes it."""
    cases: list[Case] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cases.extend(getattr(module, "CASES", []))
    return cases + [twin for c in cases if c.dtype == "float16" for twin in _bfloat16_twin(c)]


def _bfloat16_twin(case: Case) -> list[Case]:
    """``case`` with its float16 arrays in bfloat16 (none when the op refuses bfloat16)."""
    from devicelayer.dtypes import dtype as as_dtype
    from devicelayer.kernels.op import OPS, TensorType
    from devicelayer.ops import names  # noqa: F401  (registers the library)

    bf16 = as_dtype("bfloat16")

    def make(rng: np.random.Generator) -> list[np.ndarray]:
        return [a.astype(bf16) if a.dtype == np.float16 else a for a in case.make(rng)]

    try:
        arrays = make(np.random.default_rng(0))
        OPS[case.op].prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(case.attrs))
    except Exception:  # noqa: BLE001 - an op that refuses bfloat16 has no twin
        return []
    return [dataclasses.replace(case, make=make, id=f"{case.id}-bf16", dtype="bfloat16")]


def reference64(name: str, arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """Op ``name``'s NumPy reference on ``arrays`` with floats widened to float64 (the test oracle)."""
    from devicelayer.kernels.op import OPS, TensorType

    from devicelayer.dtypes import is_float

    op = OPS[name]
    wide = [a.astype(np.float64) if is_float(a.dtype) else a for a in arrays]
    wattrs, _ = op.prepare([TensorType(a.shape, a.dtype) for a in wide], dict(attrs))
    return op.reference(wide, wattrs)


def graph_reference64(g: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A graph's outputs computed node by node in float64 (the test oracle of whole plans)."""
    from devicelayer.kernels.op import OPS, TensorType

    vals = {id(v): feeds[v.name].astype(np.float64) for v in g.inputs}
    for n in g.order():
        ins = [vals[id(v)] if v.constant is None else v.constant.astype(np.float64) for v in n.inputs]
        checked, _ = OPS[n.op].prepare([TensorType(a.shape, a.dtype) for a in ins], dict(n.attrs))
        for v, out in zip(n.outputs, OPS[n.op].reference(ins, checked)):
            vals[id(v)] = out
    return {name: vals[id(v)] for name, v in g.outputs.items()}


def run_and_reference(device: Any, name: str, arrays: list[np.ndarray], attrs: dict[str, Any]) -> Any:
    """Op ``name`` run on ``device`` and its float64 reference: (results, references, output types), or None
    where the device does not take the combination."""
    from devicelayer.kernels.op import OPS, TensorType
    from devicelayer.kernels.runner import run
    from devicelayer.tensors import tensor

    op = OPS[name]
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(types, dict(attrs))
    if op.unsupported(types, checked, device.info) is not None:
        return None
    ins = [tensor(a, device).reshape(a.shape) for a in arrays]  # reshape: tensor() makes 0-d arrays 1-d
    got = [t.numpy() for t in run(name, ins, **attrs)]
    return got, reference64(name, arrays, attrs), outs
