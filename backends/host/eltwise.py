"""Float32 activations and elementwise functions on the host through oneDNN's eltwise primitive.

NumPy computes ``exp``, ``tanh`` and their kin one element at a time here
(about 1.4 ns an element for float32 ``exp`` on the 2-core VM, where oneDNN's
JIT kernels take a tenth of that), and composes sigmoid, SiLU or GELU from
several passes.  So a float32 tensor of at least ``min_elements(op)`` elements
runs oneDNN's primitive for the op (one per op, size and parameters, kept in
``HostDevice.onednn_layers``) on the OpenMP team the convolutions use; smaller
ones, and other dtypes, run NumPy, which costs less per call.  Element order
does not matter, so the tensor's layout does not either.  (Softplus and mish
stay on NumPy: oneDNN's lose relative precision for negative inputs.)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp, runner as host_runner
from .backend import HostVendor
from .dnnl_layers import EltwiseLayer
from .dnnl_op import SMALL_BYTES
from .stretch import team_call

#: tensors with fewer elements run NumPy (where its SIMD loop is one pass, a bound oneDNN call costs more) ...
MIN_ELEMENTS = 4096
#: ... except where NumPy composes the function from several passes or a ``where`` (GELU's erf is a rational
#: form of a dozen), or sigmoid's passes: there a bound oneDNN call (2.6-3.4 us on the VM at 16-1024 elements)
#: beats NumPy from a few elements (at 16-1024 elements NumPy took: GELU 65-170 us, ELU 35-45, leaky ReLU and hard
#: sigmoid 15-24, hard swish 6-8, sigmoid 4.5-6); and NumPy's own SIMD tanh and exp stay ahead of a oneDNN call
#: on the calling thread up to these sizes (on the VM: tanh 17 against 21 us at 32768 elements, exp 6.1 against
#: 6.6 at 8192 and 22 against 19 at 32768).
MIN_ELEMENTS_OF = {"gelu": 16, "gelu_tanh": 16, "swish": 16, "elu": 16, "leaky_relu": 16, "hard_sigmoid": 16,
                   "hard_swish": 16, "sigmoid": 16, "tanh": 32768, "exp": 16384}


def min_elements(name: str) -> int:
    """The fewest float32 elements op ``name`` runs through oneDNN."""
    return MIN_ELEMENTS_OF.get(name, MIN_ELEMENTS)

# oneDNN 3.x algorithm kinds (dnnl_alg_kind_t)
_RELU, _TANH, _ELU, _HARDSIGMOID, _LOGISTIC, _EXP = 0x20, 0x21, 0x22, 0x28, 0x29, 0x2A
_GELU_TANH, _SWISH, _GELU_ERF, _HARDSWISH = 0x2B, 0x2C, 0x31, 0x34
#: dnnl_eltwise_linear, alpha x + beta (no op of its own: a product's scale as a post-op)
LINEAR = 0x26

#: op name -> (algorithm, alpha and beta from the op's checked attributes)
ALGORITHMS: dict[str, tuple[int, Callable[[dict], tuple[float, float]]]] = {
    "relu": (_RELU, lambda a: (0.0, 0.0)),
    "leaky_relu": (_RELU, lambda a: (a["alpha"], 0.0)),
    "elu": (_ELU, lambda a: (a["alpha"], 0.0)),
    "sigmoid": (_LOGISTIC, lambda a: (0.0, 0.0)),
    "hard_sigmoid": (_HARDSIGMOID, lambda a: (a["alpha"], a["beta"])),
    "hard_swish": (_HARDSWISH, lambda a: (1.0 / 6.0, 0.5)),
    "swish": (_SWISH, lambda a: (a["alpha"], 0.0)),
    "tanh": (_TANH, lambda a: (0.0, 0.0)),
    "gelu": (_GELU_ERF, lambda a: (0.0, 0.0)),
    "gelu_tanh": (_GELU_TANH, lambda a: (0.0, 0.0)),
    "exp": (_EXP, lambda a: (0.0, 0.0)),
}


#: the ops of ``ALGORITHMS`` that run oneDNN's eltwise as calls of their own (a convolution applies any of them):
#: not ReLU, whose oneDNN form makes a NaN 0 and, with the input checked for one first, took as long as NumPy's
#: own (a plan's ReLU of 16384 elements 50 us either way, of 262144 522 against 370 us, of 2097152 2.5 ms either way)
STANDALONE = frozenset(ALGORITHMS) - {"relu"}
#: ops whose oneDNN form gives a NaN or an infinity another value than NumPy and onnxruntime do, and what in the
#: input sends a call to NumPy's form instead, checked by one reduction before the call (in place, the input is
#: gone after it): hard sigmoid and exp make a NaN 1 and an infinity ("nan"); erf-GELU makes +infinity NaN, and
#: softmax keeps a row's other entries where one is NaN or +infinity, which make the whole row NaN ("nan or inf")
NUMPY_AT = {"hard_sigmoid": "nan", "exp": "nan", "gelu": "nan or inf", "softmax": "nan or inf",
            "log_softmax": "nan or inf"}


def guarded(name: str, call: Callable[[], object], x: np.ndarray,
            numpy_call: Callable[[], object]) -> Callable[[], object]:
    """``call``, or ``numpy_call`` where the float32 input ``x`` holds what oneDNN's form of op ``name`` gives
    another value (``NUMPY_AT``)."""
    at = NUMPY_AT.get(name)
    if at is None:
        return call
    if at == "nan":
        def checked() -> None:
            m = x.min()
            (call if m == m else numpy_call)()
    else:
        def checked() -> None:
            (call if x.max() < np.inf else numpy_call)()
    return host_runner.guard(checked, call, x, at != "nan", numpy_call)  # (the runner checks in C)


class OnednnEltwise(HostVendor):
    """One op of ``ALGORITHMS`` through oneDNN for float32 tensors of ``min_elements(op)`` or more."""

    def __init__(self, dev: Any, name: str) -> None:
        super().__init__(dev, name, f"oneDNN {host_dnnl.version()}")
        self.alg, self._params = ALGORITHMS[name]
        self.min_elements = min_elements(name)

    def route(self, ins: Any, attrs: dict) -> EltwiseLayer | None:
        """The layer running these inputs (built once per size and parameters), None where NumPy runs them."""
        x = ins[0]
        if x.dtype not in host_dnnl.DTYPES or x.size < self.min_elements:
            return None
        alpha, beta = self._params(attrs)
        key = ("eltwise", (self.alg, x.size, alpha, beta), ())
        return cached_layer(self.dev, key, lambda: EltwiseLayer(x.size, self.alg, alpha, beta), x.size)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32 tensors of ``min_elements(op)`` or more that oneDNN builds a primitive for."""
        return self.route(ins, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (NumPy where the two overlap in part)."""
        pool = self.dev.pool
        x, y = pool._bytes(in_bufs[0]), pool._bytes(out_bufs[0])
        n = ins[0].size * ins[0].dtype.itemsize
        layer = self.route(ins, attrs)
        dt = ins[0].dtype
        numpy_call = reference_call(self.name, [x[:n].view(dt)], y[:n].view(dt), attrs)
        if layer is None or (np.may_share_memory(x[:n], y[:n]) and x.ctypes.data != y.ctypes.data):
            return numpy_call  # (computed apart: an eager out= over part of its input, or NumPy's dtypes)
        return layer_call(layer, x, y, ins[0].size, (self.name, x[:n].view(np.float32), numpy_call))


def reference_call(name: str, xs: list[np.ndarray], y: np.ndarray, attrs: dict) -> Callable[[], None]:
    """Op ``name``'s NumPy reference from ``xs`` into ``y`` as a call: where oneDNN does not run a layer, or its
    output overlaps an input."""
    from devicelayer.kernels.op import get

    op = get(name)

    def apart() -> None:
        y[...] = op.reference(xs, attrs)[0]
    return team_call(apart, False)


def apart_or_layer(vendor: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
    """A one-input route's call on these buffers: ``vendor.route(ins, attrs)``'s layer, or the op's NumPy reference
    where there is none or the output overlaps the input (the layer does not run in place)."""
    pool = vendor.dev.pool
    t, u = ins[0], outs[0]
    n = t.size * t.dtype.itemsize
    x, y = pool._bytes(in_bufs[0])[:n], pool._bytes(out_bufs[0])[:n]
    layer = vendor.route(ins, attrs)
    numpy_call = reference_call(vendor.name, [x.view(t.dtype).reshape(t.shape)], y.view(u.dtype).reshape(u.shape),
                                attrs)
    if layer is None or (x.ctypes.data < y.ctypes.data + n and y.ctypes.data < x.ctypes.data + n):
        return numpy_call
    return layer_call(layer, x, y, t.size, (vendor.name, x.view(t.dtype), numpy_call))


def cached_layer(dev: Any, key: tuple, build: Callable[[], Any], elements: int) -> Any:
    """The device's oneDNN layer under ``key``, built once (on the calling thread alone where ``elements`` float32
    elements are small); None, remembered with oneDNN's reason, where oneDNN cannot build it."""
    found = dev.onednn_layers.get(key)
    if found is None:
        try:
            found = {"layer": host_omp.alone(host_dnnl.library(), build)() if is_small(elements) else build()}
        except host_dnnl.DnnlError as exc:
            found = {"layer": None, "why": str(exc)}
        dev.onednn_layers[key] = found
    return found["layer"]


def is_small(n: int) -> bool:
    """Whether ``n`` float32 elements in and out run on the calling thread alone (``dnnl_op.SMALL_BYTES``)."""
    return n * 8 < SMALL_BYTES


def layer_call(layer: Any, x: np.ndarray, y: np.ndarray, elements: int,
               guard: tuple[str, np.ndarray, Callable[[], object]] | None = None) -> Callable[[], None]:
    """The call running a one-input oneDNN ``layer`` from ``x`` into ``y`` (``elements`` float32 in and out):
    on the calling thread alone when small (``dnnl_op.SMALL_BYTES``), else on the OpenMP team.  ``guard``: (op
    name, its float32 input, its NumPy call) for ``guarded``."""
    px, py = x.ctypes.data, y.ctypes.data
    call = layer.bind(px, py, keep=(x, y))
    if guard is not None:
        call = guarded(guard[0], call, guard[1], guard[2])
    small = is_small(elements)
    return team_call(host_omp.alone(host_dnnl.library(), call) if small else call, not small)

