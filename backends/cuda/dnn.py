"""cuDNN convolutions for the CUDA backend, callable on any stream, stream capture included.

CuPy 14 has no cuDNN bindings, so this calls cuDNN's C API through ctypes: one
handle per device (used under a lock, its stream set on every call), tensor,
filter and convolution descriptors made once per layer geometry, the algorithm
from cuDNN's timed search when a layer is tuned, from an earlier process's search
(the disk cache) or, on first use otherwise, from cuDNN's heuristics,
and ``cudnnConvolutionBiasActivationForward`` where bias and ReLU fuse into
the convolution (elsewhere the caller applies them in one pass of its own).
float32 runs without TF32 (``CUDNN_FMA_MATH``): IEEE products, as the op
library computes, unless the plan allows TF32 (``compile(..., allow_tf32=True)``);
float16 and bfloat16 on tensor cores, accumulating in float32.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from typing import Any, Sequence

import numpy as np

from .blas import BFLOAT16, HALVES

_DATA = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2,  # cudnnDataType_t
         **({BFLOAT16: 9} if BFLOAT16 is not None else {})}
DTYPES = frozenset(_DATA)
_NCHW, _NHWC = 0, 1  # cudnnTensorFormat_t (filters)
_CROSS_CORRELATION = 1
_DEFAULT_MATH, _TENSOR_OP_MATH, _FMA_MATH = 0, 1, 3
_RELU = 1
_PROPAGATE_NAN = 1  # ReLU keeps NaN, as NumPy's maximum does
_ALGOS = 8  # CUDNN_CONVOLUTION_FWD_ALGO_COUNT
WORKSPACE_LIMIT = 256 << 20  # the most scratch one convolution's algorithm may take
ELEMENT_LIMIT = 2**31 - 1  # cuDNN's legacy API indexes each tensor with 32 bits


class _AlgoPerf(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("mathType", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


def _candidates() -> list[str]:
    """Where libcudnn may be: $DEVICELAYER_CUDNN, this process's mappings, the nvidia-cudnn wheel, the loader."""
    paths = []
    env = os.environ.get("DEVICELAYER_CUDNN", "")
    if env:
        paths.append(env)
    try:
        with open("/proc/self/maps") as f:
            paths += sorted({line.split()[-1] for line in f if line.rstrip().endswith(("/libcudnn.so.9",
                                                                                     "/libcudnn.so.8"))})
    except OSError:
        pass
    for root in sys.path:
        paths += sorted(glob.glob(os.path.join(root or ".", "nvidia", "cudnn", "lib", "libcudnn.so.*")))
    paths += [ctypes.util.find_library("cudnn") or "", "libcudnn.so.9", "libcudnn.so.8"]
    return [p for p in paths if p]


def _library() -> ctypes.CDLL | None:
    if os.environ.get("DEVICELAYER_CUDNN", "") in ("0", "off", "none"):
        return None
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cudnnConvolutionBiasActivationForward  # noqa: B018  (present?)
            lib.cudnnGetConvolutionForwardAlgorithm_v7  # noqa: B018
        except (OSError, AttributeError):
            continue
        _declare(lib)
        return lib
    return None


def _declare(lib: ctypes.CDLL) -> None:
    """Argument types of the entry points used (pointers stay pointer-sized)."""
    p, i, ip = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    sigs = {
        "cudnnCreate": [ctypes.POINTER(p)], "cudnnDestroy": [p], "cudnnSetStream": [p, p],
        "cudnnGetVersion": [], "cudnnGetErrorString": [i],
        "cudnnCreateTensorDescriptor": [ctypes.POINTER(p)], "cudnnDestroyTensorDescriptor": [p],
        "cudnnSetTensorNdDescriptor": [p, i, i, ip, ip],
        "cudnnCreateFilterDescriptor": [ctypes.POINTER(p)], "cudnnDestroyFilterDescriptor": [p],
        "cudnnSetFilterNdDescriptor": [p, i, i, i, ip],
        "cudnnCreateConvolutionDescriptor": [ctypes.POINTER(p)], "cudnnDestroyConvolutionDescriptor": [p],
        "cudnnSetConvolutionNdDescriptor": [p, i, ip, ip, ip, i, i],
        "cudnnSetConvolutionGroupCount": [p, i], "cudnnSetConvolutionMathType": [p, i],
        "cudnnCreateActivationDescriptor": [ctypes.POINTER(p)], "cudnnDestroyActivationDescriptor": [p],
        "cudnnSetActivationDescriptor": [p, i, i, ctypes.c_double],
        "cudnnGetConvolutionForwardAlgorithm_v7": [p, p, p, p, p, i, ip, ctypes.POINTER(_AlgoPerf)],
        "cudnnGetConvolutionForwardWorkspaceSize": [p, p, p, p, p, i, ctypes.POINTER(ctypes.c_size_t)],
        "cudnnFindConvolutionForwardAlgorithmEx": [p, p, p, p, p, p, p, p, i, ip, ctypes.POINTER(_AlgoPerf), p,
                                                   ctypes.c_size_t],
        "cudnnConvolutionForward": [p, p, p, p, p, p, p, i, p, ctypes.c_size_t, p, p, p],
        "cudnnConvolutionBiasActivationForward": [p, p, p, p, p, p, p, i, p, ctypes.c_size_t, p, p, p, p, p, p,
                                                  p, p],
        "cudnnCreatePoolingDescriptor": [ctypes.POINTER(p)], "cudnnDestroyPoolingDescriptor": [p],
        "cudnnSetPoolingNdDescriptor": [p, i, i, i, ip, ip, ip],
        "cudnnPoolingForward": [p, p, p, p, p, p, p, p],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:  # (pooling lives in cuDNN's ops library: a build without it has no pooling layers)
            continue
        fn.argtypes = args
        fn.restype = ctypes.c_char_p if name == "cudnnGetErrorString" else (
            ctypes.c_size_t if name == "cudnnGetVersion" else ctypes.c_int)


class DnnError(RuntimeError):
    """A cuDNN call failed (the message names the call and cuDNN's status)."""


def _ints(values: Sequence[int]) -> Any:
    return (ctypes.c_int * len(values))(*values)


def _strides(shape: Sequence[int], channels_last: bool) -> list[int]:
    """Element strides of a dense (N, C, spatial...) tensor stored in that order or as (N, spatial..., C)."""
    order = [0, *range(2, len(shape)), 1] if channels_last else list(range(len(shape)))
    strides = [0] * len(shape)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= shape[axis]
    return strides


class _Layer:
    """Descriptors and the chosen algorithm of one convolution geometry."""

    def __init__(self, dnn: "Dnn", key: tuple) -> None:
        dtype, x, w, y, pads, strides, dilations, group, bias, relu, summand, (x_last, w_last, y_last), tf32 = key
        self.dnn = dnn
        self.lib = lib = dnn.lib
        self.descs: list[tuple[str, Any]] = []
        t = _DATA[dtype]
        compute = _DATA[np.dtype(np.float64)] if dtype == np.float64 else _DATA[np.dtype(np.float32)]
        self.x = self._tensor(t, x, x_last)
        self.y = self._tensor(t, y, y_last)  # the summand's too
        self.w = self._made("Filter")
        dnn.check(lib.cudnnSetFilterNdDescriptor(self.w, t, _NHWC if w_last else _NCHW, len(w), _ints(w)),
                  "cudnnSetFilterNdDescriptor")
        self.conv = self._made("Convolution")
        nd = len(pads)
        dnn.check(lib.cudnnSetConvolutionNdDescriptor(self.conv, nd, _ints(pads), _ints(strides), _ints(dilations),
                                                      _CROSS_CORRELATION, compute), "cudnnSetConvolutionNdDescriptor")
        dnn.check(lib.cudnnSetConvolutionGroupCount(self.conv, group), "cudnnSetConvolutionGroupCount")
        # float32 without TF32 unless the plan allows it; half precision on tensor cores (as PyTorch asks cuDNN
        # for), accumulating in float32
        math_type = (_DEFAULT_MATH if tf32 else _FMA_MATH) if dtype == np.float32 else \
            _TENSOR_OP_MATH if np.dtype(dtype) in HALVES else _DEFAULT_MATH
        dnn.check(lib.cudnnSetConvolutionMathType(self.conv, math_type), "cudnnSetConvolutionMathType")
        self.bias = self._tensor(t, (1, y[1]) + (1,) * (len(y) - 2)) if bias else None
        self.act = None
        if relu:
            self.act = self._made("Activation")
            dnn.check(lib.cudnnSetActivationDescriptor(self.act, _RELU, _PROPAGATE_NAN, 0.0),
                      "cudnnSetActivationDescriptor")
        self.summand = summand
        # bias (+ Z) + ReLU in the convolution's epilogue (float32; float16 and bfloat16 with float accumulation,
        # cuDNN's pseudo-half configurations); otherwise the caller applies bias, Z and ReLU after the convolution
        # (also where cuDNN refuses the fusion when first run: ``Dnn.forward``)
        self.fused = bool(relu and bias and (dtype == np.float32 or np.dtype(dtype) in HALVES))
        self._pick: tuple[int, int] | None = None  # (algorithm, scratch bytes): chosen on first use
        self.found: list[tuple[int, int]] = []  # (algorithm, scratch bytes) cuDNN's search ran, fastest first
        self.scalars = np.array([1, 0], np.float64 if dtype == np.float64 else np.float32)  # alpha/beta: one, zero

    @property
    def algo(self) -> int:
        """The algorithm the layer runs: stored, searched, or else cuDNN's heuristic choice (made on first use)."""
        return self.pick()[0]

    @property
    def workspace(self) -> int:
        """Scratch bytes ``algo`` needs."""
        return self.pick()[1]

    def pick(self) -> tuple[int, int]:
        if self._pick is None:
            self._pick = self._choose()
        return self._pick

    def set_pick(self, algo: int, workspace: int) -> None:
        self._pick = (int(algo), int(workspace))

    def _made(self, kind: str) -> Any:
        desc = ctypes.c_void_p()
        self.dnn.check(getattr(self.lib, f"cudnnCreate{kind}Descriptor")(ctypes.byref(desc)),
                       f"cudnnCreate{kind}Descriptor")
        self.descs.append((kind, desc))
        return desc

    def _tensor(self, t: int, shape: Sequence[int], channels_last: bool = False) -> Any:
        """A descriptor of an (N, C, spatial...) tensor, its elements in that order or channels-last."""
        desc = self._made("Tensor")
        strides = _strides(shape, channels_last)
        self.dnn.check(self.lib.cudnnSetTensorNdDescriptor(desc, t, len(shape), _ints(shape), _ints(strides)),
                       "cudnnSetTensorNdDescriptor")
        return desc

    def _choose(self) -> tuple[int, int]:
        """cuDNN's first heuristic choice whose scratch fits the limit."""
        perf = (_AlgoPerf * _ALGOS)()
        count = ctypes.c_int()
        lib, dnn = self.lib, self.dnn
        with dnn.lock:
            dnn.check(lib.cudnnGetConvolutionForwardAlgorithm_v7(dnn.handle, self.x, self.w, self.conv, self.y,
                                                                 _ALGOS, ctypes.byref(count), perf),
                      "cudnnGetConvolutionForwardAlgorithm_v7")
            for k in range(count.value):
                if perf[k].status != 0:
                    continue
                size = ctypes.c_size_t()
                if lib.cudnnGetConvolutionForwardWorkspaceSize(dnn.handle, self.x, self.w, self.conv, self.y,
                                                               perf[k].algo, ctypes.byref(size)):
                    continue
                if size.value <= WORKSPACE_LIMIT:
                    return perf[k].algo, size.value
        raise DnnError("cuDNN offers no convolution algorithm for this layer within the scratch limit")

    def release(self) -> None:
        for kind, desc in reversed(self.descs):
            getattr(self.lib, f"cudnnDestroy{kind}Descriptor")(desc)
        self.descs.clear()


#: cudnnPoolingMode_t of the pools cuDNN runs: max, and averages counting the padding or not
POOL_MODES = {"max": 0, "avg_include_pad": 1, "avg_exclude_pad": 2}


class _PoolLayer(_Layer):
    """Descriptors of one pooling geometry (2-D or 3-D windows, symmetric pads, no dilation)."""

    def __init__(self, dnn: "Dnn", key: tuple) -> None:  # noqa: D107 - (no convolution parts)
        dtype, x, y, window, pads, strides, mode, (x_last, y_last) = key
        self.dnn, self.lib = dnn, dnn.lib
        self.descs = []
        t = _DATA[dtype]
        self.x = self._tensor(t, x, x_last)
        self.y = self._tensor(t, y, y_last)
        self.pool = self._made("Pooling")
        dnn.check(self.lib.cudnnSetPoolingNdDescriptor(self.pool, POOL_MODES[mode], _PROPAGATE_NAN, len(window),
                                                       _ints(window), _ints(pads), _ints(strides)),
                  "cudnnSetPoolingNdDescriptor")
        self.scalars = np.array([1, 0], np.float64 if dtype == np.float64 else np.float32)


class Dnn:
    """One cuDNN handle of one device and the layers it has seen, used under a lock (handles are not thread-safe)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.lock = threading.RLock()
        handle = ctypes.c_void_p()
        self.check(lib.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")
        self.handle = handle
        self.layers: dict[tuple, _Layer] = {}
        self.refusals: list[str] = []  # why cuDNN did not take a layer (the im2col path ran it), the latest 100

    def check(self, status: int, what: str) -> None:
        """Raise DnnError for a failed status."""
        if status:
            text = self.lib.cudnnGetErrorString(status)
            raise DnnError(f"{what} failed: {text.decode() if text else ''} (cuDNN status {status})")

    def layer(self, dtype: np.dtype, x: Sequence[int], w: Sequence[int], y: Sequence[int], pads: Sequence[int],
              strides: Sequence[int], dilations: Sequence[int], group: int, bias: bool, relu: bool,
              summand: bool = False, lasts: tuple[bool, bool, bool] = (False, False, False),
              tf32: bool = False) -> _Layer:
        """The descriptors and algorithm of one geometry (made once). Shapes are NCHW-style, 2-D or 3-D spatial;
        ``summand``: a tensor of the output's shape is added before the activation; ``lasts``: whether x, w and
        y (and the summand) are stored channels-last; ``tf32``: a float32 layer may run TF32 on tensor cores."""
        key = (np.dtype(dtype), tuple(x), tuple(w), tuple(y), tuple(pads), tuple(strides), tuple(dilations), group,
               bias, relu, summand, tuple(bool(v) for v in lasts), bool(tf32) and np.dtype(dtype) == np.float32)
        with self.lock:
            layer = self.layers.get(key)
            if layer is None:
                layer = self.layers[key] = _Layer(self, key)
            return layer

    def find(self, layer: _Layer, stream: int, x: int, w: int, y: int, workspace: int, size: int) -> float:
        """Time every algorithm on real buffers (cuDNN's own search) and pick the fastest that fits the scratch
        limit (``layer.found``: every one that fits, fastest first); returns its time in ms."""
        perf = (_AlgoPerf * _ALGOS)()
        count = ctypes.c_int()
        with self.lock:
            self.check(self.lib.cudnnSetStream(self.handle, ctypes.c_void_p(stream)), "cudnnSetStream")
            self.check(self.lib.cudnnFindConvolutionForwardAlgorithmEx(
                self.handle, layer.x, x, layer.w, w, layer.conv, layer.y, y, _ALGOS, ctypes.byref(count), perf,
                workspace, size), "cudnnFindConvolutionForwardAlgorithmEx")
        layer.found = [(perf[k].algo, perf[k].memory) for k in range(count.value)  # fastest first
                       if perf[k].status == 0 and perf[k].memory <= min(size, WORKSPACE_LIMIT)]
        if not layer.found:
            return float("inf")
        layer.set_pick(*layer.found[0])
        return float(next(p.time for p in perf[:count.value] if p.algo == layer.found[0][0]))

    def adopt(self, layer: _Layer, algo: Any, workspace: Any = None) -> bool:
        """Run ``layer`` with ``algo`` (a choice stored by an earlier search) where cuDNN still offers it within
        the scratch limit; False, leaving the layer as it was, where it does not.  ``workspace``: the scratch
        bytes the search found it to need, stored with it (the cache is per cuDNN version): taken as they are,
        without asking cuDNN (a warm process's first queries load cuDNN's engines: 140 ms of ResNet-50's
        compile on an H200)."""
        if not isinstance(algo, int) or isinstance(algo, bool) or not 0 <= algo < _ALGOS:
            return False
        if isinstance(workspace, int) and not isinstance(workspace, bool) and 0 <= workspace <= WORKSPACE_LIMIT:
            layer.set_pick(algo, workspace)
            return True
        size = ctypes.c_size_t()
        with self.lock:
            if self.lib.cudnnGetConvolutionForwardWorkspaceSize(self.handle, layer.x, layer.w, layer.conv, layer.y,
                                                                algo, ctypes.byref(size)):
                return False
        if size.value > WORKSPACE_LIMIT:
            return False
        layer.set_pick(algo, size.value)
        return True

    def forward(self, layer: _Layer, stream: int, x: int, w: int, bias: int, y: int, workspace: int,
                z: int = 0) -> bool:
        """y = conv(x, w) on ``stream`` (device addresses; ``workspace`` of layer.workspace bytes), with
        [relu](... + bias [+ z]) in cuDNN's fused call where the layer runs fused; returns whether that epilogue
        was done (else the caller applies bias, summand and ReLU)."""
        lib, one, zero = self.lib, layer.scalars.ctypes.data, layer.scalars.ctypes.data + layer.scalars.itemsize
        ws = ctypes.c_size_t(layer.workspace)
        with self.lock:
            self.check(lib.cudnnSetStream(self.handle, ctypes.c_void_p(stream)), "cudnnSetStream")
            if layer.fused:
                status = lib.cudnnConvolutionBiasActivationForward(
                    self.handle, one, layer.x, x, layer.w, w, layer.conv, layer.algo, workspace, ws,
                    one if layer.summand else zero, layer.y, z if layer.summand else y,
                    layer.bias, bias, layer.act, layer.y, y)
                if status == 0:
                    return True
                layer.fused = False  # cuDNN refused the fusion (checked before any work): the caller's epilogue
                self.refuse(f"cudnnConvolutionBiasActivationForward: status {status}")
            self.check(lib.cudnnConvolutionForward(self.handle, one, layer.x, x, layer.w, w, layer.conv, layer.algo,
                                                   workspace, ws, zero, layer.y, y), "cudnnConvolutionForward")
        return False

    def pool_layer(self, dtype: np.dtype, x: Sequence[int], y: Sequence[int], window: Sequence[int],
                   pads: Sequence[int], strides: Sequence[int], mode: str,
                   lasts: tuple[bool, bool] = (False, False)) -> _PoolLayer:
        """The descriptors of one pooling geometry (made once): shapes NCHW-style, ``mode`` one of ``POOL_MODES``,
        ``lasts``: whether x and y are stored channels-last."""
        if not hasattr(self.lib, "cudnnPoolingForward"):
            raise DnnError("this cuDNN has no pooling (its ops library is missing)")
        key = ("pool", np.dtype(dtype), tuple(x), tuple(y), tuple(window), tuple(pads), tuple(strides), mode,
               tuple(bool(v) for v in lasts))
        with self.lock:
            layer = self.layers.get(key)
            if layer is None:
                layer = self.layers[key] = _PoolLayer(self, key[1:])
            return layer

    def pool_forward(self, layer: _PoolLayer, stream: int, x: int, y: int) -> None:
        """y = pool(x) on ``stream`` (device addresses)."""
        one, zero = layer.scalars.ctypes.data, layer.scalars.ctypes.data + layer.scalars.itemsize
        with self.lock:
            self.check(self.lib.cudnnSetStream(self.handle, ctypes.c_void_p(stream)), "cudnnSetStream")
            self.check(self.lib.cudnnPoolingForward(self.handle, layer.pool, one, layer.x, x, zero, layer.y, y),
                       "cudnnPoolingForward")

    def refuse(self, why: str) -> None:
        """Note why cuDNN did not run a layer as asked."""
        self.refusals = self.refusals[-99:] + [why]

    def close(self) -> None:
        """Destroy the descriptors and the handle."""
        with self.lock:
            for layer in self.layers.values():
                layer.release()
            self.layers.clear()
            if self.handle:
                self.lib.cudnnDestroy(self.handle)
                self.handle = None


_LIB: list = []


def library() -> ctypes.CDLL | None:
    """The cuDNN library (looked up once); None where it is not installed or DEVICELAYER_CUDNN=0."""
    if not _LIB:
        _LIB.append(_library())
    return _LIB[0]


def version() -> int | None:
    """cuDNN's version number (e.g. 91900), None without the library."""
    lib = library()
    return int(lib.cudnnGetVersion()) if lib is not None else None
