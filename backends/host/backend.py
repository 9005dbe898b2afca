"""Host backend: NumPy memory, an in-order worker thread, Python callables as kernels."""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import platform
import queue
import threading
import time
from typing import Any, Callable

import numpy as np

from devicelayer import interrupts
from devicelayer.device import Device, Program
from devicelayer.dlpack import DLDeviceType
from devicelayer.dtypes import EXTRA
from devicelayer.hostmemory import aligned_empty, meminfo
from devicelayer.errors import CompileError, LaunchError
from devicelayer.events import Event, dependency_error, dispatcher
from devicelayer.info import DTYPE_NAMES, DeviceInfo
from devicelayer.interrupts import protected
from devicelayer.memory import Buffer, MemoryPool
from devicelayer.registry import Backend
from devicelayer.signature import Arg, Signature, parse_arg

from . import dnnl as host_dnnl, omp as host_omp, runner as host_runner
from .blas import blas_extras
from .stretch import Stretch, quietly, uses_team


def _cpu_name() -> tuple[str, str]:
    name, vendor = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name in ("", platform.machine(), platform.processor()):
                    name = value.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
    except OSError:
        pass
    return name, vendor or "unknown"


def _host_dtypes() -> frozenset[str]:
    """Every dtype NumPy holds here: the standard ones, and bfloat16, float8, float4, int4/int2 where ml_dtypes
    is installed (``devicelayer.dtypes``)."""
    return frozenset(d for d in DTYPE_NAMES if d != "bfloat16" or "bfloat16" in EXTRA) | frozenset(EXTRA)


#: copies up to this size may run on the submitting thread where the device is idle (``HostDevice.run``)
INLINE_COPY_BYTES = 1 << 20
#: allocations from this size on are checked against the memory the machine has available
AVAILABLE_CHECK_BYTES = 64 << 20


@protected
def _protected_call(fn: Callable[[], Any]) -> None:
    """``fn()``; a Ctrl-C landing meanwhile (in the main thread) is raised once it has returned."""
    fn()


class HostEvent(Event):
    """Completion of a task on the host worker."""


class HostPool(MemoryPool):
    """64-byte aligned NumPy memory; uploads and downloads are copies on the worker."""

    maps_host_memory = True

    @property
    def free_bytes(self) -> int:
        return meminfo("MemAvailable")

    def _no_room(self, nbytes: int) -> str | None:
        """Within physical memory with what the pool holds, and, for a large allocation, within the memory the
        machine has available now: NumPy's memory is only taken when first written, and a process writing more
        than the machine has is killed.  (Reading the available memory costs ~50 us: small ones skip it.)"""
        why = super()._no_room(nbytes)
        if why is None and nbytes >= AVAILABLE_CHECK_BYTES:
            available = meminfo("MemAvailable")
            if nbytes > available:
                why = f"the machine has {available} bytes of memory available"
        return why

    def _allocate(self, nbytes: int) -> np.ndarray:
        # buffers come and go (a run's outputs, eager ops): NumPy's heap memory, not a mapping of its own each
        # (``hostmemory.huge_block``: 3 MiB allocated, touched and freed took 660-710 us against 30-40 on the VM; a
        # plan's activations on huge pages ran no faster)
        return aligned_empty(nbytes)

    def _release(self, handle: Any, nbytes: int) -> None:
        pass  # NumPy frees the memory with the last reference

    def host_view(self, buffer: Buffer) -> np.ndarray:
        buffer.check_alive("host_view")
        return self._bytes(buffer)

    # DLPack: host memory is kDLCPU; pinned (page-locked) host memory of other libraries is host memory too
    def dlpack_device(self) -> tuple[int, int]:
        return (DLDeviceType.kDLCPU, 0)

    def dlpack_accepts(self, device_type: int, device_id: int) -> bool:
        return device_type in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost, DLDeviceType.kDLROCMHost)

    def dlpack_address(self, buffer: Buffer) -> tuple[int, int]:
        return self.host_view(buffer).ctypes.data, 0

    def wrap_foreign(self, data: int, byte_offset: int, nbytes: int, owner: Any) -> tuple[np.ndarray, int]:
        raw = (ctypes.c_uint8 * nbytes).from_address(data + byte_offset)
        raw._owner = owner  # type: ignore[attr-defined]  # the producer's memory lives while any view of it does
        return np.frombuffer(raw, np.uint8), 0

    @staticmethod
    def _bytes(buffer: Buffer) -> np.ndarray:
        """The buffer's bytes; work accepted before a free still reaches them."""
        return buffer.handle[buffer.offset:buffer.offset + buffer.nbytes]

    def _upload(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        dst = self._bytes(buffer)
        return self.device.run(functools.partial(np.copyto, dst, data), waits, "upload",
                               inline=dst.nbytes <= INLINE_COPY_BYTES)

    def _download(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        src = self._bytes(buffer)
        return self.device.run(functools.partial(np.copyto, data, src), waits, "download",
                               inline=src.nbytes <= INLINE_COPY_BYTES)

    def _copy(self, dst: Buffer, src: Buffer, waits: list[Event]) -> Event:
        d, s = self._bytes(dst), self._bytes(src)
        return self.device.run(functools.partial(np.copyto, d, s), waits, "copy", inline=d.nbytes <= INLINE_COPY_BYTES)


def _host_signature(fn: Callable[..., Any]) -> Signature | None:
    all_params = inspect.signature(fn).parameters.values()
    if any(p.kind == p.VAR_POSITIONAL for p in all_params):
        return None  # takes any number of arguments
    params = [p for p in all_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    sig = []
    for p in params:
        ann = p.annotation
        if isinstance(ann, str) and ann.strip():
            sig.append(parse_arg(f"{ann} {p.name}"))
        else:
            sig.append(Arg(p.name, "any"))
    return tuple(sig)


class HostVendor:
    """Work done by a library on the host worker; ``bind`` turns a call into a plain function of no arguments."""

    def __init__(self, dev: "HostDevice", name: str, library: str) -> None:
        self.dev, self.name = dev, name
        self.label = f"{name} ({library}) on {dev.id}"

    def __call__(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any, wait: Any) -> Event:
        return self.dev._submit(self.label, lambda natives: self.native(ins, outs, attrs, in_bufs, out_bufs, natives),
                                wait, (), [*in_bufs, *out_bufs])

    def native(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any, natives: list[Event]) -> Event:
        """The work after ``natives`` (inside a submission); returns its event."""
        return self.dev.run(self.bind(ins, outs, attrs, in_bufs, out_bufs), natives, self.label)

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The work on these buffers as a call for the worker."""
        raise NotImplementedError


def _nothing() -> None:
    pass


class HostDevice(Device):
    """The CPU running NumPy; kernels are Python callables taking NumPy arrays."""

    def __init__(self, info: DeviceInfo) -> None:
        super().__init__(info)
        self.pool = HostPool(self)
        self.onednn_layers: dict[tuple, dict[str, Any]] = {}  # (op, geometry, layout) -> its layer (host_dnnl_op)
        self._tasks: queue.SimpleQueue[tuple[HostEvent, Callable[[], Any], list[Event]] | None] = queue.SimpleQueue()
        self._last: HostEvent | None = None
        self._order = threading.Lock()  # the last event and the queue change together
        self._exec = threading.Lock()  # held while a task runs, on the worker or inline
        self._worker = threading.Thread(target=self._work, name=f"devicelayer-{info.id}", daemon=True)
        self._worker.start()
        self._round_trip: float | None = None  # ``round_trip()``, once measured

    def run(self, fn: Callable[[], Any], waits: list[Event], what: str, inline: bool = False) -> HostEvent:
        """Queue ``fn`` on the worker after ``waits``; its exception fails the event.

        ``inline``: ``fn`` is short; where the device is idle, every wait complete and a Ctrl-C cannot land
        inside it (``_may_inline``), it runs now on the calling thread, which saves two thread switches (on a
        small VM, 100-250 us a call).  The order holds: a task queued meanwhile runs once ``fn`` has returned.
        """
        event = HostEvent(f"{what} on {self.id}", self)
        if inline and self._may_inline(waits) and self._exec.acquire(blocking=False):
            try:
                with self._order:
                    idle = self._nothing_queued()
                    if idle:
                        self._last = event
                if idle:
                    self._call(event, fn)
                    return event
            finally:
                self._exec.release()
        with self._order:
            self._last = event
            self._tasks.put((event, fn, waits))
        return event

    @staticmethod
    def _may_inline(waits: list[Event]) -> bool:
        """Every wait complete and successful, and the calling thread one whose Ctrl-C waits for devicelayer's
        protected work (or one no Ctrl-C reaches), other than the dispatcher of deferred submissions."""
        for w in waits:
            if not w._done or w._error is not None:
                return False
        if threading.current_thread() is threading.main_thread():
            return interrupts.installed()  # (a handler of the program's own would interrupt the work half-way)
        return not dispatcher.running_here()

    def _call(self, event: HostEvent, fn: Callable[[], Any]) -> None:
        """Run ``fn`` and complete ``event`` with its outcome (under ``_exec``)."""
        try:
            _protected_call(fn)
        except BaseException as exc:
            err = LaunchError(f"{event.label}: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            event._finish(err)
        else:
            event._finish()

    def _work(self) -> None:
        while True:
            task = event = fn = waits = failed = w = None  # hold nothing of a finished task while idle
            task = self._tasks.get()
            if task is None:
                return
            event, fn, waits = task
            failed = next((w for w in waits if w.done and w.error is not None), None)
            if failed is None:
                for w in waits:  # native waits are earlier tasks: already done, unless from another host device
                    if not w._done:
                        w._block(None)
                failed = next((w for w in waits if w.error is not None), None)
            if failed is not None:
                event._finish(dependency_error(failed, event.label))
                continue
            with self._exec:
                self._call(event, fn)

    def _build(self, source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, Signature | None]:
        if callable(source):
            fn = source
        else:
            text = source.decode() if isinstance(source, (bytes, bytearray)) else source
            namespace: dict[str, Any] = {"np": np, "numpy": np}
            try:
                exec(compile(text, f"<devicelayer kernel {entry}>", "exec", dont_inherit=True), namespace)
            except Exception as exc:
                raise CompileError(f"{self.id}: kernel source does not compile",
                                   f"{type(exc).__name__}: {exc}") from exc
            fn = namespace.get(entry)
            if not callable(fn):
                raise CompileError(f"{self.id}: source defines no function {entry!r}")
        try:
            sig = _host_signature(fn)
        except (TypeError, ValueError) as exc:
            raise CompileError(f"{self.id}: cannot read the parameters of {entry!r}: {exc}") from exc
        params = inspect.signature(fn).parameters
        geometry = {k for k in ("global_size", "local_size") if k in params}
        return (fn, geometry), sig

    def vendor_op(self, name: str) -> Any:
        """oneDNN for float32 convolutions, pools, batch and layer normalization, channel shuffles, large transposes,
        slices (NumPy copies in the plan's channels-last layout),
        additions, subtractions, products and quotients, chains of elementwise steps, concatenation, activations and other elementwise functions
        (``eltwise``), softmax, matrix products, attention, LSTM and GRU layers where it is installed; NumPy for the
        rest."""
        if host_dnnl.library() is None:
            return None
        # (they build on this module's HostVendor)
        from . import conv as host_conv, dnnl_ops as host_dnnl_ops, eltwise as host_eltwise, gemm as host_gemm

        if name in host_eltwise.STANDALONE:
            return host_eltwise.OnednnEltwise(self, name)
        if name in ("softmax", "log_softmax"):
            from .softmax import OnednnSoftmax

            return OnednnSoftmax(self, name, f"oneDNN {host_dnnl.version()}")
        if name == "layer_normalization":
            from .layernorm import OnednnLayerNorm

            return OnednnLayerNorm(self, name, f"oneDNN {host_dnnl.version()}")
        if name in ("add", "sub", "mul", "div"):
            from .binary import OnednnBinary

            return OnednnBinary(self, name, f"oneDNN {host_dnnl.version()}")
        if name == "fused_elementwise":
            from .fused import OnednnFused

            return OnednnFused(self, name, f"oneDNN {host_dnnl.version()}")
        if name == "slice":
            from .slice_layout import LayoutSlice

            return LayoutSlice(self, name, "NumPy")
        if name == "transpose":
            from .transpose import OnednnTranspose

            return OnednnTranspose(self, name, f"oneDNN {host_dnnl.version()}")
        if name == "attention":
            from .attention import OnednnAttention

            return OnednnAttention(self, name, f"oneDNN {host_dnnl.version()}")
        if name in ("lstm", "gru"):
            from .rnn import OnednnRecurrent

            return OnednnRecurrent(self, name)

        kinds = {"conv": host_conv.OnednnConv, "gemm": host_gemm.OnednnGemm, "matmul": host_gemm.OnednnGemm,
                 "max_pool": host_dnnl_ops.OnednnPool, "average_pool": host_dnnl_ops.OnednnPool,
                 "global_average_pool": host_dnnl_ops.OnednnPool, "global_max_pool": host_dnnl_ops.OnednnPool,
                 "batch_normalization": host_dnnl_ops.OnednnNorm, "concat": host_dnnl_ops.OnednnConcat,
                 "channel_shuffle": host_dnnl_ops.OnednnShuffle}
        kind = kinds.get(name)
        if kind is None:
            return None
        if kind is host_gemm.OnednnGemm:
            return kind(self, name, f"oneDNN {host_dnnl.version()}")
        return kind(self, name)

    def _launch(self, program: Program, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...] | None, waits: list[Event]) -> Event:
        call, quiet = self._bind(program, args, global_size, local_size)
        return self.run(quietly(call) if quiet else call, waits, f"launch {program.entry}")

    def _build_recording(self, items: list[Any]) -> Stretch:
        """Each item bound to its arrays once: a replay is one task calling them in order (``Stretch``)."""
        bound: list[tuple[str, Callable[[], Any], bool, bool]] = []
        for item in items:
            if item.kind == "launch":
                call, quiet = self._bind(item.program, item.args, item.global_size, item.local_size)
                bound.append((item.label, call, quiet, uses_team(call, False)))
            elif item.kind == "copy":
                d, s = self.pool._bytes(item.dst), self.pool._bytes(item.src)
                bound.append((item.label, functools.partial(np.copyto, d, s), True, False))
            elif item.kind == "call" and isinstance(item.fn, HostVendor):
                call = item.fn.bind(*item.call_args)
                bound.append((item.label, call, True, uses_team(call, True)))
            else:
                raise LaunchError(f"{self.id}: {item.label} has no host form")
        lib = host_dnnl.library()
        marked = any(host_runner.native(call) is not None for _, call, _, _ in bound)
        return Stretch(bound, host_omp.section(lib), host_runner.library(lib) if marked else None)

    def _replay_recording(self, native: Stretch, waits: list[Event]) -> Event:
        if native.deciding and self._idle():  # (a form is changed between runs only)
            native.decide(self.round_trip)
        return self.run(native, waits, f"replay of {len(native)} item(s)", inline=native.short)

    def _idle(self) -> bool:
        with self._order:
            return self._nothing_queued()

    def _nothing_queued(self) -> bool:
        """No task queued and the last one done (under ``_order``)."""
        return self._tasks.empty() and (self._last is None or self._last._done)

    def round_trip(self) -> float:
        """Seconds from handing the worker a task to seeing it done, for a task that does nothing (the fastest
        of five, measured once): what a short stretch saves by running on the submitting thread."""
        if self._round_trip is None:
            took = []
            for _ in range(5):
                t0 = time.perf_counter()
                self.run(_nothing, [], "round trip").wait()
                took.append(time.perf_counter() - t0)
            self._round_trip = min(took)
        return self._round_trip

    def _bind(self, program: Program, args: list[Any], global_size: tuple[int, ...],
              local_size: tuple[int, ...] | None) -> tuple[Callable[[], Any], bool]:
        """The kernel call with its arguments as NumPy arrays, and whether it ignores floating-point errors.

        A kernel function with a ``bind_launch`` attribute is called through it: ``fn.bind_launch(*args)`` (with
        the launch sizes where it takes them) returns the call, so that what a call would compute from its
        arguments every time (views, shapes, which implementation) is computed once per launch or recording.
        One with ``ignores_fp_errors`` set is called with NumPy's floating-point errors ignored.
        """
        fn, geometry = program.handle
        sig = program.signature or ()
        values = []
        for i, a in enumerate(args):
            if isinstance(a, Buffer):
                view = self.pool._bytes(a)
                dtype = sig[i].dtype if i < len(sig) and sig[i].dtype is not None else a.dtype
                values.append(view.view(dtype) if dtype is not None and a.nbytes % dtype.itemsize == 0 else view)
            else:
                values.append(a)
        kwargs = {}
        if "global_size" in geometry:
            kwargs["global_size"] = global_size
        if "local_size" in geometry:
            kwargs["local_size"] = local_size
        quiet = bool(getattr(fn, "ignores_fp_errors", False))
        binder = getattr(fn, "bind_launch", None)
        if callable(binder):
            return binder(*values, **kwargs), quiet
        return (lambda: fn(*values, **kwargs)), quiet

    def _synchronize(self) -> None:
        last = self._last
        if last is not None:
            last._signal().wait()

    def _close(self) -> None:
        self._tasks.put(None)


def _onednn_extras() -> dict[str, Any]:
    """``conv``: what runs float32 convolutions (oneDNN where installed); ``onednn_threads``: its OpenMP team;
    ``host_runner``: whether a plan's oneDNN calls run in batches through the host runner (and why not)."""
    v = host_dnnl.version()
    used = "float32 conv, pools, batch normalization, channel shuffle, concat, gemm, matmul; NumPy for the rest"
    lib = host_dnnl.library()
    threads = host_omp.describe(lib)
    extras = {"conv": f"oneDNN {v} ({used})" if v else "NumPy (im2col + BLAS)",
              **({"onednn_threads": threads} if threads else {})}
    if lib is not None:
        runner = host_runner.library(lib)
        extras["host_runner"] = (f"oneDNN calls in native batches (built by {host_runner.compiler()})"
                                 if runner is not None else f"off: {host_runner.unavailable()}")
    return extras


class HostBackend(Backend):
    """The machine's CPU through NumPy; always available."""

    name = "host"
    priority = 0
    fork_safe = True  # a forked child gets a new device with a worker thread of its own

    def __init__(self) -> None:
        name, vendor = _cpu_name()
        total = meminfo("MemTotal")
        big = 2**31 - 1
        info = DeviceInfo(
            id="host", backend="host", index=0, name=name, vendor=vendor, device_type="cpu",
            driver_version=f"numpy {np.__version__}", api_version=f"python {platform.python_version()}",
            kernel_language="python", memory_total=total, max_allocation=total,
            compute_units=os.cpu_count() or 1, max_work_group_size=big, max_work_item_sizes=(big, big, big),
            max_work_groups=(big, big, big),
            subgroup_size=None, local_memory=0, dtypes=_host_dtypes(),
            unified_memory=True, view_alignment=1, timestamps=True,
            extras={"machine": platform.machine(), **blas_extras(), **_onednn_extras()},
        )
        self._devices = [HostDevice(info)]

    def devices(self) -> list[HostDevice]:
        return self._devices
