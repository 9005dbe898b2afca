"""What NVIDIA's Vulkan driver reports for the tiled kernels' MMA forms (VK_KHR_pipeline_executable_properties:
registers, spills, shared memory...): the Vulkan backend's device made with the extension and its feature, each
pipeline created with CAPTURE_STATISTICS and its statistics printed; then float16 products and a convolution planned
as the library plans them (probe_words.timed), so that their pipelines are made.

    python probe_stats.py"""
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import devicelayer  # noqa: E402,F401
from devicelayer.backends.vulkan import backend as vb  # noqa: E402

vk, ffi, lib = vb.vk, vb.ffi, vb.lib
EXT = "VK_KHR_pipeline_executable_properties"
_create = vb.VulkanDevice._create_device
_pipeline = vb.VulkanDevice._pipeline
_orig_new = ffi.new
_real_ffi = vb.ffi


class _FFI:
    """The backend's ffi with ``new`` replaced (cffi's own attribute is read-only)."""

    def __init__(self, new):
        self.new = new

    def __getattr__(self, name):
        return getattr(_real_ffi, name)


def create_device(self):
    dry = os.environ.get("PROBE_DRY") == "1"  # (the patching alone, without the extension: for a device without it)
    if EXT not in self.phys.extensions and not dry:
        print("the device lists no", EXT, flush=True)
        return _create(self)
    # as _create_device, with the extension and its feature chained in front (ffi.new wrapped for the two structs)
    def new(ctype, init=None):
        if ctype == "VkPhysicalDeviceFeatures2*" and not dry:
            pef = _orig_new("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR*", {
                "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
                "pNext": init["pNext"], "pipelineExecutableInfo": 1})
            keep.append(pef)
            init = dict(init, pNext=pef)
        if ctype == "VkDeviceCreateInfo*" and not dry:
            names = [ffi.string(init["ppEnabledExtensionNames"][i]).decode() for i in range(init["enabledExtensionCount"])]
            names.append(EXT)
            arr = [_orig_new("char[]", n.encode()) for n in names]
            keep.extend(arr)
            ext_arr = _orig_new("char*[]", arr)
            keep.append(ext_arr)
            init = dict(init, enabledExtensionCount=len(names), ppEnabledExtensionNames=ext_arr)
        return _orig_new(ctype, init) if init is not None else _orig_new(ctype)
    keep = []
    vb.ffi = _FFI(new)
    try:
        _create(self)
    finally:
        vb.ffi = _real_ffi
    self._stats_keep = keep
    print("device made", "(dry run)" if dry else f"with {EXT}", flush=True)


def pipeline(self, k, ls):
    if k.pipelines.get(ls) is not None or not hasattr(self, "_stats_keep"):
        return _pipeline(self, k, ls)
    def new(ctype, init=None):
        if ctype == "VkComputePipelineCreateInfo*":
            init = dict(init, flags=vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR)
        return _orig_new(ctype, init) if init is not None else _orig_new(ctype)
    vb.ffi = _FFI(new)
    try:
        p = _pipeline(self, k, ls)
    finally:
        vb.ffi = _real_ffi
    if os.environ.get("PROBE_DRY") == "1":
        print("  pipeline made with the flag (dry run)", flush=True)
        return p
    try:
        report(self, k, p)
    except Exception as exc:  # noqa: BLE001
        print("  statistics failed:", type(exc).__name__, exc, flush=True)
    return p


def report(self, k, p):
    getp = ffi.cast("PFN_vkGetPipelineExecutablePropertiesKHR",
                    lib.vkGetDeviceProcAddr(self.handle, b"vkGetPipelineExecutablePropertiesKHR"))
    gets = ffi.cast("PFN_vkGetPipelineExecutableStatisticsKHR",
                    lib.vkGetDeviceProcAddr(self.handle, b"vkGetPipelineExecutableStatisticsKHR"))
    pinfo = ffi.new("VkPipelineInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, "pipeline": p})
    count = ffi.new("uint32_t*")
    getp(self.handle, pinfo, count, ffi.NULL)
    line = [f"pipeline {k.refl.entry_point}:"]
    for e in range(count[0]):
        einfo = ffi.new("VkPipelineExecutableInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                                          "pipeline": p, "executableIndex": e})
        n = ffi.new("uint32_t*")
        gets(self.handle, einfo, n, ffi.NULL)
        st = ffi.new("VkPipelineExecutableStatisticKHR[]", n[0])
        for i in range(n[0]):
            st[i].sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
        gets(self.handle, einfo, n, st)
        for i in range(n[0]):
            f = st[i].format
            v = (bool(st[i].value.b32) if f == 0 else int(st[i].value.i64) if f == 1 else int(st[i].value.u64)
                 if f == 2 else float(st[i].value.f64))
            line.append(f"{ffi.string(st[i].name).decode()}={v}")
    print(" ".join(line), flush=True)


vb.VulkanDevice._create_device = create_device
vb.VulkanDevice._pipeline = pipeline


def main():
    import devicelayer as dl
    import probe_words as pw
    from devicelayer.kernels import tiles
    from devicelayer.kernels.ops import matmul as mm
    dev = dl.device("vulkan:0")
    rng = np.random.default_rng(0)
    M = mm.MMA_PIPELINE
    for (m, n, k), micro, pipe in (((4096, 4096, 4096), 0, None), ((4096, 4096, 4096), 0, M._replace(vload=0, stage_words=0)),
                                    ((2048, 768, 3072), 4, None), ((2048, 768, 3072), 4, M._replace(bk=16))):
        a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
        import contextlib
        with (tiles.forcing(micro) if micro else contextlib.nullcontext()), \
                (mm.forcing_pipeline(pipe) if pipe is not None else contextlib.nullcontext()):
            ms, name, _ = pw.timed(dev, a, b)
        print(f"{m}x{n}x{k} {ms:.3f} ms [{name}]", flush=True)


if __name__ == "__main__":
    main()
