"""OpenCL backend (PyOpenCL): every platform and device, native event wait lists, pinned host arrays."""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from devicelayer.device import Device, Program
from devicelayer.dlpack import DLDeviceType
from devicelayer.errors import BackendUnavailable, CompileError, DLPackError, InvalidArgument, LaunchError, OutOfMemory
from devicelayer.events import Event
from devicelayer.info import DeviceInfo
from devicelayer.memory import Buffer, MemoryPool
from devicelayer.probe import environment, folder_files, library_stamp, stamp
from devicelayer.registry import Backend
from devicelayer.signature import Arg, Signature, dtype_of

try:
    import pyopencl as cl
except ImportError as exc:  # the registry reports this as the reason
    raise BackendUnavailable(f"pyopencl is not installed ({exc}); pip install 'devicelayer[opencl]'") from exc

_COMPLETE = cl.command_execution_status.COMPLETE
CL_DEVICE_WARP_SIZE_NV = 0x4003
CL_DEVICE_WAVEFRONT_WIDTH_AMD = 0x4043
_ALLOC_FAILURES = ("MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY",
                   "INVALID_BUFFER_SIZE")


def _is_oom(exc: Exception) -> bool:
    return any(code in str(exc) for code in _ALLOC_FAILURES)


class OpenCLEvent(Event):
    """A ``cl.Event`` of one device's queue."""

    def __init__(self, label: str, device: "OpenCLDevice", native: "cl.Event", keepalive: Any = ()) -> None:
        super().__init__(label, device, keepalive)
        self.native = native

    def _poll(self) -> bool:
        return self.native.command_execution_status <= _COMPLETE

    def _block(self, timeout: float | None) -> bool:
        if timeout is None:
            self.native.wait()
            return True
        return self._poll_until(timeout)

    def _native_error(self) -> BaseException | None:
        status = self.native.command_execution_status
        if status < 0:
            return LaunchError(f"{self.label}: OpenCL reported execution status {status}")
        return None

    def _finish(self, error: BaseException | None = None) -> None:
        super()._finish(error)
        if self.device._transfers:  # the transfers done so far hold host arrays no longer
            self.device._drop_done_transfers()

    # No _watch override: completion is learnt by a waiter thread blocking in clWaitForEvents, not through
    # clSetEventCallback, whose driver-thread callbacks crashed NVIDIA's OpenCL under garbage collection.


class OpenCLPool(MemoryPool):
    """``cl.Buffer`` allocations; transfers are non-blocking ``enqueue_copy`` calls."""

    reads_host_when_enqueued = True  # a non-blocking write's host data must be final when it is enqueued

    @property
    def pinned_host_arrays(self) -> bool:
        """Mapped ALLOC_HOST_PTR memory is what a GPU's DMA reads; a CPU device's memory is host memory anyway."""
        return self.device.info.device_type != "cpu"

    def _allocate(self, nbytes: int) -> "cl.Buffer":
        try:
            return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as exc:
            if _is_oom(exc):
                raise OutOfMemory(f"{self.device.id}: could not allocate {nbytes} bytes: {exc}") from exc
            raise

    def _release(self, handle: "cl.Buffer", nbytes: int) -> None:
        # No explicit handle.release(): sub-buffers (views used as kernel arguments) and pyopencl's own
        # references may outlive this call, and some drivers (NVIDIA's) crash when a parent released by
        # hand is touched through them.  Dropping the last reference releases it in order.
        del handle

    def _enqueue(self, label: str, waits: list[Event], fn: Any) -> OpenCLEvent:
        # native waits are events of this device's one in-order queue: its order already implies them
        dev: OpenCLDevice = self.device  # type: ignore[assignment]
        try:
            native = fn(dev.queue, None)
        except cl.Error as exc:
            if _is_oom(exc):
                raise OutOfMemory(f"{label} on {dev.id}: {exc}") from exc
            raise LaunchError(f"{label} on {dev.id}: {exc}") from exc
        if isinstance(native, cl.NannyEvent):
            dev._hold_until_done(native)
        return OpenCLEvent(f"{label} on {dev.id}", dev, native)

    def _upload(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        return self._enqueue("upload", waits, lambda q, w: cl.enqueue_copy(
            q, buffer.handle, data, dst_offset=buffer.offset, is_blocking=False, wait_for=w))

    def _download(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        return self._enqueue("download", waits, lambda q, w: cl.enqueue_copy(
            q, data, buffer.handle, src_offset=buffer.offset, is_blocking=False, wait_for=w))

    def _copy(self, dst: Buffer, src: Buffer, waits: list[Event]) -> Event:
        return self._enqueue("copy", waits, lambda q, w: cl.enqueue_copy(
            q, dst.handle, src.handle, byte_count=src.nbytes, src_offset=src.offset, dst_offset=dst.offset,
            wait_for=w))

    # DLPack: kDLOpenCL, addressed as DLPack says, by the cl_mem handle and a byte offset; another library's
    # cl_mem is wrapped where it belongs to this device's context (the only one its queue can use)
    def dlpack_device(self) -> tuple[int, int]:
        return (DLDeviceType.kDLOpenCL, self.device.info.index)

    def dlpack_address(self, buffer: Buffer) -> tuple[int, int]:
        return int(buffer.handle.int_ptr), buffer.offset

    def wrap_foreign(self, data: int, byte_offset: int, nbytes: int, owner: Any) -> tuple["cl.Buffer", int]:
        dev: OpenCLDevice = self.device  # type: ignore[assignment]
        try:
            mem = cl.Buffer.from_int_ptr(data, retain=True)
            context = mem.get_info(cl.mem_info.CONTEXT)
            size = int(mem.get_info(cl.mem_info.SIZE))
        except cl.Error as exc:
            raise DLPackError(f"{dev.id}: the DLPack data is not a usable cl_mem ({exc})") from None
        if context.int_ptr != dev.context.int_ptr:
            raise DLPackError(f"{dev.id}: the cl_mem belongs to another OpenCL context, which this device's queue "
                              "cannot use; copy it through the host")
        if byte_offset + nbytes > size:
            raise DLPackError(f"{dev.id}: the DLPack tensor reaches byte {byte_offset + nbytes} of a {size}-byte cl_mem")
        return mem, byte_offset

    def _host_array(self, shape: Any, dtype: Any) -> np.ndarray:
        """A host array in pinned (page-locked) memory, mapped from an ALLOC_HOST_PTR buffer."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape))
        dev: OpenCLDevice = self.device  # type: ignore[assignment]
        try:
            buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                            max(1, count * dt.itemsize))
            array, _ = cl.enqueue_map_buffer(dev.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                             (count,), dt, is_blocking=True)
        except cl.Error:
            return np.empty(shape, dt)
        return array.reshape(shape)


def _signature(kernel: "cl.Kernel") -> Signature | None:
    """Argument kinds and types from the kernel's arg info (built with -cl-kernel-arg-info)."""
    args = []
    try:
        for i in range(kernel.num_args):
            space = kernel.get_arg_info(i, cl.kernel_arg_info.ADDRESS_QUALIFIER)
            type_name = kernel.get_arg_info(i, cl.kernel_arg_info.TYPE_NAME).rstrip("\0").strip()
            name = kernel.get_arg_info(i, cl.kernel_arg_info.NAME).rstrip("\0") or f"#{i}"
            if space in (cl.kernel_arg_address_qualifier.GLOBAL, cl.kernel_arg_address_qualifier.CONSTANT):
                args.append(Arg(name, "buffer", dtype_of(type_name.replace("*", "").strip())))
            elif space == cl.kernel_arg_address_qualifier.LOCAL:
                raise InvalidArgument(f"kernel argument {name!r} is __local; declare local memory inside the kernel")
            else:
                dt = dtype_of(type_name)
                args.append(Arg(name, "scalar", dt) if dt is not None else Arg(name, "any"))
    except cl.Error:
        return None
    return tuple(args)


class OpenCLDevice(Device):
    """One OpenCL device with its own context and in-order queue."""

    def __init__(self, info: DeviceInfo, cl_device: "cl.Device") -> None:
        super().__init__(info)
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        props = cl.command_queue_properties.PROFILING_ENABLE if os.environ.get("DEVICELAYER_PROFILE") else 0
        self.queue = cl.CommandQueue(self.context, cl_device, properties=props)
        self.pool = OpenCLPool(self)
        # NVIDIA's OpenCL enqueued a plan's launches on views of one arena at 3.2x the time of the same launches on
        # whole buffers (EfficientNet-B0 b1, 5.9 -> 1.9 ms a replay on the H200, 2026-11-30)
        self.pool.whole_buffers = "nvidia" in (cl_device.vendor or "").lower()
        self._sub_lock = threading.Lock()
        # PyOpenCL's event of a transfer to or from host memory waits for the transfer when it is released: the
        # device holds each until it is done, so that dropping an event of work the program gave up on (behind
        # a kernel that never ends) does not block the thread that drops it
        self._transfers: collections.deque[cl.NannyEvent] = collections.deque()
        self._transfers_lock = threading.Lock()
        self._rounded_division = bool(int(self.cl_device.single_fp_config)
                                      & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)

    def _is_native(self, event: Event) -> bool:
        return type(event) is OpenCLEvent and event.device is self

    def _hold_until_done(self, native: "cl.NannyEvent") -> None:
        """Hold a transfer's event until it completes."""
        self._drop_done_transfers()
        with self._transfers_lock:
            self._transfers.append(native)

    def _drop_done_transfers(self) -> None:
        """Let go of the transfers' events that completed (the in-order queue completes them in turn)."""
        done = []
        with self._transfers_lock:
            held = self._transfers
            while held and held[0].command_execution_status <= _COMPLETE:
                done.append(held.popleft())
        del done  # (outside the lock: a host array may go with them)

    def _has_pending_work(self) -> bool:
        if super()._has_pending_work():
            return True
        self._drop_done_transfers()
        return bool(self._transfers)

    def _build(self, source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, Signature | None]:
        if not isinstance(source, str):
            source = bytes(source).decode() if isinstance(source, (bytes, bytearray, memoryview)) else None
            if source is None:
                raise InvalidArgument(f"compile: {self.id} takes OpenCL C source text")
        low = cl._cl._Program(self.context, source)
        base = ["-cl-kernel-arg-info"]
        if self._rounded_division:  # IEEE division, as every other backend divides (OpenCL allows 2.5 ulp)
            base.append("-cl-fp32-correctly-rounded-divide-sqrt")
        try:
            low._build(" ".join([*base, *options]).encode(), [self.cl_device])
        except cl.Error as exc:
            try:
                log = low.get_build_info(self.cl_device, cl.program_build_info.LOG).strip()
            except cl.Error:
                log = ""
            raise CompileError(f"{self.id}: OpenCL build of {entry!r} failed ({exc})", log) from None
        program = cl.Program(low)
        names = set(program.get_info(cl.program_info.KERNEL_NAMES).split(";"))
        if entry not in names:
            raise CompileError(f"{self.id}: the program has no kernel {entry!r} (it has {sorted(n for n in names if n)})")
        kernel = getattr(program, entry)
        return (program, kernel), _signature(kernel)

    def _mem(self, buffer: Buffer) -> "cl.Buffer":
        if buffer.offset == 0:  # (a view from the start: its kernels read and write within its bytes)
            return buffer.handle
        key = (buffer.offset, buffer.nbytes)
        cache = buffer.root._cache
        sub = cache.get(key)
        if sub is None:
            with self._sub_lock:
                sub = buffer.handle.get_sub_region(buffer.offset, buffer.nbytes)
            cache[key] = sub
        return sub

    def _launch(self, program: Program, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...] | None, waits: list[Event]) -> Event:
        kernel = program.handle[1]
        values = [self._mem(a) if isinstance(a, Buffer) else a for a in args]
        with program.lock:  # set_args + enqueue must not interleave between threads
            try:
                kernel.set_args(*values)
                # waits are events of this in-order queue: queue order implies them
                native = cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
            except cl.Error as exc:
                raise LaunchError(f"launch {program.entry} on {self.id}: {exc}") from exc
        return OpenCLEvent(program.label, self, native)

    def _build_recording(self, items: list[Any]) -> list[Any]:
        """Each launch gets a kernel object of its own with its arguments set once; a replay only enqueues."""
        native = []
        for item in items:
            if item.kind != "launch":
                native.append(item)
                continue
            try:
                kernel = cl.Kernel(item.program.handle[0], item.program.entry)
                kernel.set_args(*[self._mem(a) if isinstance(a, Buffer) else a for a in item.args])
            except cl.Error as exc:
                raise LaunchError(f"{item.label} on {self.id}: {exc}") from exc
            native.append((kernel, item.global_size, item.local_size, item.label, item.program))
        return native

    def _replay_recording(self, native: list[Any], waits: list[Event]) -> Event:
        event: Event | None = None
        queue, enqueue = self.queue, cl.enqueue_nd_range_kernel
        last = None
        for entry in native:
            if type(entry) is tuple:
                try:  # waits are events of this in-order queue: queue order implies them
                    last = (enqueue(queue, entry[0], entry[1], entry[2]), entry)
                except cl.Error as exc:
                    raise LaunchError(f"{entry[3]} on {self.id}: {exc}") from exc
                event = None
            else:
                event = super()._replay_recording([entry], waits)
                last = None
        if last is not None:
            return OpenCLEvent(last[1][3], self, last[0], last[1][4])
        return event if event is not None else super()._replay_recording([], waits)

    def _synchronize(self) -> None:
        self.queue.finish()
        self._drop_done_transfers()

    def _close(self) -> None:
        self.queue.finish()
        self._programs.clear()
        self._transfers.clear()


def _info(index: int, dev: "cl.Device", platform: "cl.Platform") -> DeviceInfo:
    ext = set(dev.extensions.split())
    dtypes = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32"}
    if "cl_khr_fp16" in ext:
        dtypes.add("float16")
    try:
        if dev.double_fp_config:
            dtypes.add("float64")
    except cl.Error:
        pass
    subgroup = None
    for attr in (CL_DEVICE_WARP_SIZE_NV, CL_DEVICE_WAVEFRONT_WIDTH_AMD):
        try:
            subgroup = int(dev.get_info(attr))
            break
        except (cl.Error, ValueError, TypeError):
            continue
    if subgroup is None:
        try:
            sizes = dev.sub_group_sizes_intel
            subgroup = int(max(sizes)) if sizes else None
        except (cl.Error, AttributeError):
            pass
    try:
        unified = bool(dev.host_unified_memory)
    except cl.Error:
        unified = dev.type & cl.device_type.CPU != 0
    index_max = 2 ** int(dev.address_bits) - 1  # size_t of the device
    # PoCL counts a launch's work-groups in 32 bits, and the work-group size it picks may be 1: beyond 2**32 - 1
    # work items it runs a few groups only (wrong results), or aborts the process on an assertion
    items_max = min(index_max, 2**32 - 1) if platform.name.strip() == "Portable Computing Language" else index_max
    kind = ("gpu" if dev.type & cl.device_type.GPU else "cpu" if dev.type & cl.device_type.CPU
            else "accelerator" if dev.type & cl.device_type.ACCELERATOR else "other")
    return DeviceInfo(
        id=f"opencl:{index}", backend="opencl", index=index, name=dev.name.strip(), vendor=dev.vendor.strip(),
        device_type=kind, driver_version=dev.driver_version.strip(), api_version=dev.version.strip(),
        kernel_language="opencl-c", memory_total=int(dev.global_mem_size),
        max_allocation=int(dev.max_mem_alloc_size), compute_units=int(dev.max_compute_units),
        max_work_group_size=int(dev.max_work_group_size),
        max_work_item_sizes=tuple(int(s) for s in dev.max_work_item_sizes),
        subgroup_size=subgroup, local_memory=int(dev.local_mem_size), dtypes=frozenset(dtypes),
        unified_memory=unified, view_alignment=max(1, int(dev.mem_base_addr_align) // 8), timestamps=True,
        # OpenCL limits no work-group count, only the size_t a work item's index is
        max_work_groups=(index_max,) * len(dev.max_work_item_sizes), max_global_items=items_max,
        extras={"platform": platform.name.strip(), "platform_version": platform.version.strip(),
                "extensions": len(ext)},
    )


#: where ICD loaders (ocl-icd, Khronos') find their vendor files, and the settings that change what they load
_VENDOR_FOLDERS = ("/etc/OpenCL/vendors",)
_LOADER_SETTINGS = ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH", "OCL_ICD_FILENAMES", "OCL_ICD_PLATFORM_SORT",
                    "OCL_ICD_DEFAULT_PLATFORM", "LD_LIBRARY_PATH")


def _icd_library(icd: Path) -> str:
    """The library an ``.icd`` file names (its first line), as text whatever bytes it holds."""
    try:
        text = icd.read_bytes()[:4096].decode("utf-8", "replace").replace("\0", "")
    except OSError:
        return ""
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


class OpenCLBackend(Backend):
    """Every device of every OpenCL platform; ids are stable (platforms ordered by name)."""

    name = "opencl"
    priority = 20

    @classmethod
    def driver_fingerprint(cls) -> list[str]:
        """The ICD loader (PyOpenCL's), every vendor ``.icd`` file it may read and the library each names."""
        found = [stamp(cl._cl.__file__), *environment(_LOADER_SETTINGS, ("POCL_",))]
        folders = list(_VENDOR_FOLDERS)
        for setting in ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"):
            value = os.environ.get(setting, "")
            folders += [v for v in value.split(os.pathsep) if v]
        for entry in folders:
            found.append(stamp(entry))  # (a folder's time changes as files come and go)
            for icd in folder_files(entry, ".icd") if os.path.isdir(entry) else [Path(entry)]:
                found.append(stamp(icd))
                library = _icd_library(icd)
                if library:
                    found.append(library_stamp(library))
        for library in os.environ.get("OCL_ICD_FILENAMES", "").split(os.pathsep):
            if library:
                found.append(library_stamp(library))
        return found

    def __init__(self) -> None:
        try:
            platforms = cl.get_platforms()
        except cl.Error as exc:
            raise BackendUnavailable(f"no OpenCL platform found by the ICD loader ({exc})") from exc
        self._devices: list[OpenCLDevice] = []
        self._broken: list[tuple[str, str]] = []
        platforms = sorted(platforms, key=lambda p: (p.name, p.vendor, p.version))
        for platform in platforms:
            try:
                found = platform.get_devices()
            except cl.Error as exc:
                self._broken.append((platform.name, f"cannot list devices: {exc}"))
                continue
            for dev in found:
                index = len(self._devices) + len(self._broken)
                try:
                    self._devices.append(OpenCLDevice(_info(len(self._devices), dev, platform), dev))
                except cl.Error as exc:
                    self._broken.append((f"{platform.name}/{dev.name}", str(exc)))
                del index
        if not self._devices and not self._broken:
            raise BackendUnavailable("the OpenCL platforms have no devices")

    def devices(self) -> list[OpenCLDevice]:
        return self._devices

    def unavailable_devices(self) -> list[tuple[str, str]]:
        return self._broken
