"""Vulkan backend (the ``vulkan`` package): sub-allocated memory, GLSL/SPIR-V compute pipelines, one timeline per device.

Every device has one queue and one timeline semaphore.  Each operation takes the next timeline value and
waits on the previous one, so a device runs its work in submission order like a CUDA stream, and any event
of the device (a value of its timeline) is a native wait.  Host-side steps (the memcpy of an upload into
mapped memory, of a download out of it) run in order on a per-device worker thread that waits for the
previous value, copies, and signals its own value from the host; later GPU submits simply wait on it
(timeline wait-before-signal).  Hot paths call the raw cffi functions (``vk.lib``) with structs allocated
once: the package's Python wrappers cost microseconds per call.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import hashlib
import heapq
import itertools
import json
import logging
import os
import queue
import struct
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from devicelayer.device import Device, Program
from devicelayer.diskcache import write as write_cache
from devicelayer.dlpack import DLDeviceType
from devicelayer.errors import (BackendUnavailable, CompileError, DeviceLayerError, InvalidArgument, LaunchError,
                                OutOfMemory)
from devicelayer.events import Event
from devicelayer.info import DeviceInfo
from devicelayer.memory import Buffer, MemoryPool
from devicelayer import lifecycle
from devicelayer.probe import environment, folder_files, library_stamp, stamp
from devicelayer.reclaim import on_drop
from devicelayer.registry import Backend
from devicelayer.signature import Signature

try:
    import vulkan as vk
except OSError as exc:  # the package dlopens libvulkan.so.1 at import time
    raise BackendUnavailable(f"the Vulkan loader (libvulkan) could not be loaded: {exc}") from exc
except Exception as exc:  # the package missing, or cffi broken
    raise BackendUnavailable(f"the 'vulkan' package is unavailable ({type(exc).__name__}: {exc}); "
                             "pip install 'devicelayer[vulkan]'") from exc

from . import matrix
from .memory import Allocation, Block, Heap
from .spirv import cache_dir, compile_glsl, declared_kernels, is_spirv, reflect_spirv

log = logging.getLogger("devicelayer.vulkan")
ffi, lib = vk.ffi, vk.lib

U64_MAX = 0xFFFFFFFFFFFFFFFF
BLOCK_SIZE = 64 << 20
STAGING_CHUNK = 64 << 20  # each chunk hand-off between host and GPU costs ~5 ms on NVIDIA: few, large chunks
#: a wait on a GPU polls the timeline this long before it blocks: NVIDIA's vkWaitSemaphores returned about 10 ms after
#: the value was reached in 15-40% of an exported BERT's 1.5 ms runs on the H200 (p90 11.5 ms, median 1.7 ms)
WAIT_POLL_S = 0.002
_VENDORS = {0x1002: "AMD", 0x1010: "ImgTec", 0x10DE: "NVIDIA", 0x13B5: "ARM", 0x5143: "Qualcomm", 0x8086: "Intel",
            0x10005: "Mesa", 0x106B: "Apple", 0x1AE0: "Google"}
_TYPES = {0: "other", 1: "gpu", 2: "gpu", 3: "gpu", 4: "cpu"}
_TYPE_NAMES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_MEM_FLAGS = [(1, "DEVICE_LOCAL"), (2, "HOST_VISIBLE"), (4, "HOST_COHERENT"), (8, "HOST_CACHED"),
              (16, "LAZILY_ALLOCATED"), (32, "PROTECTED"), (64, "DEVICE_COHERENT_AMD"), (128, "DEVICE_UNCACHED_AMD")]
_RESULTS: dict[int, str] = {}


def _result_name(code: int) -> str:
    if not _RESULTS:
        for n in dir(vk):
            if n.startswith(("VK_ERROR_", "VK_SUCCESS", "VK_NOT_READY", "VK_TIMEOUT", "VK_INCOMPLETE")):
                v = getattr(vk, n)
                if isinstance(v, int):
                    _RESULTS.setdefault(v, n)
    return _RESULTS.get(code, str(code))


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _make_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


def _cstr(chars) -> str:
    return ffi.string(chars).decode("utf-8", "replace")


# -- instance ----------------------------------------------------------------------------------------------------
class _Instance:
    """The VkInstance; with ``DEVICELAYER_VULKAN_VALIDATION=1`` the Khronos validation layer and a debug messenger."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []
        self.validation = os.environ.get("DEVICELAYER_VULKAN_VALIDATION", "") not in ("", "0")
        try:
            loader = lib.vkEnumerateInstanceVersion
            pv = ffi.new("uint32_t*")
            loader(pv)
            loader_version = pv[0]
        except AttributeError:  # a 1.0 loader
            loader_version = _make_version(1, 0)
        self.api_version = min(_make_version(1, 3), loader_version)
        if self.api_version < _make_version(1, 2):
            raise BackendUnavailable(f"the Vulkan loader is version {_version(loader_version)}; "
                                     "devicelayer needs 1.2 (timeline semaphores)")
        layers, exts = [], []
        if self.validation:
            if "VK_LAYER_KHRONOS_validation" in self._names(lib.vkEnumerateInstanceLayerProperties, "VkLayerProperties",
                                                            "layerName"):
                layers.append("VK_LAYER_KHRONOS_validation")
            else:
                self.messages.append(("warning", "validation requested, but VK_LAYER_KHRONOS_validation is not installed"))
            if "VK_EXT_debug_utils" in self._names(lambda n, a: lib.vkEnumerateInstanceExtensionProperties(ffi.NULL, n, a),
                                                   "VkExtensionProperties", "extensionName"):
                exts.append("VK_EXT_debug_utils")
        keep = [ffi.new("char[]", s.encode()) for s in layers + exts]
        app_name = ffi.new("char[]", b"devicelayer")
        app = ffi.new("VkApplicationInfo*", {"sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                             "pApplicationName": app_name, "applicationVersion": 1,
                                             "pEngineName": app_name, "engineVersion": 1,
                                             "apiVersion": self.api_version})
        # the arrays must outlive the call: a cdata created inside the initializer would be freed at once
        layer_arr = ffi.new("char*[]", keep[:len(layers)]) if layers else ffi.NULL
        ext_arr = ffi.new("char*[]", keep[len(layers):]) if exts else ffi.NULL
        ci = ffi.new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, "pApplicationInfo": app,
            "enabledLayerCount": len(layers), "ppEnabledLayerNames": layer_arr,
            "enabledExtensionCount": len(exts), "ppEnabledExtensionNames": ext_arr})
        pinst = ffi.new("VkInstance*")
        r = lib.vkCreateInstance(ci, ffi.NULL, pinst)
        if r:
            raise BackendUnavailable(f"vkCreateInstance failed: {_result_name(r)} (no Vulkan driver installed?)")
        self.handle = pinst[0]
        self._messenger = None
        if "VK_EXT_debug_utils" in exts:
            self._install_messenger()

    @staticmethod
    def _names(fn, struct_name: str, field: str) -> set[str]:
        n = ffi.new("uint32_t*")
        if fn(n, ffi.NULL) != 0:
            return set()
        arr = ffi.new(f"{struct_name}[]", n[0])
        fn(n, arr)
        return {_cstr(getattr(arr[i], field)) for i in range(n[0])}

    def _install_messenger(self) -> None:
        severities = {1: "verbose", 16: "info", 256: "warning", 4096: "error"}
        messages = self.messages

        def callback(severity, types, data, user):
            try:
                text = ffi.string(data.pMessage).decode("utf-8", "replace")
            except Exception as exc:  # never raise into the driver
                text = f"<undecodable message: {exc}>"
            level = severities.get(severity, str(severity))
            messages.append((level, text))
            (log.error if level == "error" else log.warning)("vulkan validation %s: %s", level, text)
            return 0

        ci = vk.VkDebugUtilsMessengerCreateInfoEXT(
            messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            pfnUserCallback=callback)
        create = vk.vkGetInstanceProcAddr(self.handle, "vkCreateDebugUtilsMessengerEXT")
        self._destroy_messenger = vk.vkGetInstanceProcAddr(self.handle, "vkDestroyDebugUtilsMessengerEXT")
        self._messenger = create(self.handle, ci, None)
        self._callback = callback  # the package keeps only a module-global reference
        path = os.environ.get("DEVICELAYER_VULKAN_VALIDATION_LOG")
        atexit.register(self._report, path)

    def _report(self, path: str | None) -> None:
        counts = collections.Counter(level for level, _ in self.messages)
        text = [f"devicelayer vulkan validation: {len(self.messages)} message(s) {dict(counts)}"]
        seen = collections.Counter(t for _, t in self.messages)
        text += [f"  [{n}x] {t}" for t, n in seen.most_common()]
        if path:
            with open(path, "w") as fh:
                fh.write("\n".join(text) + "\n")
        elif self.messages:
            import sys
            print("\n".join(text[:50]), file=sys.stderr)

    def physical_devices(self) -> list:
        n = ffi.new("uint32_t*")
        r = lib.vkEnumeratePhysicalDevices(self.handle, n, ffi.NULL)
        if r < 0:
            raise BackendUnavailable(f"vkEnumeratePhysicalDevices failed: {_result_name(r)}")
        arr = ffi.new("VkPhysicalDevice[]", n[0])
        lib.vkEnumeratePhysicalDevices(self.handle, n, arr)
        return [arr[i] for i in range(n[0])]


# -- physical device query -----------------------------------------------------------------------------------------
class _Physical:
    """Everything read from one VkPhysicalDevice; ``reason`` is set when it cannot be used."""

    def __init__(self, index: int, pd, instance_api: int, instance=None) -> None:
        self.index, self.handle, self.reason = index, pd, ""
        self.matrix_units: tuple[tuple[str, str, int, int, int], ...] = ()
        props = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(pd, props)
        self.name = _cstr(props.deviceName)
        self.vendor_id, self.device_id = props.vendorID, props.deviceID
        self.type_code = props.deviceType
        self.api_raw = props.apiVersion
        self.driver_version = props.driverVersion
        L = props.limits
        self.limits = dict(
            maxComputeWorkGroupSize=tuple(L.maxComputeWorkGroupSize),
            maxComputeWorkGroupCount=tuple(L.maxComputeWorkGroupCount),
            maxComputeWorkGroupInvocations=L.maxComputeWorkGroupInvocations,
            maxComputeSharedMemorySize=L.maxComputeSharedMemorySize,
            maxPushConstantsSize=L.maxPushConstantsSize,
            minStorageBufferOffsetAlignment=L.minStorageBufferOffsetAlignment,
            maxStorageBufferRange=L.maxStorageBufferRange,
            maxPerStageDescriptorStorageBuffers=L.maxPerStageDescriptorStorageBuffers,
            nonCoherentAtomSize=L.nonCoherentAtomSize,
            timestampPeriod=L.timestampPeriod,
            timestampComputeAndGraphics=bool(L.timestampComputeAndGraphics))
        self.extensions = self._extensions(pd)
        eff = min(self.api_raw, instance_api)
        self.subgroup_size, self.uuid, self.max_alloc = None, b"", 1 << 62
        self.driver_name = self.driver_info = ""
        self.timeline_max_diff = U64_MAX
        self.sm_count = 0
        self.features: dict[str, bool] = {}
        if eff < _make_version(1, 2):
            self.reason = f"Vulkan {_version(eff)}: 1.2 is needed for timeline semaphores"
        else:
            self._query_12(pd)
            if instance is not None:
                self.matrix_units = matrix.units(instance, pd, self.extensions, self.features)
            if not self.features.get("timelineSemaphore"):
                self.reason = "no timelineSemaphore feature (a Vulkan 1.2 feature devicelayer needs)"
        self._query_memory(pd)
        self._query_queues(pd)

    @staticmethod
    def _extensions(pd) -> set[str]:
        cnt = ffi.new("uint32_t*")
        lib.vkEnumerateDeviceExtensionProperties(pd, ffi.NULL, cnt, ffi.NULL)
        arr = ffi.new("VkExtensionProperties[]", cnt[0])
        lib.vkEnumerateDeviceExtensionProperties(pd, ffi.NULL, cnt, arr)
        return {_cstr(arr[i].extensionName) for i in range(cnt[0])}

    def _query_12(self, pd) -> None:
        sub = ffi.new("VkPhysicalDeviceSubgroupProperties*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES})
        idp = ffi.new("VkPhysicalDeviceIDProperties*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES, "pNext": sub})
        m3 = ffi.new("VkPhysicalDeviceMaintenance3Properties*",
                     {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, "pNext": idp})
        drv = ffi.new("VkPhysicalDeviceDriverProperties*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, "pNext": m3})
        tl = ffi.new("VkPhysicalDeviceTimelineSemaphoreProperties*",
                     {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_PROPERTIES, "pNext": drv})
        head, sm = tl, None
        if "VK_NV_shader_sm_builtins" in self.extensions:
            sm = ffi.new("VkPhysicalDeviceShaderSMBuiltinsPropertiesNV*",
                         {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV,
                          "pNext": tl})
            head = sm
        p2 = ffi.new("VkPhysicalDeviceProperties2*",
                     {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, "pNext": head})
        lib.vkGetPhysicalDeviceProperties2(pd, p2)
        if sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT:
            self.subgroup_size = int(sub.subgroupSize)
        self.uuid = bytes(ffi.buffer(idp.deviceUUID))
        self.max_alloc = int(m3.maxMemoryAllocationSize)
        self.driver_name, self.driver_info = _cstr(drv.driverName), _cstr(drv.driverInfo)
        self.timeline_max_diff = int(tl.maxTimelineSemaphoreValueDifference)
        if sm is not None:
            self.sm_count = int(sm.shaderSMCount)
        f12 = ffi.new("VkPhysicalDeviceVulkan12Features*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES})
        f11 = ffi.new("VkPhysicalDeviceVulkan11Features*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, "pNext": f12})
        cm = matrix.feature_struct(f11) if matrix.EXTENSION in self.extensions else None
        f2 = ffi.new("VkPhysicalDeviceFeatures2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                                    "pNext": cm if cm is not None else f11})
        lib.vkGetPhysicalDeviceFeatures2(pd, f2)
        F = f2.features
        self.features = {k: bool(v) for k, v in dict(
            shaderFloat64=F.shaderFloat64, shaderInt64=F.shaderInt64, shaderInt16=F.shaderInt16,
            storageBuffer16BitAccess=f11.storageBuffer16BitAccess, shaderFloat16=f12.shaderFloat16,
            shaderInt8=f12.shaderInt8, storageBuffer8BitAccess=f12.storageBuffer8BitAccess,
            timelineSemaphore=f12.timelineSemaphore, vulkanMemoryModel=f12.vulkanMemoryModel,
            cooperativeMatrix=cm is not None and cm.cooperativeMatrix).items()}

    def _query_memory(self, pd) -> None:
        self.budget = "VK_EXT_memory_budget" in self.extensions
        mp = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(pd, mp)
        self.memory_heaps = [dict(index=i, size=int(mp.memoryHeaps[i].size), flags=int(mp.memoryHeaps[i].flags),
                                  device_local=bool(mp.memoryHeaps[i].flags & 1))
                             for i in range(mp.memoryHeapCount)]
        self.memory_types = [dict(index=i, heap=int(mp.memoryTypes[i].heapIndex),
                                  flags=int(mp.memoryTypes[i].propertyFlags),
                                  names=[n for b, n in _MEM_FLAGS if mp.memoryTypes[i].propertyFlags & b])
                             for i in range(mp.memoryTypeCount)]

    def _query_queues(self, pd) -> None:
        qc = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, qc, ffi.NULL)
        qf = ffi.new("VkQueueFamilyProperties[]", qc[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, qc, qf)
        best = -1
        for i in range(qc[0]):  # prefer a compute-only family (async compute on discrete GPUs)
            fl = qf[i].queueFlags
            if fl & vk.VK_QUEUE_COMPUTE_BIT and (best < 0 or (not fl & vk.VK_QUEUE_GRAPHICS_BIT
                                                              and qf[best].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT)):
                best = i
        self.queue_family = best
        self.timestamp_bits = int(qf[best].timestampValidBits) if best >= 0 else 0
        if best < 0 and not self.reason:
            self.reason = "no compute queue family"

    def heap_budget(self) -> list[tuple[int, int]] | None:
        """(budget, usage) per heap from VK_EXT_memory_budget, or None without it."""
        if not self.budget:
            return None
        b = ffi.new("VkPhysicalDeviceMemoryBudgetPropertiesEXT*",
                    {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT})
        mp2 = ffi.new("VkPhysicalDeviceMemoryProperties2*",
                      {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, "pNext": b})
        lib.vkGetPhysicalDeviceMemoryProperties2(self.handle, mp2)
        return [(int(b.heapBudget[i]), int(b.heapUsage[i])) for i in range(len(self.memory_heaps))]

    def memory_plan(self, force_staging: bool) -> dict[str, Any]:
        """Which memory type backs buffers, whether it is mapped, and the staging type otherwise."""
        DL, HV, HC, CACHED = 1, 2, 4, 8
        bad = 16 | 32 | 64 | 128
        types = [t for t in self.memory_types if not t["flags"] & bad]
        dl_heaps = [h for h in self.memory_heaps if h["device_local"]] or self.memory_heaps
        main = max(dl_heaps, key=lambda h: h["size"])["index"]
        on_main = [t for t in types if t["heap"] == main and t["flags"] & DL] or \
                  [t for t in types if t["heap"] == main] or types
        mapped = [t for t in on_main if t["flags"] & (HV | HC) == (HV | HC)]
        # mapped buffers when the device memory is host-visible: unified memory, or a BAR covering the heap
        # that is host-cached (reading uncached BAR memory from the CPU is very slow)
        usable = [t for t in mapped if t["flags"] & CACHED or _TYPES.get(self.type_code) == "cpu"
                  or self.type_code == 1]
        plan: dict[str, Any] = {"heap": main}
        if usable and not force_staging:
            plan.update(device_type=max(usable, key=lambda t: bool(t["flags"] & CACHED))["index"], mapped=True,
                        staging_type=None)
        else:
            plan.update(device_type=min(on_main, key=lambda t: bin(t["flags"]).count("1"))["index"], mapped=False)
            host = [t for t in types if t["flags"] & (HV | HC) == (HV | HC)]
            if not host:
                raise BackendUnavailable("no host-visible coherent memory type for staging")
            plan["staging_type"] = max(host, key=lambda t: (bool(t["flags"] & CACHED), not t["flags"] & DL))["index"]
        return plan

    def device_info(self, mapped: bool) -> DeviceInfo:
        L, F = self.limits, self.features
        dtypes = {"int32", "uint32", "float32"}
        if F.get("shaderInt8") and F.get("storageBuffer8BitAccess"):
            dtypes |= {"int8", "uint8", "bool"}  # bool tensors are bytes of 0 and 1
        if F.get("shaderInt16") and F.get("storageBuffer16BitAccess"):
            dtypes |= {"int16", "uint16"}
        if F.get("shaderFloat16") and F.get("storageBuffer16BitAccess"):
            dtypes.add("float16")
        if F.get("shaderFloat64"):
            dtypes.add("float64")
        if F.get("shaderInt64"):
            dtypes |= {"int64", "uint64"}
        heap = self.memory_plan(False)["heap"]
        total = self.memory_heaps[heap]["size"]
        kind = _TYPES.get(self.type_code, "other")
        units = self.sm_count or ((os.cpu_count() or 1) if kind == "cpu" else 1)
        return DeviceInfo(
            id=f"vulkan:{self.index}", backend="vulkan", index=self.index, name=self.name,
            vendor=_VENDORS.get(self.vendor_id, f"0x{self.vendor_id:04x}"), device_type=kind,
            driver_version=(f"{self.driver_name} {self.driver_info}".strip() or str(self.driver_version)),
            api_version=f"Vulkan {_version(self.api_raw)}", kernel_language="glsl",
            memory_total=total, max_allocation=min(self.max_alloc, L["maxStorageBufferRange"], total),
            compute_units=units, max_work_group_size=int(L["maxComputeWorkGroupInvocations"]),
            max_work_item_sizes=tuple(int(x) for x in L["maxComputeWorkGroupSize"]),
            subgroup_size=self.subgroup_size, local_memory=int(L["maxComputeSharedMemorySize"]),
            dtypes=frozenset(dtypes), unified_memory=mapped,
            max_work_groups=tuple(int(x) for x in L["maxComputeWorkGroupCount"]),
            view_alignment=int(L["minStorageBufferOffsetAlignment"]),
            timestamps=bool(L["timestampComputeAndGraphics"]) and self.timestamp_bits > 0,
            matrix_units=self.matrix_units,
            extras={"apiVersion": _version(self.api_raw), "deviceUUID": self.uuid.hex(),
                    "driverName": self.driver_name, "driverInfo": self.driver_info,
                    "driverVersionRaw": self.driver_version, "vendorID": self.vendor_id, "deviceID": self.device_id,
                    "vkDeviceType": _TYPE_NAMES.get(self.type_code, str(self.type_code)),
                    "memoryHeaps": [{"size": h["size"], "deviceLocal": h["device_local"]} for h in self.memory_heaps],
                    "memoryTypes": ["|".join(t["names"]) or "0" for t in self.memory_types],
                    "maxPushConstantsSize": L["maxPushConstantsSize"],
                    "maxStorageBufferRange": L["maxStorageBufferRange"],
                    "maxMemoryAllocationSize": self.max_alloc,
                    "timestampPeriod_ns": L["timestampPeriod"], "queueFamily": self.queue_family,
                    "memoryBudgetExtension": self.budget, "mappedBuffers": mapped})


# -- events --------------------------------------------------------------------------------------------------------
class VulkanEvent(Event):
    """A value of its device's timeline semaphore."""

    __slots__ = ("value",)

    def __init__(self, label: str, device: "VulkanDevice", value: int) -> None:
        super().__init__(label, device)
        self.value = value

    def _poll(self) -> bool:
        dev = self.device
        return self.value <= dev._completed or dev.completed() >= self.value or dev._lost is not None

    def _block(self, timeout: float | None) -> bool:
        return self.device.wait_value(self.value, timeout)

    def _native_error(self) -> BaseException | None:
        dev = self.device
        err = dev._failed.get(self.value)
        if err is not None:
            return err
        if dev._lost is not None and dev._completed < self.value:
            return LaunchError(f"{self.label}: {dev._lost}")
        return None

    def _watch(self) -> None:
        self.device._waiter.watch(self)


class _Waiter:
    """One thread per device that waits for the smallest watched timeline value and finishes every event reached."""

    def __init__(self, dev: "VulkanDevice") -> None:
        self.dev = weakref.proxy(dev)
        self.heap: list[tuple[int, int, VulkanEvent]] = []
        self.cond = threading.Condition()
        self.seq = itertools.count()
        self.stop = False
        self.thread = threading.Thread(target=self._run, name=f"devicelayer-{dev.id}-waiter", daemon=True)
        self.thread.start()

    def watch(self, ev: VulkanEvent) -> None:
        with self.cond:
            heapq.heappush(self.heap, (ev.value, next(self.seq), ev))
            self.cond.notify()

    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.heap and not self.stop:
                        self.cond.wait()
                    if self.stop and not self.heap:
                        return
                    target = self.heap[0][0]
                try:
                    self.dev.wait_value(target, 0.05)  # re-evaluated often, so a newly watched smaller value is seen
                except Exception:
                    pass
                done = self.dev._completed
                lost = self.dev._lost is not None
                ready = []
                with self.cond:
                    while self.heap and (self.heap[0][0] <= done or lost or self.stop):
                        ready.append(heapq.heappop(self.heap)[2])
                for ev in ready:
                    ev._finish(ev._native_error())
        except ReferenceError:
            return


# -- programs ------------------------------------------------------------------------------------------------------
class _Kernel:
    """A shader module with its layouts and one pipeline per local size."""

    def __init__(self, dev: "VulkanDevice", spirv: bytes, refl, name: str) -> None:
        self.spirv, self.refl, self.name = spirv, refl, name
        self.default_local: dict[int, tuple[int, int, int]] = {}  # dimensions -> work-group size without local_size
        if any(b.set != 0 for b in refl.bindings):
            raise CompileError(f"{dev.id}: only descriptor set 0 is supported (bindings use sets "
                               f"{sorted({b.set for b in refl.bindings})})")
        if any(b.kind != "storage" for b in refl.bindings):
            raise CompileError(f"{dev.id}: only storage buffers are supported as bindings (no uniform buffers)")
        self.bnums = tuple(b.binding for b in refl.bindings)
        self.nbuf = len(self.bnums)
        fmt, pos, counts = "<", 0, []
        for pc in refl.push_constants:
            if pc.offset < pos:
                raise CompileError(f"{dev.id}: overlapping push-constant members")
            fmt += "x" * (pc.offset - pos) + pc.fmt
            pos = pc.offset + pc.size
            counts.append(pc.count)
        fmt += "x" * (refl.push_constant_size - pos)
        self.pc_struct = struct.Struct(fmt)
        self.pc_counts = counts
        self.pc_flat = all(c == 1 for c in counts)
        self.pc_size = refl.push_constant_size
        limit = dev.phys.limits["maxPushConstantsSize"]
        if self.pc_size > limit:
            raise InvalidArgument(f"{dev.id}: the kernel's push constants take {self.pc_size} bytes, more than the "
                                  f"device's maxPushConstantsSize ({limit} bytes); pass large data in a buffer")
        self.module = None
        self.layout = None
        self.pipelines: dict[tuple[int, int, int], Any] = {}
        self.geometry: dict[Any, tuple[Any, tuple[int, int, int]]] = {}
        self.last_use = 0

    def pack(self, scalars: list) -> bytes:
        if len(scalars) != len(self.pc_counts):
            raise InvalidArgument(f"launch {self.name}: the kernel has {len(self.pc_counts)} push-constant "
                                  f"member(s), got {len(scalars)} scalar argument(s)")
        try:
            if self.pc_flat:
                return self.pc_struct.pack(*scalars)
            flat: list = []
            for v, c in zip(scalars, self.pc_counts):
                flat.extend(np.asarray(v).reshape(-1).tolist() if c > 1 else (v,))
            return self.pc_struct.pack(*flat)
        except (struct.error, TypeError, ValueError) as exc:
            raise InvalidArgument(f"launch {self.name}: cannot pack scalars {scalars!r} as push constants "
                                  f"({exc})") from None


class _DescriptorSet:
    __slots__ = ("set", "bnums", "last", "cbs", "blocks")

    def __init__(self, dset, bnums, blocks) -> None:
        self.set, self.bnums, self.blocks = dset, bnums, blocks
        self.last = 0
        self.cbs: collections.OrderedDict = collections.OrderedDict()  # (pipeline, pc, groups) -> [cb, last value]


# -- memory pool ---------------------------------------------------------------------------------------------------
class _Recorded:
    """A recording's command buffer, the descriptor sets it binds, and the timeline value of its last replay."""

    def __init__(self, cb) -> None:
        self.cb = cb
        self.sets: list = []
        self.last = 0


class VulkanPool(MemoryPool):
    """Sub-allocated device memory; transfers are ordered on the device timeline and never block the caller."""

    device: "VulkanDevice"

    @property
    def pinned_host_arrays(self) -> bool:
        """Host-visible staging memory where the device's own memory is not mapped (one GPU copy, no memcpy)."""
        return not self.device.mapped

    @property
    def free_bytes(self) -> int:
        return self.device.free_memory()

    def _allocate(self, nbytes: int) -> Allocation:
        return self.device.allocate(nbytes)

    def _release(self, handle: Allocation, nbytes: int) -> None:
        self.device.release_allocation(handle)

    def _upload(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        return self.device.upload(buffer, data)

    def _download(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        return self.device.download(buffer, data)

    def _copy(self, dst: Buffer, src: Buffer, waits: list[Event]) -> Event:
        return self.device.copy(dst, src)

    def dlpack_device(self) -> tuple[int, int]:
        """kDLVulkan; no DLPack consumer can address a buffer of devicelayer's VkDevice, so it is exported only to
        the host (``dlpack_address`` refuses, saying how to copy; ``host_address`` gives mapped memory)."""
        return (DLDeviceType.kDLVulkan, self.device.info.index)

    def host_address(self, buffer: Buffer) -> int | None:
        """Where the device's memory is mapped (host-visible and coherent: unified devices), its host address."""
        if not self.device.mapped:
            return None
        buffer.check_alive("host_address")
        block, offset = self.device._where(buffer)
        return block.addr + offset if block.addr else None

    def _host_array(self, shape: Any, dtype: Any) -> np.ndarray:
        """Host-visible Vulkan memory as a NumPy array: transfers to and from it are one GPU copy, no memcpy."""
        dev = self.device
        if dev.mapped:
            return super()._host_array(shape, dtype)
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return dev.host_array(max(count * dt.itemsize, 1), dt)[:count].reshape(shape)


_CACHE_MARK = b"devicelayer-sha256:"  # before the checksum that ends a pipeline cache file


def pipeline_cache_body(data: bytes) -> bytes:
    """The driver's data in a pipeline cache file's bytes; b"" when the checksum that ends it does not match
    (a damaged file is never given to the driver)."""
    body, trailer = data[:-len(_CACHE_MARK) - 32], data[-len(_CACHE_MARK) - 32:]
    if not trailer.startswith(_CACHE_MARK) or hashlib.sha256(body).digest() != trailer[len(_CACHE_MARK):]:
        return b""
    return body


# -- device --------------------------------------------------------------------------------------------------------
class VulkanDevice(Device):
    """One Vulkan physical device: one compute queue, one timeline semaphore, sub-allocated memory."""

    pool: VulkanPool

    def __init__(self, phys: _Physical, instance: _Instance, force_staging: bool = False,
                 block_size: int = BLOCK_SIZE, pipeline_cache_dir: str | os.PathLike | None = None) -> None:
        plan = phys.memory_plan(force_staging)
        super().__init__(phys.device_info(plan["mapped"]))
        self.vk, self.ffi, self.lib = vk, ffi, lib
        self.phys, self.instance = phys, instance
        self.memory_types, self.memory_heaps = phys.memory_types, phys.memory_heaps
        self.stats: collections.Counter = collections.Counter()
        self._lock = threading.RLock()
        self._lost: str | None = None
        self._failed: dict[int, BaseException] = {}
        self.handle = None
        self._create_device()
        try:
            self._setup(plan, block_size, pipeline_cache_dir)
        except BaseException:
            self._destroy()
            raise
        self.pool = VulkanPool(self)
        #: seconds a wait polls the timeline before it blocks in vkWaitSemaphores (GPUs; CPU devices block at once)
        self.wait_poll_s = WAIT_POLL_S if self.info.device_type != "cpu" else 0.0

    # ---- setup ----------------------------------------------------------------------------------------------------
    def _create_device(self) -> None:
        F, phys = self.phys.features, self.phys
        f12 = ffi.new("VkPhysicalDeviceVulkan12Features*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, "timelineSemaphore": 1,
            "shaderFloat16": F.get("shaderFloat16", False), "shaderInt8": F.get("shaderInt8", False),
            "storageBuffer8BitAccess": F.get("storageBuffer8BitAccess", False),
            "vulkanMemoryModel": bool(phys.matrix_units)})  # (cooperative-matrix shaders declare it)
        cm = matrix.feature_struct(f12, enable=True) if phys.matrix_units else None
        f11 = ffi.new("VkPhysicalDeviceVulkan11Features*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, "pNext": cm if cm is not None else f12,
            "storageBuffer16BitAccess": F.get("storageBuffer16BitAccess", False)})
        f2 = ffi.new("VkPhysicalDeviceFeatures2*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, "pNext": f11,
            "features": {"shaderFloat64": F.get("shaderFloat64", False), "shaderInt64": F.get("shaderInt64", False),
                         "shaderInt16": F.get("shaderInt16", False)}})
        prio = ffi.new("float[]", [1.0])
        qci = ffi.new("VkDeviceQueueCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, "queueFamilyIndex": phys.queue_family,
            "queueCount": 1, "pQueuePriorities": prio})
        exts = [e for e in ("VK_EXT_memory_budget",) if e in phys.extensions]
        exts += [matrix.EXTENSION] if phys.matrix_units else []
        keep = [ffi.new("char[]", e.encode()) for e in exts]
        ext_arr = ffi.new("char*[]", keep) if exts else ffi.NULL
        dci = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": f2, "queueCreateInfoCount": 1,
            "pQueueCreateInfos": qci, "enabledExtensionCount": len(exts), "ppEnabledExtensionNames": ext_arr})
        pdev = ffi.new("VkDevice*")
        r = lib.vkCreateDevice(phys.handle, dci, ffi.NULL, pdev)
        if r:
            raise BackendUnavailable(f"vkCreateDevice failed on {phys.name}: {_result_name(r)}")
        self.handle = pdev[0]
        self.budget_enabled = "VK_EXT_memory_budget" in exts
        pq = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, phys.queue_family, 0, pq)
        self.queue = pq[0]

    def _setup(self, plan: dict, block_size: int, pipeline_cache_dir) -> None:
        dev = self.handle
        # timeline semaphore
        stci = ffi.new("VkSemaphoreTypeCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                                      "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE,
                                                      "initialValue": 0})
        sci = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": stci})
        psem = ffi.new("VkSemaphore*")
        self.check(lib.vkCreateSemaphore(dev, sci, ffi.NULL, psem), "vkCreateSemaphore")
        self.semaphore = psem[0]
        self._last = 0          # last timeline value handed out
        self._completed = 0     # cached counter value
        self._max_ahead = max(1, min(self.phys.timeline_max_diff // 2, 1 << 30))
        self._retire_q: collections.deque = collections.deque()
        self._u64 = ffi.new("uint64_t*")
        self._sem_arr = ffi.new("VkSemaphore[1]", [self.semaphore])
        # the submit structs, mutated in place (always: wait on the previous value, signal the next)
        self._wait_stage = ffi.new("VkPipelineStageFlags[1]", [vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                                                | vk.VK_PIPELINE_STAGE_TRANSFER_BIT])
        self._wait_vals = ffi.new("uint64_t[1]")
        self._sig_vals = ffi.new("uint64_t[1]")
        self._cb_arr = ffi.new("VkCommandBuffer[1]")
        self._tsi = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO, "waitSemaphoreValueCount": 1,
            "pWaitSemaphoreValues": self._wait_vals, "signalSemaphoreValueCount": 1,
            "pSignalSemaphoreValues": self._sig_vals})
        self._submit_info = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": self._tsi, "waitSemaphoreCount": 1,
            "pWaitSemaphores": self._sem_arr, "pWaitDstStageMask": self._wait_stage, "commandBufferCount": 1,
            "pCommandBuffers": self._cb_arr, "signalSemaphoreCount": 1, "pSignalSemaphores": self._sem_arr})
        self._begin_once = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self._begin_multi = ffi.new("VkCommandBufferBeginInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT})
        self._ds_arr = ffi.new("VkDescriptorSet[1]")
        self._region = ffi.new("VkBufferCopy*")
        # device writes -> host reads at the end of every command buffer, so host steps can read mapped memory
        self._hostbar = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        self._stages = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        # between the items of a recording: earlier writes visible to later reads and writes
        self._itembar = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
            | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT})
        # command buffers: one pool, externally synchronised by the device lock
        cpci = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, "queueFamilyIndex": self.phys.queue_family})
        ppool = ffi.new("VkCommandPool*")
        self.check(lib.vkCreateCommandPool(dev, cpci, ffi.NULL, ppool), "vkCreateCommandPool")
        self.cmd_pool = ppool[0]
        self._free_cbs: list = []
        self._cb_alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self.cmd_pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 16})
        # descriptors, layouts, pipeline cache
        self._desc_pools: list[list] = []
        self._set_layouts: dict = {}
        self._pipe_layouts: dict = {}
        self._free_sets: dict = collections.defaultdict(list)
        self._ds_cache: collections.OrderedDict = collections.OrderedDict()
        self.ds_cache_size, self.cbs_per_set = 4096, 8
        self._modules: dict[bytes, Any] = {}
        self.pipeline_cache_path = None
        self.pipeline_cache = self._create_pipeline_cache(pipeline_cache_dir)
        # memory
        align = max(16, self.phys.limits["minStorageBufferOffsetAlignment"], self.phys.limits["nonCoherentAtomSize"])
        self.align = align
        self.mapped = plan["mapped"]
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        self.heap = Heap(self, plan["device_type"], usage, block_size, self.mapped, "device", align)
        self.staging = None
        self._host_ranges: dict[int, Allocation] = {}  # host arrays: start address -> staging allocation
        if not self.mapped:
            sh = Heap(self, plan["staging_type"], vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                      | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT, STAGING_CHUNK, True, "staging", align)
            self._staging_heap = sh
            self.staging = sh.new_block(STAGING_CHUNK, dedicated=True)
            self._staging_last = 0  # timeline value of the last step that used the staging block
            self.staging.alloc(STAGING_CHUNK)  # all of it taken: host arrays come from other blocks of the heap
        # threads: host steps in timeline order; completion of watched events
        self._steps: queue.SimpleQueue = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name=f"devicelayer-{self.id}-worker", daemon=True)
        self._worker.start()
        self._waiter = _Waiter(self)

    # ---- errors ----------------------------------------------------------------------------------------------------
    def check(self, r: int, what: str) -> None:
        """Raise the devicelayer error for a failed VkResult (success and positive codes pass)."""
        if r >= 0:
            return
        name = _result_name(r)
        if r in (-1, -2):
            raise OutOfMemory(f"{self.id}: {what}: {name}")
        if r == -4:
            self._lost = f"{what}: {name} (the device was lost)"
            self._waiter_kick()
        raise LaunchError(f"{self.id}: {what}: {name}")

    def _waiter_kick(self) -> None:
        w = getattr(self, "_waiter", None)
        if w is not None:
            with w.cond:
                w.cond.notify()

    # ---- timeline --------------------------------------------------------------------------------------------------
    def completed(self) -> int:
        u = ffi.new("uint64_t*")
        r = lib.vkGetSemaphoreCounterValue(self.handle, self.semaphore, u)
        if r:
            self.check(r, "vkGetSemaphoreCounterValue")
        v = u[0]
        if v > self._completed:
            self._completed = v
        return v

    def wait_value(self, value: int, timeout: float | None) -> bool:
        """Block until the timeline reaches ``value``; False on timeout."""
        if value <= self._completed:
            return True
        if self._lost is not None:
            return True
        if self.wait_poll_s > 0 and (timeout is None or timeout > 0):
            start = time.perf_counter()
            end = start + (self.wait_poll_s if timeout is None else min(self.wait_poll_s, timeout))
            while time.perf_counter() < end:
                if self.completed() >= value:
                    return True
            if timeout is not None:
                timeout = max(0.0, timeout - (time.perf_counter() - start))
        vals = ffi.new("uint64_t[1]", [value])
        wi = ffi.new("VkSemaphoreWaitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                             "semaphoreCount": 1, "pSemaphores": self._sem_arr, "pValues": vals})
        ns = U64_MAX if timeout is None else max(0, int(timeout * 1e9))
        r = lib.vkWaitSemaphores(self.handle, wi, ns)  # cffi releases the GIL
        if r == 2:  # VK_TIMEOUT
            return False
        if r:
            self.check(r, "vkWaitSemaphores")
        if value > self._completed:
            self._completed = value
        return True

    def _queue_submit(self, cb) -> int:
        """Submit ``cb`` waiting on the previous timeline value and signalling the next (device lock held)."""
        if self._lost is not None:
            raise LaunchError(f"{self.id}: {self._lost}")
        v = self._last + 1
        if v - self._completed > self._max_ahead:
            self._throttle(v)
        self._wait_vals[0] = self._last
        self._sig_vals[0] = v
        self._cb_arr[0] = cb
        r = lib.vkQueueSubmit(self.queue, 1, self._submit_info, ffi.NULL)
        if r:
            self.check(r, "vkQueueSubmit")
        self._last = v
        return v

    def _host_step(self, fn, label: str) -> int:
        """Take the next timeline value for ``fn``, run by the worker once the previous value is reached (lock held)."""
        if self._lost is not None:
            raise LaunchError(f"{self.id}: {self._lost}")
        v = self._last + 1
        if v - self._completed > self._max_ahead:
            self._throttle(v)
        self._last = v
        self._steps.put((v, fn, label))
        return v

    def _throttle(self, v: int) -> None:
        """Keep pending values within maxTimelineSemaphoreValueDifference of the counter (blocks, rarely)."""
        if v - self.completed() > self._max_ahead:
            self.wait_value(v - self._max_ahead, None)

    def _work(self) -> None:
        sig = ffi.new("VkSemaphoreSignalInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
                                                 "semaphore": self.semaphore})
        while True:
            step = fn = err = None  # hold nothing of a finished step (host arrays, buffers) while idle
            step = self._steps.get()
            if step is None:
                return
            v, fn, label = step
            try:
                while not self.wait_value(v - 1, 1.0):
                    pass
                if self._lost is not None:
                    continue
                if fn is not None:
                    fn()
            except BaseException as exc:  # the step fails its event; the timeline goes on
                err = LaunchError(f"{label} on {self.id}: {type(exc).__name__}: {exc}")
                err.__cause__ = exc
                self._failed[v] = err
            sig.value = v
            r = lib.vkSignalSemaphore(self.handle, sig)
            if r:
                self._lost = f"vkSignalSemaphore: {_result_name(r)}"
                self._waiter_kick()

    # ---- command buffers and retirement ----------------------------------------------------------------------------
    def _retire(self) -> None:
        done = self.completed()
        q = self._retire_q
        while q and q[0][0] <= done:
            q.popleft()[1]()

    def _after(self, value: int, fn) -> None:
        if value <= self._completed:
            fn()
        else:
            self._retire_q.append((value, fn))

    def _get_cb(self):
        if not self._free_cbs:
            self._retire()
        if not self._free_cbs:
            arr = ffi.new("VkCommandBuffer[16]")
            self.check(lib.vkAllocateCommandBuffers(self.handle, self._cb_alloc, arr), "vkAllocateCommandBuffers")
            self._free_cbs.extend(arr[i] for i in range(16))
            self.stats["command_buffers"] += 16
        cb = self._free_cbs.pop()
        lib.vkResetCommandBuffer(cb, 0)
        return cb

    def _recycle_cb(self, cb, value: int) -> None:
        self._after(value, lambda: self._free_cbs.append(cb))

    def _end_with_host_barrier(self, cb) -> None:
        lib.vkCmdPipelineBarrier(cb, self._stages, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, self._hostbar,
                                 0, ffi.NULL, 0, ffi.NULL)
        r = lib.vkEndCommandBuffer(cb)
        if r:
            self._free_cbs.append(cb)
            self.check(r, "vkEndCommandBuffer")

    def _one_shot(self, record) -> int:
        cb = self._get_cb()
        lib.vkBeginCommandBuffer(cb, self._begin_once)
        record(cb)
        self._end_with_host_barrier(cb)
        try:
            v = self._queue_submit(cb)
        except BaseException:
            self._free_cbs.append(cb)
            raise
        self._recycle_cb(cb, v)
        return v

    # ---- memory ----------------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Allocation:
        with self._lock:
            self._check_open()
            try:
                return self.heap.alloc(nbytes)
            except OutOfMemory:
                self._retire()
                self.heap.trim()
                return self.heap.alloc(nbytes)

    def release_allocation(self, a: Allocation) -> None:
        with self._lock:
            if self.handle is not None:
                self.heap.release(a)

    def forget_block(self, blk: Block) -> None:
        """Drop the descriptor sets (and their command buffers) that point into ``blk`` before it is destroyed."""
        for key in [k for k, e in self._ds_cache.items() if blk.id in e.blocks]:
            self._evict_set(self._ds_cache.pop(key), now=True)

    def free_memory(self) -> int:
        budget = self.phys.heap_budget() if self.budget_enabled else None
        h = self.heap.heap_index
        reusable = self.heap.reusable()  # space released inside blocks this device keeps
        if budget is not None:
            b, u = budget[h]
            return max(0, min(b - u + reusable, self.heap.heap_size))
        used = self.heap.allocated + (self._staging_heap.allocated if self.staging is not None
                                      and self._staging_heap.heap_index == h else 0)
        return max(0, self.heap.heap_size - used + reusable)

    @staticmethod
    def _where(buffer: Buffer) -> tuple[Block, int]:
        a = buffer.handle
        return a.block, a.offset + buffer.offset

    # ---- host arrays: staging-type memory handed to NumPy ----------------------------------------------------------
    def host_array(self, nbytes: int, dtype: np.dtype) -> np.ndarray:
        """A 1-D array of ``nbytes`` bytes in host-visible memory of this device (freed with its last view)."""
        with self._lock:
            self._check_open()
            a = self._staging_heap.alloc(nbytes)
            start = a.block.addr + a.offset
            self._host_ranges[start] = a
        raw = (ctypes.c_uint8 * nbytes).from_address(start)
        on_drop(raw, self._release_host, start)
        return np.frombuffer(raw, np.uint8).view(dtype)

    def _release_host(self, start: int) -> None:
        with self._lock:
            a = self._host_ranges.pop(start, None)
            if a is not None and self.handle is not None:
                self._after(self._last, lambda: self._staging_heap.release(a))

    def _host_range(self, data: np.ndarray, n: int):
        """(VkBuffer, offset) when ``data`` lies in one of this device's host arrays, else None (lock held)."""
        if not self._host_ranges:
            return None
        ptr = data.ctypes.data
        for start, a in self._host_ranges.items():
            if start <= ptr and ptr + n <= start + a.nbytes:
                return a.block.buffer, a.offset + (ptr - start)
        return None

    def upload(self, buffer: Buffer, data: np.ndarray) -> VulkanEvent:
        blk, off = self._where(buffer)
        n = buffer.nbytes
        label = f"upload {n} B to {self.id}"
        with self._lock:
            direct = None if self.mapped else self._host_range(data, n)
            if direct is not None:
                v = self._copy_cmd(direct[0], direct[1], blk.buffer, off, n)
            elif self.mapped:
                dst = blk.addr + off
                v = self._host_step(lambda: ctypes.memmove(dst, data.ctypes.data, n), label)
            elif n <= STAGING_CHUNK and self._staging_last <= self.completed():
                # the staging block is idle: fill it now, on this thread, and submit the copy (no host step
                # on the timeline, whose hand-off to the worker costs milliseconds on some drivers)
                ctypes.memmove(self.staging.addr, data.ctypes.data, n)
                v = self._staging_last = self._copy_cmd(self.staging.buffer, 0, blk.buffer, off, n)
            else:
                v = self._staged(n, lambda pos, m: self._host_step(
                    lambda: ctypes.memmove(self.staging.addr, data.ctypes.data + pos, m), label),
                    lambda pos, m: self._copy_cmd(self.staging.buffer, 0, blk.buffer, off + pos, m))
        return VulkanEvent(label, self, v)

    def download(self, buffer: Buffer, data: np.ndarray) -> VulkanEvent:
        blk, off = self._where(buffer)
        n = buffer.nbytes
        label = f"download {n} B from {self.id}"
        with self._lock:
            direct = None if self.mapped else self._host_range(data, n)
            if direct is not None:
                v = self._copy_cmd(blk.buffer, off, direct[0], direct[1], n)
            elif self.mapped:
                src = blk.addr + off
                v = self._host_step(lambda: ctypes.memmove(data.ctypes.data, src, n), label)
            else:
                v = self._staged(n, lambda pos, m: self._copy_cmd(blk.buffer, off + pos, self.staging.buffer, 0, m),
                                 lambda pos, m: self._host_step(
                                     lambda: ctypes.memmove(data.ctypes.data + pos, self.staging.addr, m), label))
        return VulkanEvent(label, self, v)

    def _staged(self, n: int, first, second) -> int:
        """Chunks through the staging block: ``first(pos, m)`` then ``second(pos, m)`` per chunk, all in order.

        Every step waits on the one before, so one staging block serves every chunk; a step that cannot be
        submitted after earlier ones were is replaced by a host no-op, so the timeline never has a hole.
        """
        v = 0
        started = False
        for pos in range(0, n, STAGING_CHUNK):
            m = min(STAGING_CHUNK, n - pos)
            try:
                first(pos, m)
                started = True
                v = self._staging_last = second(pos, m)
            except BaseException:
                if started:
                    self._host_step(None, "filler")
                raise
        return v

    def _copy_cmd(self, src, src_off: int, dst, dst_off: int, n: int) -> int:
        rg = self._region

        def record(cb):
            rg.srcOffset, rg.dstOffset, rg.size = src_off, dst_off, n
            lib.vkCmdCopyBuffer(cb, src, dst, 1, rg)
        return self._one_shot(record)

    def copy(self, dst: Buffer, src: Buffer) -> VulkanEvent:
        sblk, soff = self._where(src)
        dblk, doff = self._where(dst)
        with self._lock:
            v = self._copy_cmd(sblk.buffer, soff, dblk.buffer, doff, src.nbytes)
        return VulkanEvent(f"copy {src.nbytes} B on {self.id}", self, v)

    # ---- pipeline cache --------------------------------------------------------------------------------------------
    def _create_pipeline_cache(self, directory):
        phys = self.phys
        folder = os.fspath(directory) if directory is not None else os.fspath(cache_dir() / "vulkan")
        # lavapipe's pipelineCacheUUID is a literal "val-%s": key the file on the device UUID and driver version too
        key = hashlib.sha256(phys.uuid + struct.pack("<IIII", phys.vendor_id, phys.device_id, phys.driver_version,
                                                     phys.api_raw) + phys.name.encode()
                             + phys.driver_info.encode()).hexdigest()[:32]
        self.pipeline_cache_path = os.path.join(folder, f"pipelines-{key}.bin")
        try:
            with open(self.pipeline_cache_path, "rb") as fh:
                data = fh.read()
        except OSError:
            data = b""
        whole = len(data)
        data = pipeline_cache_body(data)
        if len(data) < 32 or struct.unpack_from("<II", data, 4) != (1, phys.vendor_id) or \
                struct.unpack_from("<I", data, 12)[0] != phys.device_id:
            data = b""
        self.pipeline_cache_loaded = whole if data else 0
        buf = ffi.new("char[]", data) if data else ffi.NULL
        ci = ffi.new("VkPipelineCacheCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                                    "initialDataSize": len(data), "pInitialData": buf})
        pc = ffi.new("VkPipelineCache*")
        r = lib.vkCreatePipelineCache(self.handle, ci, ffi.NULL, pc)
        if r and data:
            ci.initialDataSize, ci.pInitialData = 0, ffi.NULL
            self.pipeline_cache_loaded = 0
            r = lib.vkCreatePipelineCache(self.handle, ci, ffi.NULL, pc)
        self.check(r, "vkCreatePipelineCache")
        self._pipelines_new = 0
        return pc[0]

    def save_pipeline_cache(self) -> int:
        """Write the VkPipelineCache to its file (atomically); the bytes written."""
        with self._lock:
            if self.handle is None or not self.pipeline_cache_path:
                return 0
            n = ffi.new("size_t*")
            if lib.vkGetPipelineCacheData(self.handle, self.pipeline_cache, n, ffi.NULL) or n[0] == 0:
                return 0
            buf = ffi.new("char[]", n[0])
            if lib.vkGetPipelineCacheData(self.handle, self.pipeline_cache, n, buf) < 0:
                return 0
            data = bytes(ffi.buffer(buf, n[0]))
        if not write_cache(Path(self.pipeline_cache_path), data + _CACHE_MARK + hashlib.sha256(data).digest()):
            return 0
        self._pipelines_new = 0
        return len(data)

    # ---- compile ---------------------------------------------------------------------------------------------------
    def _build(self, source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, Signature | None]:
        if is_spirv(source):
            spirv = bytes(source)
            if options:
                raise InvalidArgument(f"compile: options {list(options)} cannot apply to SPIR-V")
            refl = reflect_spirv(spirv, entry)
        else:
            if isinstance(source, (bytes, bytearray, memoryview)):
                try:
                    source = bytes(source).decode()
                except UnicodeDecodeError:
                    raise InvalidArgument(f"compile: {self.id} takes GLSL text or SPIR-V bytes") from None
            if not isinstance(source, str):
                raise InvalidArgument(f"compile: {self.id} takes GLSL text or SPIR-V bytes")
            names = declared_kernels(source)
            if names and entry not in names and entry != "main":
                raise CompileError(f"{self.id}: the GLSL source declares kernel(s) {names} "
                                   f"(#pragma kernel), not {entry!r}")
            try:
                spirv = compile_glsl(source, options)
            except CompileError as exc:
                raise CompileError(f"{self.id}: compiling {entry!r}: {exc.args[0].splitlines()[0]}", exc.log) from None
            refl = reflect_spirv(spirv, "main")
        kernel = _Kernel(self, spirv, refl, entry)
        with self._lock:
            self._check_open()
            kernel.module = self._module(spirv)
            set_layout = self._set_layout(kernel.bnums)
            kernel.layout = self._pipeline_layout(kernel.bnums, set_layout, kernel.pc_size)
        return kernel, refl.signature()

    def _module(self, spirv: bytes):
        m = self._modules.get(spirv)
        if m is None:
            code = ffi.from_buffer(spirv)
            ci = ffi.new("VkShaderModuleCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                                       "codeSize": len(spirv), "pCode": ffi.cast("uint32_t*", code)})
            p = ffi.new("VkShaderModule*")
            self.check(lib.vkCreateShaderModule(self.handle, ci, ffi.NULL, p), "vkCreateShaderModule")
            m = self._modules[spirv] = [p[0], 0]
        m[1] += 1
        return m[0]

    def _set_layout(self, bnums):
        sl = self._set_layouts.get(bnums)
        if sl is None:
            arr = ffi.new("VkDescriptorSetLayoutBinding[]", [
                {"binding": b, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
                 "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for b in bnums] or 1)
            ci = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": len(bnums),
                "pBindings": arr if bnums else ffi.NULL})
            p = ffi.new("VkDescriptorSetLayout*")
            self.check(lib.vkCreateDescriptorSetLayout(self.handle, ci, ffi.NULL, p), "vkCreateDescriptorSetLayout")
            sl = self._set_layouts[bnums] = p[0]
        return sl

    def _pipeline_layout(self, bnums, set_layout, pc_size: int):
        key = (bnums, pc_size)
        pl = self._pipe_layouts.get(key)
        if pl is None:
            sls = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
            rng = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                                   "size": pc_size})
            ci = ffi.new("VkPipelineLayoutCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": sls,
                "pushConstantRangeCount": 1 if pc_size else 0, "pPushConstantRanges": rng if pc_size else ffi.NULL})
            p = ffi.new("VkPipelineLayout*")
            self.check(lib.vkCreatePipelineLayout(self.handle, ci, ffi.NULL, p), "vkCreatePipelineLayout")
            pl = self._pipe_layouts[key] = p[0]
        return pl

    def _pipeline(self, k: _Kernel, ls: tuple[int, int, int]):
        pipe = k.pipelines.get(ls)
        if pipe is not None:
            return pipe
        ids = [(sid, ls[d]) for d, sid in enumerate(k.refl.local_size_spec_ids) if sid is not None]
        entries = ffi.new("VkSpecializationMapEntry[]", [
            {"constantID": sid, "offset": 4 * i, "size": 4} for i, (sid, _) in enumerate(ids)] or 1)
        data = ffi.new("uint32_t[]", [v for _, v in ids] or 1)
        spec = ffi.new("VkSpecializationInfo*", {"mapEntryCount": len(ids), "pMapEntries": entries,
                                                 "dataSize": 4 * len(ids), "pData": data})
        name = ffi.new("char[]", k.refl.entry_point.encode())
        ci = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": k.module, "pName": name,
                      "pSpecializationInfo": spec if ids else ffi.NULL},
            "layout": k.layout})
        p = ffi.new("VkPipeline*")
        self.check(lib.vkCreateComputePipelines(self.handle, self.pipeline_cache, 1, ci, ffi.NULL, p),
                   "vkCreateComputePipelines")
        k.pipelines[ls] = p[0]
        self._pipelines_new += 1
        self.stats["pipelines"] += 1
        return p[0]

    def _release_program(self, program: Program) -> None:
        k: _Kernel = program.handle
        with self._lock:
            if self.handle is None:
                return
            pipes = set(k.pipelines.values())
            for e in self._ds_cache.values():
                for key in [key for key in e.cbs if key[0] in pipes]:
                    cb, v = e.cbs.pop(key)
                    self._recycle_cb(cb, v)
            pipelines, k.pipelines, k.geometry = list(k.pipelines.values()), {}, {}
            spirv = k.spirv

            def destroy():
                for p in pipelines:
                    lib.vkDestroyPipeline(self.handle, p, ffi.NULL)
                m = self._modules.get(spirv)
                if m is not None:
                    m[1] -= 1
                    if m[1] <= 0:
                        lib.vkDestroyShaderModule(self.handle, m[0], ffi.NULL)
                        del self._modules[spirv]
            self._after(k.last_use, destroy)

    # ---- descriptors -----------------------------------------------------------------------------------------------
    def _new_desc_pool(self) -> list:
        sizes = ffi.new("VkDescriptorPoolSize[1]", [{"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                     "descriptorCount": 256 * 8}])
        ci = ffi.new("VkDescriptorPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": 256,
            "poolSizeCount": 1, "pPoolSizes": sizes})
        p = ffi.new("VkDescriptorPool*")
        self.check(lib.vkCreateDescriptorPool(self.handle, ci, ffi.NULL, p), "vkCreateDescriptorPool")
        self._desc_pools.append([p[0], 0, 0])
        self.stats["descriptor_pools"] += 1
        return self._desc_pools[-1]

    def _alloc_set(self, bnums):
        free = self._free_sets[bnums]
        if free:
            return free.pop()
        nd = max(1, len(bnums))
        pool = self._desc_pools[-1] if self._desc_pools else self._new_desc_pool()
        if pool[1] + 1 > 256 or pool[2] + nd > 256 * 8:
            pool = self._new_desc_pool()
        layouts = ffi.new("VkDescriptorSetLayout[1]", [self._set_layout(bnums)])
        ai = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": pool[0],
            "descriptorSetCount": 1, "pSetLayouts": layouts})
        out = ffi.new("VkDescriptorSet*")
        r = lib.vkAllocateDescriptorSets(self.handle, ai, out)
        if r in (-1000069000, -12):  # OUT_OF_POOL_MEMORY / FRAGMENTED_POOL: the pools grow
            pool = self._new_desc_pool()
            ai.descriptorPool = pool[0]
            r = lib.vkAllocateDescriptorSets(self.handle, ai, out)
        self.check(r, "vkAllocateDescriptorSets")
        pool[1] += 1
        pool[2] += nd
        return out[0]

    def _evict_set(self, e: _DescriptorSet, now: bool = False) -> None:
        v = max([e.last] + [x[1] for x in e.cbs.values()])
        cbs = [x[0] for x in e.cbs.values()]
        e.cbs.clear()
        free = self._free_sets[e.bnums]

        def back():
            self._free_cbs.extend(cbs)
            free.append(e.set)
        if now and v > self._completed:
            self.wait_value(v, None)
        self._after(v, back)

    def _descriptor_set(self, k: _Kernel, key, bufs) -> _DescriptorSet:
        dset = self._write_set(k, bufs)
        e = _DescriptorSet(dset, k.bnums, {b.handle.block.id for b in bufs})
        self._ds_cache[key] = e
        if len(self._ds_cache) > self.ds_cache_size:
            self._evict_set(self._ds_cache.popitem(last=False)[1])
        return e

    def _write_set(self, k: _Kernel, bufs):
        """A descriptor set of ``k``'s layout pointing at ``bufs`` (device lock held)."""
        dset = self._alloc_set(k.bnums)
        n = len(bufs)
        if n:
            infos = ffi.new("VkDescriptorBufferInfo[]", [
                {"buffer": b.handle.block.buffer, "offset": b.handle.offset + b.offset, "range": b.nbytes}
                for b in bufs])
            writes = ffi.new("VkWriteDescriptorSet[]", [
                {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": dset, "dstBinding": k.bnums[i],
                 "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                 "pBufferInfo": infos + i} for i in range(n)])
            lib.vkUpdateDescriptorSets(self.handle, n, writes, 0, ffi.NULL)
        return dset

    # ---- launch ----------------------------------------------------------------------------------------------------
    def default_local_size(self, ndim: int) -> tuple[int, int, int]:
        inv = self.info.max_work_group_size
        sizes = self.info.max_work_item_sizes
        want = (64, 1, 1) if ndim <= 1 else (8, 8, 1) if ndim == 2 else (4, 4, 4)
        out = [max(1, min(w, s)) for w, s in zip(want, sizes)]
        while out[0] * out[1] * out[2] > inv:
            i = out.index(max(out))
            out[i] = max(1, out[i] // 2)
        return tuple(out)  # type: ignore[return-value]

    def _local(self, k: _Kernel, ndim: int, lsize: tuple[int, ...] | None) -> tuple[int, int, int]:
        """The work-group size of a launch: ``lsize`` where the shader lets the launch choose, else its own."""
        refl = k.refl
        spec, fixed = refl.local_size_spec_ids, refl.local_size
        if lsize is None:
            if all(s is None for s in spec):
                return fixed
            d = self.default_local_size(ndim)
            return tuple(d[i] if spec[i] is not None else fixed[i] for i in range(3))  # type: ignore[return-value]
        ls = tuple(lsize) + (1,) * (3 - len(lsize))
        if any(spec[i] is None and ls[i] != fixed[i] for i in range(3)):
            raise InvalidArgument(f"launch {k.name} on {self.id}: local_size {tuple(lsize)} differs from the "
                                  f"shader's fixed local size {fixed} (declare local_size_x_id etc. to choose it "
                                  "at launch)")
        return ls  # type: ignore[return-value]

    def _default_local_size(self, program: Program, global_size: tuple[int, ...]) -> tuple[int, ...]:
        k: _Kernel = program.handle
        ls = k.default_local.get(len(global_size))
        if ls is None:
            ls = k.default_local[len(global_size)] = self._local(k, len(global_size), None)
        return ls

    def _geometry(self, k: _Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None):
        """Pipeline and work-group counts of a launch (its sizes were checked against the limits: ``Device``)."""
        ls = self._local(k, len(gsize), lsize)
        g = tuple(gsize) + (1,) * (3 - len(gsize))
        groups = tuple((g[i] + ls[i] - 1) // ls[i] for i in range(3))
        with self._lock:
            pipe = self._pipeline(k, ls)
        geo = (pipe, groups)
        if len(k.geometry) < 256:
            k.geometry[(gsize, lsize)] = geo
        return geo

    def _launch(self, program: Program, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...] | None, waits: list[Event]) -> Event:
        k: _Kernel = program.handle
        geo = k.geometry.get((global_size, local_size)) or self._geometry(k, global_size, local_size)
        bufs, scalars = [], []
        for a in args:
            (bufs if type(a) is Buffer else scalars).append(a)
        if len(bufs) != k.nbuf:
            raise InvalidArgument(f"launch {k.name} on {self.id}: the kernel binds {k.nbuf} buffer(s), "
                                  f"got {len(bufs)}")
        pc = k.pack(scalars) if k.pc_counts else b""
        key = (k.bnums, *[(b.handle.block.id, b.handle.offset + b.offset, b.nbytes) for b in bufs])
        pipe, groups = geo
        with self._lock:
            if self.handle is None:
                raise InvalidArgument(f"{self.id}: device was closed")
            e = self._ds_cache.get(key)
            if e is None:
                e = self._descriptor_set(k, key, bufs)
            else:
                self._ds_cache.move_to_end(key)
            ckey = (pipe, pc, groups)
            ent = e.cbs.get(ckey)
            if ent is None:
                ent = self._record_launch(e, k, pipe, pc, groups, ckey)
            v = self._queue_submit(ent[0])
            ent[1] = e.last = k.last_use = v
            if len(self._retire_q) > 64:
                self._retire()
        return VulkanEvent(program.label, self, v)

    # ---- recordings: one command buffer, barriers between its items ----------------------------------------------
    def _build_recording(self, items: list[Any]) -> Any:
        if any(item.kind == "call" for item in items):
            return super()._build_recording(items)
        launches = []
        for item in items:  # geometry (and pipelines) first: it takes the device lock itself
            if item.kind == "launch":
                k = item.program.handle
                geo = k.geometry.get((item.global_size, item.local_size)) or \
                    self._geometry(k, item.global_size, item.local_size)
                launches.append((k, geo))
            else:
                launches.append(None)
        with self._lock:
            self._check_open()
            cb = self._get_cb()
            native = _Recorded(cb)
            try:
                lib.vkBeginCommandBuffer(cb, self._begin_multi)
                for i, (item, launch) in enumerate(zip(items, launches)):
                    if i:
                        lib.vkCmdPipelineBarrier(cb, self._stages, self._stages, 0, 1, self._itembar,
                                                 0, ffi.NULL, 0, ffi.NULL)
                    if launch is None:
                        (sblk, soff), (dblk, doff) = self._where(item.src), self._where(item.dst)
                        rg = self._region
                        rg.srcOffset, rg.dstOffset, rg.size = soff, doff, item.src.nbytes
                        lib.vkCmdCopyBuffer(cb, sblk.buffer, dblk.buffer, 1, rg)
                        continue
                    k, (pipe, groups) = launch
                    bufs, scalars = [], []
                    for a in item.args:
                        (bufs if type(a) is Buffer else scalars).append(a)
                    if len(bufs) != k.nbuf:
                        raise InvalidArgument(f"{item.label}: the kernel binds {k.nbuf} buffer(s), got {len(bufs)}")
                    dset = self._write_set(k, bufs)
                    native.sets.append((k.bnums, dset))
                    lib.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
                    self._ds_arr[0] = dset
                    lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1,
                                                self._ds_arr, 0, ffi.NULL)
                    if k.pc_size:
                        lib.vkCmdPushConstants(cb, k.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, k.pc_size,
                                               k.pack(scalars))
                    lib.vkCmdDispatch(cb, *groups)
                self._end_with_host_barrier(cb)
            except BaseException:
                self._give_back(native)
                raise
            self.stats["recorded"] += 1
        return native

    def _replay_recording(self, native: Any, waits: list[Event]) -> Event:
        if type(native) is not _Recorded:
            return super()._replay_recording(native, waits)
        with self._lock:
            if self.handle is None:
                raise InvalidArgument(f"{self.id}: device was closed")
            native.last = v = self._queue_submit(native.cb)
            if len(self._retire_q) > 64:
                self._retire()
        return VulkanEvent(f"replay on {self.id}", self, v)

    def _release_recording(self, native: Any) -> None:
        if type(native) is _Recorded and self.handle is not None:
            with self._lock:
                if self.handle is not None:
                    self._after(native.last, lambda: self._give_back(native))

    def _give_back(self, native: "_Recorded") -> None:
        """Return a recording's command buffer and descriptor sets to the free lists (its work has finished)."""
        self._free_cbs.append(native.cb)
        for bnums, dset in native.sets:
            self._free_sets[bnums].append(dset)
        native.sets = []

    def _record_launch(self, e: _DescriptorSet, k: _Kernel, pipe, pc: bytes, groups, ckey) -> list:
        cb = self._get_cb()
        lib.vkBeginCommandBuffer(cb, self._begin_multi)
        lib.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
        self._ds_arr[0] = e.set
        lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, self._ds_arr, 0, ffi.NULL)
        if k.pc_size:
            lib.vkCmdPushConstants(cb, k.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, k.pc_size, pc)
        lib.vkCmdDispatch(cb, *groups)
        self._end_with_host_barrier(cb)
        ent = e.cbs[ckey] = [cb, 0]
        self.stats["recorded"] += 1
        if len(e.cbs) > self.cbs_per_set:
            old, ov = e.cbs.popitem(last=False)[1]
            self._recycle_cb(old, ov)
        return ent

    # ---- lifetime --------------------------------------------------------------------------------------------------
    def _is_native(self, event: Event) -> bool:
        return type(event) is VulkanEvent and event.device is self

    def _synchronize(self) -> None:
        with self._lock:
            last = self._last
        self.wait_value(last, None)
        if self._lost is not None:
            raise LaunchError(f"{self.id}: {self._lost}")
        with self._lock:
            if self.handle is not None:
                self._retire()  # all work is done: command buffers and descriptor sets go back to their pools now

    def _close(self) -> None:
        try:
            with self._lock:
                last = self._last
            self.wait_value(last, None)
        except DeviceLayerError:
            pass
        self._steps.put(None)
        self._worker.join(5)
        w = self._waiter
        with w.cond:
            w.stop = True
            w.cond.notify()
        w.thread.join(5)
        self.save_pipeline_cache()
        self._destroy()

    def _destroy(self) -> None:
        with self._lock:
            dev = self.handle
            if dev is None:
                return
            lib.vkDeviceWaitIdle(dev)
            for _, fn in list(getattr(self, "_retire_q", ())):
                try:
                    fn()
                except Exception:
                    pass
            for prog in list(self._programs.values()):
                for p in prog.handle.pipelines.values():
                    lib.vkDestroyPipeline(dev, p, ffi.NULL)
                prog.handle.pipelines = {}
            self._programs.clear()
            for m, _ in getattr(self, "_modules", {}).values():
                lib.vkDestroyShaderModule(dev, m, ffi.NULL)
            for pool, _, _ in getattr(self, "_desc_pools", ()):
                lib.vkDestroyDescriptorPool(dev, pool, ffi.NULL)
            for pl in getattr(self, "_pipe_layouts", {}).values():
                lib.vkDestroyPipelineLayout(dev, pl, ffi.NULL)
            for sl in getattr(self, "_set_layouts", {}).values():
                lib.vkDestroyDescriptorSetLayout(dev, sl, ffi.NULL)
            if getattr(self, "pipeline_cache", None) is not None:
                lib.vkDestroyPipelineCache(dev, self.pipeline_cache, ffi.NULL)
            if getattr(self, "_ds_cache", None) is not None:
                self._ds_cache.clear()
            if getattr(self, "heap", None) is not None:
                self.heap.destroy()
            if getattr(self, "staging", None) is not None and not getattr(self, "_host_ranges", None):
                self._staging_heap.destroy()  # (kept, with the device, while host arrays still map it)
            if getattr(self, "cmd_pool", None) is not None:
                lib.vkDestroyCommandPool(dev, self.cmd_pool, ffi.NULL)
            if getattr(self, "semaphore", None) is not None:
                lib.vkDestroySemaphore(dev, self.semaphore, ffi.NULL)
            if not getattr(self, "_host_ranges", None):
                lib.vkDestroyDevice(dev, ffi.NULL)
            self.handle = None


# -- backend -------------------------------------------------------------------------------------------------------
_instance: _Instance | None = None
_instance_lock = threading.Lock()


def _get_instance() -> _Instance:
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = _Instance()
        return _instance


def _reinit_after_fork() -> None:
    """In a forked child: a new VkInstance on first use (the parent's is kept, never destroyed here)."""
    global _instance, _instance_lock
    lifecycle.keep_forever(_instance)
    _instance = None
    _instance_lock = threading.Lock()


lifecycle.in_forked_child(_reinit_after_fork)


def validation_messages() -> list[tuple[str, str]]:
    """(severity, text) of every validation-layer message so far (with ``DEVICELAYER_VULKAN_VALIDATION=1``)."""
    return list(_instance.messages) if _instance is not None else []


def _manifest_folders(kind: str) -> list[str]:
    """Where the Vulkan loader looks for manifests of ``kind`` ("icd.d", "implicit_layer.d"), as on Linux."""
    home = os.path.expanduser("~")
    bases = [os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")]
    bases += (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    bases += ["/etc", os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")]
    bases += (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(os.pathsep)
    return [os.path.join(b, "vulkan", kind) for b in bases if b]


def _manifest_stamps(path: Path) -> list[str]:
    """A driver or layer manifest and the library it names."""
    found = [stamp(path)]
    if found[0].endswith(" missing"):
        return []
    try:
        data = json.loads(path.read_bytes()[:1 << 20])
        section = data.get("ICD") or data.get("layer") or {}
        library = section.get("library_path") if isinstance(section, dict) else None
    except (OSError, ValueError, AttributeError):
        return found
    if isinstance(library, str) and library:
        found.append(library_stamp(library, path.parent))
    return found


class VulkanBackend(Backend):
    """Every Vulkan physical device with timeline semaphores; ids ``vulkan:N`` in enumeration order."""

    name = "vulkan"
    priority = 30
    # not fork-safe: a forked child of a process that started NVIDIA's driver gets VK_ERROR_INITIALIZATION_FAILED
    # from vkCreateDevice (Mesa's lavapipe starts afresh); a child reports Vulkan unavailable instead
    fork_safe = False

    @classmethod
    def driver_fingerprint(cls) -> list[str]:
        """The Vulkan loader, the driver (ICD) and implicit layer manifests it may read and their libraries."""
        found = [library_stamp("libvulkan.so.1"), stamp(vk.__file__),
                 *environment(("LD_LIBRARY_PATH", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_HOME",
                               "XDG_DATA_DIRS"), ("VK_", "DEVICELAYER_VULKAN_"))]
        chosen = [p for v in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES") for p in os.environ.get(v, "").split(os.pathsep)
                  if p]
        added = [p for p in os.environ.get("VK_ADD_DRIVER_FILES", "").split(os.pathsep) if p]
        for entry in (chosen or _manifest_folders("icd.d")) + added + _manifest_folders("implicit_layer.d"):
            found.append(stamp(entry))  # (a folder's time changes as files come and go)
            for manifest in folder_files(entry, ".json") if os.path.isdir(entry) else [Path(entry)]:
                found += _manifest_stamps(manifest)
        return found

    def __init__(self) -> None:
        instance = _get_instance()
        self._devices: list[VulkanDevice] = []
        self._unusable: list[tuple[str, str]] = []
        force = os.environ.get("DEVICELAYER_VULKAN_FORCE_STAGING", "") not in ("", "0")
        for i, pd in enumerate(instance.physical_devices()):
            try:
                phys = _Physical(i, pd, instance.api_version, instance.handle)
            except Exception as exc:  # a broken driver must not hide the others
                self._unusable.append((f"vulkan:{i}", f"querying the device failed: {exc!r}"))
                continue
            if phys.reason:
                self._unusable.append((f"vulkan:{i} ({phys.name})", phys.reason))
                continue
            try:
                self._devices.append(VulkanDevice(phys, instance, force_staging=force))
            except DeviceLayerError as exc:
                self._unusable.append((f"vulkan:{i} ({phys.name})", str(exc)))
        if not self._devices:
            why = "; ".join(f"{d}: {r}" for d, r in self._unusable) or "no physical devices"
            raise BackendUnavailable(f"no usable Vulkan device ({why})")
        atexit.register(self._save_caches)

    def _save_caches(self) -> None:
        for d in self._devices:
            if d.handle is not None and d._pipelines_new and not d._forked:
                try:
                    d.save_pipeline_cache()
                except Exception:
                    pass

    def devices(self) -> list[VulkanDevice]:
        return self._devices

    def unavailable_devices(self) -> list[tuple[str, str]]:
        return self._unusable
