"""oneDNN convolutions for the host backend, through oneDNN's C API (ctypes).

oneDNN's fast CPU convolutions (its brgemm and JIT kernels) read and write
channels-last activations and weights in a blocked layout of its choosing.
The graph keeps NCHW, so a layer reorders its input to channels-last, runs the
convolution with bias, the summand Z (a ``sum`` post-op) and ReLU fused, and
reorders the result back; weights are reordered once where they are constant
(``ConvLayer.prepare_weights``), else on every call.

The library is ``libdnnl.so.3`` (oneDNN 3.x) from the ``onednn-cpu-gomp``
wheel (the ``onednn`` extra), ``$DEVICELAYER_ONEDNN`` (a path), or the
loader's search; ``DEVICELAYER_ONEDNN=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import threading
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from devicelayer import lifecycle
from devicelayer.hostmemory import block

from . import omp as host_omp, omp_copy, runner as host_runner

# enum values of oneDNN 3.x (dnnl_types.h)
_F32 = 3
_ANY = 1
_PLAIN = {1: 4, 2: 5, 3: 6}  # ncw, nchw, ncdhw (also oiw, oihw, oidhw)
_CHANNELS_LAST = {1: 15, 2: 22, 3: 33}  # nwc, nhwc, ndhwc
_GROUPED = {1: 5, 2: 6, 3: 7}  # goiw, goihw, goidhw
VECTOR = 2  # the format tag of a 1-D tensor ("a")
FORWARD_INFERENCE = 96
_CONVOLUTION_DIRECT = 1
ELTWISE_RELU = 32
ELTWISE_CLIP = 0x2F  # dnnl_eltwise_clip_v2: alpha <= y <= beta
ARG_SRC, ARG_WEIGHTS, ARG_BIAS, ARG_DST = 1, 33, 41, 17
ARG_SRC_1 = 2  # a binary primitive's second input
ARG_MEAN, ARG_VARIANCE, ARG_SCALE, ARG_SHIFT, ARG_MULTIPLE_SRC = 49, 50, 51, 52, 1024
_CPU_ENGINE = 1
_STREAM_DEFAULT = 1
_QUERY_WEIGHTS_MD = 131
_QUERY_IMPL_INFO = 8
_QUERY_SCRATCHPAD_MD = 136
_ARG_SCRATCHPAD = 80
_SCRATCHPAD_USER = 1  # each primitive gets its scratch from us: it may then run on any thread
_MAX_DIMS = 12
DTYPES = frozenset({np.dtype(np.float32)})
_OFF = ("0", "off", "none")
_DISTRIBUTIONS = ("onednn-cpu-gomp", "onednn-cpu-iomp", "onednn-cpu-tbb")


class DnnlError(RuntimeError):
    """A oneDNN call failed (the message names the call and oneDNN's status)."""


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


def _candidates() -> list[str]:
    """Where libdnnl may be: $DEVICELAYER_ONEDNN, the oneDNN wheels' files, this environment's lib, the loader."""
    paths = []
    env = os.environ.get("DEVICELAYER_ONEDNN", "")
    if env:
        paths.append(env)
    try:
        from importlib import metadata

        for name in _DISTRIBUTIONS:
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            paths += [os.path.normpath(str(dist.locate_file(f))) for f in dist.files or () if f.name == "libdnnl.so.3"]
    except ImportError:
        pass
    paths += [os.path.join(root, "lib", "libdnnl.so.3") for root in dict.fromkeys((sys.prefix, sys.base_prefix))]
    paths += [ctypes.util.find_library("dnnl") or "", "libdnnl.so.3"]
    return [p for p in dict.fromkeys(paths) if p]


def _declare(lib: ctypes.CDLL) -> None:
    """Argument and result types of the entry points used (handles stay pointer-sized)."""
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    pp, dims = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)
    sigs: dict[str, tuple[list, Any]] = {
        "dnnl_engine_create": ([pp, i, ctypes.c_size_t], i), "dnnl_stream_create": ([pp, p, i], i),
        "dnnl_stream_wait": ([p], i),
        "dnnl_memory_desc_create_with_tag": ([pp, i, dims, i, i], i), "dnnl_memory_desc_destroy": ([p], i),
        "dnnl_memory_desc_create_with_strides": ([pp, i, dims, i, dims], i),
        "dnnl_memory_desc_clone": ([pp, p], i), "dnnl_memory_desc_equal": ([p, p], i),
        "dnnl_memory_desc_get_size": ([p], ctypes.c_size_t),
        "dnnl_memory_create": ([pp, p, p, p], i), "dnnl_memory_destroy": ([p], i),
        "dnnl_memory_set_data_handle": ([p, p], i),
        "dnnl_post_ops_create": ([pp], i), "dnnl_post_ops_destroy": ([p], i),
        "dnnl_post_ops_append_sum": ([p, f, ctypes.c_int32, i], i),
        "dnnl_post_ops_append_eltwise": ([p, i, f, f], i),
        "dnnl_post_ops_append_binary": ([p, i, p], i),
        "dnnl_matmul_primitive_desc_create": ([pp, p, p, p, p, p, p], i),
        "dnnl_primitive_attr_create": ([pp], i), "dnnl_primitive_attr_destroy": ([p], i),
        "dnnl_primitive_attr_set_post_ops": ([p, p], i), "dnnl_primitive_attr_set_scratchpad_mode": ([p, i], i),
        "dnnl_convolution_forward_primitive_desc_create": ([pp, p, i, i, p, p, p, p, dims, dims, dims, dims, p], i),
        "dnnl_reorder_primitive_desc_create": ([pp, p, p, p, p, p], i),
        "dnnl_pooling_forward_primitive_desc_create": ([pp, p, i, i, p, p, dims, dims, dims, dims, dims, p], i),
        "dnnl_concat_primitive_desc_create": ([pp, p, p, i, i, pp, p], i),
        "dnnl_batch_normalization_forward_primitive_desc_create": ([pp, p, i, p, p, f, ctypes.c_uint, p], i),
        "dnnl_shuffle_forward_primitive_desc_create": ([pp, p, i, p, p, i, ctypes.c_int64, p], i),
        "dnnl_eltwise_forward_primitive_desc_create": ([pp, p, i, i, p, p, f, f, p], i),
        "dnnl_softmax_forward_primitive_desc_create": ([pp, p, i, i, p, p, i, p], i),
        "dnnl_layer_normalization_forward_primitive_desc_create": ([pp, p, i, p, p, p, f, ctypes.c_uint, p], i),
        "dnnl_binary_primitive_desc_create": ([pp, p, i, p, p, p, p], i),
        # (engine, prop_kind, direction, src_layer, src_iter, src_iter_c, weights_layer, weights_iter,
        # weights_peephole, weights_projection, bias, dst_layer, dst_iter, dst_iter_c, flags, attr)
        "dnnl_lstm_forward_primitive_desc_create": ([pp, p, i, i, *[p] * 11, ctypes.c_uint, p], i),
        # (engine, prop_kind, direction, src_layer, src_iter, weights_layer, weights_iter, bias, dst_layer,
        # dst_iter, flags, attr)
        "dnnl_gru_forward_primitive_desc_create": ([pp, p, i, i, *[p] * 7, ctypes.c_uint, p], i),
        "dnnl_lbr_gru_forward_primitive_desc_create": ([pp, p, i, i, *[p] * 7, ctypes.c_uint, p], i),
        "dnnl_primitive_desc_query": ([p, i, i, p], i), "dnnl_primitive_desc_query_md": ([p, i, i], p),
        "dnnl_primitive_desc_destroy": ([p], i),
        "dnnl_primitive_create": ([pp, p], i), "dnnl_primitive_destroy": ([p], i),
        "dnnl_primitive_execute": ([p, p, i, ctypes.POINTER(_ExecArg)], i),
        "dnnl_version": ([], ctypes.POINTER(_Version)),
        "dnnl_sgemm": ([ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, f, p,
                        ctypes.c_int64, p, ctypes.c_int64, f, p, ctypes.c_int64], i),
    }
    for name, (args, result) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result


def _library() -> ctypes.CDLL | None:
    if os.environ.get("DEVICELAYER_ONEDNN", "").lower() in _OFF:
        return None
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        return _first_loadable()
    finally:
        # with OMP_PROC_BIND set, loading OpenMP pins the loading thread to one CPU, and every thread it starts
        # later (onnxruntime's, OpenBLAS's) would inherit that: the caller keeps the CPUs it had
        if mask is not None and os.sched_getaffinity(0) != mask:
            os.sched_setaffinity(0, mask)


def _first_loadable() -> ctypes.CDLL | None:
    """The first candidate that loads as oneDNN 3: on an OpenMP runtime of its own where it can
    (``omp_copy``), else as it is."""
    for path in _candidates():
        for private in (True, False) if omp_copy.wanted() else (False,):
            try:
                with host_omp.loading(private):
                    lib = omp_copy.load(path) if private else ctypes.CDLL(path)
                if lib is None:
                    continue
                _declare(lib)
                if lib.dnnl_version().contents.major != 3:
                    break
            except (OSError, AttributeError):
                continue
            return lib
    return None


_LIB: list = []
_LIB_LOCK = threading.Lock()


def _reinit_after_fork() -> None:
    """In a forked child: a fresh lock (a thread of the parent may have held it at the fork)."""
    global _LIB_LOCK
    _LIB_LOCK = threading.Lock()


lifecycle.in_forked_child(_reinit_after_fork)


def library() -> ctypes.CDLL | None:
    """The oneDNN 3 library (looked up once); None where it is not installed or DEVICELAYER_ONEDNN=0."""
    if not _LIB:
        with _LIB_LOCK:
            if not _LIB:
                _LIB.append(_library())
    return _LIB[0]


@functools.cache
def version() -> str | None:
    """oneDNN's version ("3.2.0"), None without the library."""
    lib = library()
    if lib is None:
        return None
    v = lib.dnnl_version().contents
    return f"{v.major}.{v.minor}.{v.patch}"


def aligned(nbytes: int) -> np.ndarray:
    """``nbytes`` of uninitialised memory aligned to 64 bytes (uint8); a large block on huge pages where the kernel
    gives them (``hostmemory.block``: a layer's reordered weights are read every run)."""
    return block(nbytes)


def sgemm(trans_a: bool, trans_b: bool, m: int, n: int, k: int, alpha: float, a: int, lda: int, b: int, ldb: int,
          beta: float, c: int, ldc: int) -> None:
    """C = alpha * op(A) @ op(B) + beta * C in float32, row-major, at these addresses (oneDNN's threads)."""
    lib = library()
    check(lib, lib.dnnl_sgemm(b"T" if trans_a else b"N", b"T" if trans_b else b"N", m, n, k, alpha, a, lda, b, ldb,
                              beta, c, ldc), "dnnl_sgemm")


#: oneDNN's CPU runtimes whose primitives have finished when ``dnnl_primitive_execute`` returns (sequential,
#: OpenMP, TBB: the calling thread joins the work); a threadpool runtime's may still run until the stream is waited
_SYNCHRONOUS_RUNTIMES = (1, 2, 4)


class _Engine:
    """The process's CPU engine and its stream (oneDNN's CPU streams run in the calling thread)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        #: a primitive's work is done when its execute call returns (no stream wait needed)
        self.synchronous = lib.dnnl_version().contents.cpu_runtime in _SYNCHRONOUS_RUNTIMES
        self.engine, self.stream = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib, lib.dnnl_engine_create(ctypes.byref(self.engine), _CPU_ENGINE, 0), "dnnl_engine_create")
        check(lib, lib.dnnl_stream_create(ctypes.byref(self.stream), self.engine, _STREAM_DEFAULT),
              "dnnl_stream_create")


_ENGINE: list = []


def engine() -> _Engine:
    """The CPU engine (made once; DnnlError where oneDNN is missing)."""
    if not _ENGINE:
        lib = library()
        if lib is None:
            raise DnnlError("oneDNN is not installed")
        with _LIB_LOCK:
            if not _ENGINE:
                _ENGINE.append(_Engine(lib))
    return _ENGINE[0]


def check(lib: ctypes.CDLL, status: int, call: str) -> None:
    """Raise DnnlError unless ``status`` is dnnl_success."""
    if status != 0:
        raise DnnlError(f"{call} failed with oneDNN status {status}")


def dims(values: Sequence[int]) -> Any:
    """``values`` as oneDNN's dims array."""
    return (ctypes.c_int64 * _MAX_DIMS)(*values)


def dense(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides, in elements, of a plain row-major tensor of ``shape``."""
    return tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))


def last_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides, in elements, of an (N, C, spatial...) tensor of ``shape`` held channels-last (C innermost, then
    the spatial axes from the last, N outermost)."""
    inner = dense(tuple(shape[2:]) + (shape[1],))  # (spatial..., C) row-major
    return (int(np.prod(shape[1:])), 1, *inner[:-1])


class _Memory:
    """A oneDNN memory object whose data pointer is set per call (set again only when it changes)."""

    def __init__(self, layer: "Layer", md: Any) -> None:
        self.lib = layer.lib
        self.handle = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_memory_create(ctypes.byref(self.handle), md, layer.eng.engine, None),
              "dnnl_memory_create")
        self.md = md
        self.ptr = 0

    def point(self, ptr: int) -> None:
        if ptr != self.ptr:
            check(self.lib, self.lib.dnnl_memory_set_data_handle(self.handle, ptr), "dnnl_memory_set_data_handle")
            self.ptr = ptr

    def release(self) -> None:
        if self.handle:
            self.lib.dnnl_memory_destroy(self.handle)
            self.handle = ctypes.c_void_p()


#: one step of a layer's run: (primitive, its args), the address each of the args' memories points at, and what
#: it is (for errors); or a plain call (a copy between the steps)
Step = Union[tuple[tuple[Any, tuple[int, Any]], Mapping[_Memory, int], str], Callable[[], object]]


class Copy:
    """A step of a layer's run that copies ``nbytes`` from ``src`` to ``dst`` (addresses; the host runner makes
    it a COPY call)."""

    __slots__ = ("dst", "src", "nbytes")

    def __init__(self, dst: int, src: int, nbytes: int) -> None:
        self.dst, self.src, self.nbytes = dst, src, nbytes

    def __call__(self) -> None:
        ctypes.memmove(self.dst, self.src, self.nbytes)


class _Bound:
    """The memories a bound run (``Layer.bind``) points at its operands, released with it; it keeps the layer,
    whose primitives it runs, alive."""

    def __init__(self, layer: "Layer", keep: Any) -> None:
        self.layer, self.keep = layer, keep
        self.memories: list[_Memory] = []

    def __del__(self) -> None:
        for m in self.memories:
            try:
                m.release()
            except Exception:
                pass


def tag(rank: int, channels_last: bool) -> int:
    """oneDNN's format tag of an (N, C, spatial...) tensor of ``rank`` 3-5: NCHW-like or channels-last."""
    return (_CHANNELS_LAST if channels_last else _PLAIN)[rank - 2]


class Layer:
    """oneDNN objects of one primitive and the reorders around it, destroyed together; ``run`` of a subclass is
    serialised by ``lock``.  Every primitive gets scratchpad memory of its own (it may run on any thread)."""

    def __init__(self) -> None:
        self.eng = engine()
        self.lib = self.eng.lib
        self._objects: list[tuple[str, Any]] = []  # (destroy function, handle), released in reverse
        self._memories: list[_Memory] = []
        self._scratchpads: list[np.ndarray] = []
        self.lock = threading.Lock()
        self.implementation = ""

    def takes_weights_of(self, other: "Layer") -> bool:
        """Whether weights ``other`` prepared (``prepare_weights``) are in the layout this layer reads."""
        return False

    # -- construction ------------------------------------------------------------------------
    def _md(self, shape: Sequence[int], tag: int) -> ctypes.c_void_p:
        md = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(shape), dims(shape), _F32,
                                                                  tag), "dnnl_memory_desc_create_with_tag")
        self._objects.append(("dnnl_memory_desc_destroy", md))
        return md

    def _strided_md(self, shape: Sequence[int], strides: Sequence[int]) -> ctypes.c_void_p:
        md = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(shape), dims(shape), _F32,
                                                                      dims(strides)),
              "dnnl_memory_desc_create_with_strides")
        self._objects.append(("dnnl_memory_desc_destroy", md))
        return md

    def _memory(self, md: Any) -> _Memory:
        memory = _Memory(self, md)
        self._memories.append(memory)
        return memory

    def _made(self, create: str, destroy: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        check(self.lib, getattr(self.lib, create)(ctypes.byref(handle)), create)
        self._objects.append((destroy, handle))
        return handle

    def _attr(self) -> ctypes.c_void_p:
        """A primitive attribute asking for a user scratchpad."""
        attr = self._made("dnnl_primitive_attr_create", "dnnl_primitive_attr_destroy")
        check(self.lib, self.lib.dnnl_primitive_attr_set_scratchpad_mode(attr, _SCRATCHPAD_USER),
              "dnnl_primitive_attr_set_scratchpad_mode")
        return attr

    def _described(self, pd: ctypes.c_void_p, main: bool = True) -> ctypes.c_void_p:
        """Keep ``pd`` (made by the caller) for release and note the implementation oneDNN chose (a reorder's
        only where the layer has no ``main`` primitive)."""
        self._objects.append(("dnnl_primitive_desc_destroy", pd))
        info = ctypes.c_char_p()
        check(self.lib, self.lib.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO, 0, ctypes.byref(info)),
              "dnnl_primitive_desc_query")
        if main or not self.implementation:
            self.implementation = (info.value or b"").decode(errors="replace")
        return pd

    def _primitive(self, pd: ctypes.c_void_p) -> ctypes.c_void_p:
        prim = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_primitive_create(ctypes.byref(prim), pd), "dnnl_primitive_create")
        self._objects.append(("dnnl_primitive_destroy", prim))
        return prim

    def _scratchpad(self, pd: Any) -> list[tuple[int, _Memory]]:
        """The scratchpad argument a primitive asks for (none where it needs none), with memory of its own."""
        md = self.lib.dnnl_primitive_desc_query_md(pd, _QUERY_SCRATCHPAD_MD, 0)
        nbytes = int(self.lib.dnnl_memory_desc_get_size(md)) if md else 0
        if not nbytes:
            return []
        scratch = aligned(nbytes)
        self._scratchpads.append(scratch)
        memory = self._memory(md)
        memory.point(scratch.ctypes.data)
        return [(_ARG_SCRATCHPAD, memory)]

    def _reorder(self, src_md: Any, dst_md: Any, src: _Memory, dst: _Memory) -> tuple[Any, Any]:
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, self.eng.engine,
                                                                    dst_md, self.eng.engine, self._attr()),
              "dnnl_reorder_primitive_desc_create")
        self._described(pd, main=False)
        return self._primitive(pd), self._args([(ARG_SRC, src), (ARG_DST, dst)] + self._scratchpad(pd))

    def _same(self, a: Any, b: Any) -> bool:
        return bool(self.lib.dnnl_memory_desc_equal(a, b))

    def _size(self, md: Any) -> int:
        return int(self.lib.dnnl_memory_desc_get_size(md))

    @staticmethod
    def _args(pairs: Sequence[tuple[int, _Memory]]) -> tuple[int, Any]:
        return len(pairs), (_ExecArg * len(pairs))(*[_ExecArg(a, m.handle.value) for a, m in pairs])

    # -- running -----------------------------------------------------------------------------
    def _steps(self, *operands: Any) -> list[Step]:
        """What a run on these operands executes, in order (each subclass: ``run``'s arguments)."""
        raise NotImplementedError

    def run(self, *operands: Any) -> None:
        """One run on these operands (addresses): each step's memories pointed at them, then executed."""
        with self.lock:
            for step in self._steps(*operands):
                if callable(step):
                    step()
                    continue
                (prim, args), at, what = step
                for m, ptr in at.items():
                    m.point(ptr)
                self._execute(prim, args, what)
            self._wait()

    def bind(self, *operands: Any, keep: Any = None) -> Callable[[], None]:
        """``run`` on these fixed operands as one call: each step gets memories of its own pointing at them once,
        so a call only executes (no pointer set, none of ``run``'s Python: 1-2 us a call of a small model's
        layers).  The steps still share the layer's scratch memory, under its lock.  ``keep``: what the call
        holds while it lives (the arrays at those addresses)."""
        own = _Bound(self, keep)
        lib, stream, synchronous = self.lib, self.eng.stream, self.eng.synchronous
        execute = lib.dnnl_primitive_execute
        calls: list[Any] = []
        for step in self._steps(*operands):
            if callable(step):
                calls.append((step, None, None, None))
                continue
            (prim, (n, args)), at, what = step
            swap = {}
            for m, ptr in at.items():
                copy = _Memory(self, m.md)
                own.memories.append(copy)
                copy.point(ptr)
                swap[m.handle.value] = copy.handle.value
            mine = (_ExecArg * n)(*[_ExecArg(a.arg, swap.get(a.memory, a.memory)) for a in args])
            calls.append((prim, mine, n, what))
        lock = self.lock
        # what the host runner executes for it (every step a primitive, done when its execute returns, or a copy)
        entries = [(prim.value, stream.value, ctypes.addressof(mine), n, host_runner.EXECUTE) if mine is not None
                   else (prim.dst, prim.src, prim.nbytes, 0, host_runner.COPY)
                   for prim, mine, n, _ in calls if mine is not None or isinstance(prim, Copy)] if synchronous else []
        if len(calls) == 1 and calls[0][1] is not None and synchronous:
            prim, mine, n, what = calls[0]

            def one(own: _Bound = own) -> None:
                with lock:
                    status = execute(prim, stream, n, mine)
                if status:
                    check(lib, status, what)
            return host_runner.mark(one, entries, [lock])

        def steps(own: _Bound = own) -> None:
            with lock:
                for prim, mine, n, what in calls:
                    if mine is None:
                        prim()
                    else:
                        check(lib, execute(prim, stream, n, mine), what)
                if not synchronous:
                    check(lib, lib.dnnl_stream_wait(stream), "dnnl_stream_wait")
        return host_runner.mark(steps, entries, [lock]) if len(entries) == len(calls) and entries else steps

    def _execute(self, prim: Any, args: tuple[int, Any], what: str) -> None:
        check(self.lib, self.lib.dnnl_primitive_execute(prim, self.eng.stream, args[0], args[1]), what)

    def _wait(self) -> None:
        if not self.eng.synchronous:
            check(self.lib, self.lib.dnnl_stream_wait(self.eng.stream), "dnnl_stream_wait")

    def _scratch(self, which: str, nbytes: int) -> int:
        """The address of this layer's scratch array ``which`` (an attribute, made on first use)."""
        arr = getattr(self, which, None)
        if arr is None:
            arr = aligned(nbytes)
            setattr(self, which, arr)
        return arr.ctypes.data

    def release(self) -> None:
        """Destroy the oneDNN objects (the layer is unusable afterwards)."""
        with self.lock:
            for m in self._memories:
                m.release()
            for destroy, handle in reversed(self._objects):
                if handle:
                    getattr(self.lib, destroy)(handle)
            self._objects.clear()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


class ConvLayer(Layer):
    """One convolution geometry: the oneDNN convolution with its post-ops, the reorders around it and their
    channels-last scratch."""

    def __init__(self, x: Sequence[int], w: Sequence[int], y: Sequence[int], pads: Sequence[int],
                 strides: Sequence[int], dilations: Sequence[int], group: int, bias: bool, summand: bool,
                 activation: tuple[int, float, float] | None = None) -> None:
        """``activation``: oneDNN's eltwise post-op applied last, as (algorithm, alpha, beta), or None."""
        super().__init__()
        lib, eng = self.lib, self.eng
        nd = len(x) - 2
        w_dims = ((group, w[0] // group) + tuple(w[1:])) if group > 1 else tuple(w)
        self.md_x = self._md(x, _PLAIN[nd])
        self.md_x_last = self._md(x, _CHANNELS_LAST[nd])
        self.md_w = self._md(w_dims, _GROUPED[nd] if group > 1 else _PLAIN[nd])
        self.md_y = self._md(y, _PLAIN[nd])
        self.md_y_last = self._md(y, _CHANNELS_LAST[nd])
        md_b = self._md((w[0],), VECTOR) if bias else None
        md_w_any = self._md(w_dims, _ANY)
        attr = self._attr()
        ops = self._made("dnnl_post_ops_create", "dnnl_post_ops_destroy")
        if summand:
            check(lib, lib.dnnl_post_ops_append_sum(ops, 1.0, 0, 0), "dnnl_post_ops_append_sum")
        if activation is not None:  # (a clip turns a NaN into a bound, as onnxruntime's fused Conv + Clip does)
            check(lib, lib.dnnl_post_ops_append_eltwise(ops, *activation), "dnnl_post_ops_append_eltwise")
        check(lib, lib.dnnl_primitive_attr_set_post_ops(attr, ops), "dnnl_primitive_attr_set_post_ops")
        pd = ctypes.c_void_p()
        check(lib, lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), eng.engine, FORWARD_INFERENCE, _CONVOLUTION_DIRECT, self.md_x_last, md_w_any, md_b,
            self.md_y_last, dims(strides), dims([d - 1 for d in dilations]), dims(pads[:nd]), dims(pads[nd:]),
            attr), "dnnl_convolution_forward_primitive_desc_create")
        self._described(pd)
        md_w_chosen = ctypes.c_void_p()
        check(lib, lib.dnnl_memory_desc_clone(ctypes.byref(md_w_chosen), lib.dnnl_primitive_desc_query_md(
            pd, _QUERY_WEIGHTS_MD, 0)), "dnnl_memory_desc_clone")
        self._objects.append(("dnnl_memory_desc_destroy", md_w_chosen))
        self.md_w_chosen = md_w_chosen
        self.weight_bytes = self._size(md_w_chosen)
        self.y_bytes = self._size(self.md_y)
        self.conv = self._primitive(pd)
        self.m_x, self.m_x_last = self._memory(self.md_x), self._memory(self.md_x_last)
        self.m_w, self.m_w_chosen = self._memory(self.md_w), self._memory(md_w_chosen)
        self.m_b = self._memory(md_b) if bias else None
        self.m_y, self.m_y_last = self._memory(self.md_y), self._memory(self.md_y_last)
        # channels-last equals NCHW where C == 1 or the image is one element: no reorder then
        self.x_same = self._same(self.md_x, self.md_x_last)
        self.y_same = self._same(self.md_y, self.md_y_last)
        self.w_same = self._same(self.md_w, md_w_chosen)
        # the reorders a call may need (none where the two layouts are one)
        self.to_last = None if self.x_same else self._reorder(self.md_x, self.md_x_last, self.m_x, self.m_x_last)
        self.y_to_last = (self._reorder(self.md_y, self.md_y_last, self.m_y, self.m_y_last)
                          if summand and not self.y_same else None)
        self.from_last = None if self.y_same else self._reorder(self.md_y_last, self.md_y, self.m_y_last, self.m_y)
        self.w_reorder = None if self.w_same else self._reorder(self.md_w, md_w_chosen, self.m_w, self.m_w_chosen)
        self.x_bytes = self._size(self.md_x)
        self.w_scratch = None if self.w_same else aligned(self.weight_bytes)
        args = [(ARG_SRC, self.m_x_last), (ARG_WEIGHTS, self.m_w_chosen), (ARG_DST, self.m_y_last)]
        if bias:
            args.append((ARG_BIAS, self.m_b))
        self.forward = (self.conv, self._args(args + self._scratchpad(pd)))

    def takes_weights_of(self, other: Layer) -> bool:
        """Whether ``other`` is a convolution whose prepared weights have this one's layout."""
        return (isinstance(other, ConvLayer) and other.weight_bytes == self.weight_bytes
                and self._same(other.md_w_chosen, self.md_w_chosen))

    def prepare_weights(self, w: np.ndarray) -> np.ndarray:
        """W (float32, (M, C/group, k...)) in the layout the convolution reads, as a new array."""
        out = aligned(self.weight_bytes)
        w = np.ascontiguousarray(w, np.float32)
        with self.lock:
            if self.w_reorder is None:
                out.view(np.float32)[:] = w.reshape(-1)
            else:
                self.m_w.point(w.ctypes.data)
                self.m_w_chosen.point(out.ctypes.data)
                self._execute(*self.w_reorder, "weight reorder")
                self._wait()
        return out

    def _steps(self, x: int, w: int, b: int, y: int, z: int, prepared: bool, x_last: bool = False,
               z_last: bool = False, y_last: bool = False) -> list[Step]:
        """Y = relu(conv(X, W) + B + Z) at these addresses (B, Z, ReLU as built).  ``prepared``: W is already in
        the convolution's layout (``prepare_weights``); ``x_last``, ``z_last``, ``y_last``: that tensor is
        channels-last (NHWC) in memory, else NCHW."""
        steps: list[Step] = []
        if not (prepared or self.w_reorder is None):
            scratch = self.w_scratch.ctypes.data
            steps.append((self.w_reorder, {self.m_w: w, self.m_w_chosen: scratch}, "weight reorder"))
            w = scratch
        if not (x_last or self.x_same):
            scratch = self._scratch("_x_scratch", self.x_bytes)
            steps.append((self.to_last, {self.m_x: x, self.m_x_last: scratch}, "input reorder"))
            x = scratch
        direct = y_last or self.y_same  # the convolution writes Y itself
        out = y if direct else self._scratch("_y_scratch", self.y_bytes)
        if z:  # Z goes where the sum post-op adds to
            if z_last or self.y_same:
                if z != out:
                    steps.append(Copy(out, z, self.y_bytes))
            else:
                steps.append((self.y_to_last, {self.m_y: z, self.m_y_last: out}, "summand reorder"))
        at = {self.m_x_last: x, self.m_w_chosen: w, self.m_y_last: out}
        if self.m_b is not None:
            at[self.m_b] = b
        steps.append((self.forward, at, "convolution"))
        if not direct:
            steps.append((self.from_last, {self.m_y_last: out, self.m_y: y}, "output reorder"))
        return steps
