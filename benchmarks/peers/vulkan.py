"""Raw Vulkan peer: the same kernel, queue and memory type as devicelayer's Vulkan device, through ``vk.lib`` directly.

A launch records a command buffer (bind pipeline, bind the descriptor set of a buffer of n int32, push n,
dispatch) and submits it waiting on the previous value of its own timeline semaphore and signalling the next,
as a program using Vulkan by hand would.  Structs are allocated once; only ``vk.lib`` (raw cffi) is called.
Transfers are a memcpy into or out of mapped memory when devicelayer maps its buffers, else a copy through a
host-visible staging buffer; device copies are one vkCmdCopyBuffer.
"""

from __future__ import annotations

import ctypes

import numpy as np
import vulkan as vk

from devicelayer.backends.vulkan.spirv import compile_glsl, is_spirv

NAME = "raw vulkan (cffi)"
ffi, lib = vk.ffi, vk.lib
U64_MAX = 0xFFFFFFFFFFFFFFFF


class _Value:
    __slots__ = ("raw", "value")

    def __init__(self, raw: "Raw", value: int) -> None:
        self.raw, self.value = raw, value

    def wait(self) -> None:
        self.raw._wait(self.value)


class _Mem:
    def __init__(self, raw: "Raw", nbytes: int, type_index: int, mapped: bool) -> None:
        dev = raw.dev
        bci = ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": nbytes,
                                              "usage": vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
                                              | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                                              | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                              "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
        pb = ffi.new("VkBuffer*")
        assert lib.vkCreateBuffer(dev, bci, ffi.NULL, pb) == 0
        self.buffer = pb[0]
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev, self.buffer, req)
        mai = ffi.new("VkMemoryAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                                "allocationSize": req.size, "memoryTypeIndex": type_index})
        pm = ffi.new("VkDeviceMemory*")
        r = lib.vkAllocateMemory(dev, mai, ffi.NULL, pm)
        if r:
            raise MemoryError(f"vkAllocateMemory: {r}")
        self.memory = pm[0]
        lib.vkBindBufferMemory(dev, self.buffer, self.memory, 0)
        self.addr = 0
        if mapped:
            pp = ffi.new("void**")
            lib.vkMapMemory(dev, self.memory, 0, U64_MAX, 0, pp)
            self.addr = int(ffi.cast("uintptr_t", pp[0]))
        self.nbytes = nbytes
        raw._mems.append(self)


class Raw:
    def __init__(self, device, source, entry: str, n: int) -> None:
        self.device = device
        self.dev, self.queue = device.handle, device.queue
        self.mapped = device.mapped
        self._mems: list[_Mem] = []
        self.type_index = device.heap.type_index
        # own timeline semaphore
        stci = ffi.new("VkSemaphoreTypeCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                                      "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE})
        sci = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": stci})
        ps = ffi.new("VkSemaphore*")
        assert lib.vkCreateSemaphore(self.dev, sci, ffi.NULL, ps) == 0
        self.sem = ps[0]
        self.value = 0
        self.sems = ffi.new("VkSemaphore[1]", [self.sem])
        self.wait_vals, self.sig_vals = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]")
        self.stage = ffi.new("VkPipelineStageFlags[1]", [vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                                          | vk.VK_PIPELINE_STAGE_TRANSFER_BIT])
        self.cbs = ffi.new("VkCommandBuffer[1]")
        self.tsi = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO, "waitSemaphoreValueCount": 1,
            "pWaitSemaphoreValues": self.wait_vals, "signalSemaphoreValueCount": 1,
            "pSignalSemaphoreValues": self.sig_vals})
        self.si = ffi.new("VkSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": self.tsi, "waitSemaphoreCount": 1,
            "pWaitSemaphores": self.sems, "pWaitDstStageMask": self.stage, "commandBufferCount": 1,
            "pCommandBuffers": self.cbs, "signalSemaphoreCount": 1, "pSignalSemaphores": self.sems})
        self._wait_value = ffi.new("uint64_t[1]")
        self.wait_info = ffi.new("VkSemaphoreWaitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                                         "semaphoreCount": 1, "pSemaphores": self.sems,
                                                         "pValues": self._wait_value})
        self.begin = ffi.new("VkCommandBufferBeginInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                                           "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT})
        self.hostbar = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        self.region = ffi.new("VkBufferCopy*")
        # a ring of command buffers (each reused once its submit completed)
        cpci = ffi.new("VkCommandPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                                    "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                                    "queueFamilyIndex": device.phys.queue_family})
        pp = ffi.new("VkCommandPool*")
        assert lib.vkCreateCommandPool(self.dev, cpci, ffi.NULL, pp) == 0
        self.pool = pp[0]
        self.ring = 256
        self.ring_cbs = ffi.new(f"VkCommandBuffer[{self.ring}]")
        ai = ffi.new("VkCommandBufferAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                                      "commandPool": self.pool,
                                                      "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                                      "commandBufferCount": self.ring})
        assert lib.vkAllocateCommandBuffers(self.dev, ai, self.ring_cbs) == 0
        self.ring_values = [0] * self.ring
        self.u64 = ffi.new("uint64_t*")
        # kernel: module, layouts, pipeline with local size 64 through the specialization constant
        src = source if isinstance(source, str) or is_spirv(source) else bytes(source).decode()
        spirv = bytes(src) if is_spirv(src) else compile_glsl(src)
        code = ffi.from_buffer(spirv)
        smci = ffi.new("VkShaderModuleCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                                     "codeSize": len(spirv), "pCode": ffi.cast("uint32_t*", code)})
        pm = ffi.new("VkShaderModule*")
        assert lib.vkCreateShaderModule(self.dev, smci, ffi.NULL, pm) == 0
        self.module = pm[0]
        binding = ffi.new("VkDescriptorSetLayoutBinding*", {
            "binding": 0, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
            "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT})
        dslci = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": 1, "pBindings": binding})
        pdsl = ffi.new("VkDescriptorSetLayout*")
        assert lib.vkCreateDescriptorSetLayout(self.dev, dslci, ffi.NULL, pdsl) == 0
        self.dsl = pdsl[0]
        rng = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0, "size": 4})
        dsls = ffi.new("VkDescriptorSetLayout[1]", [self.dsl])
        plci = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": dsls,
            "pushConstantRangeCount": 1, "pPushConstantRanges": rng})
        ppl = ffi.new("VkPipelineLayout*")
        assert lib.vkCreatePipelineLayout(self.dev, plci, ffi.NULL, ppl) == 0
        self.layout = ppl[0]
        self.local = 64
        entry_map = ffi.new("VkSpecializationMapEntry*", {"constantID": 0, "offset": 0, "size": 4})
        spec_data = ffi.new("uint32_t[1]", [self.local])
        spec = ffi.new("VkSpecializationInfo*", {"mapEntryCount": 1, "pMapEntries": entry_map, "dataSize": 4,
                                                 "pData": spec_data})
        name = ffi.new("char[]", b"main")
        cpci2 = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": self.module, "pName": name,
                      "pSpecializationInfo": spec},
            "layout": self.layout})
        pp2 = ffi.new("VkPipeline*")
        assert lib.vkCreateComputePipelines(self.dev, ffi.NULL, 1, cpci2, ffi.NULL, pp2) == 0
        self.pipeline = pp2[0]
        # the buffer of n int32 and its descriptor set
        self.n = n
        self.buf = _Mem(self, max(4, n * 4), self.type_index, self.mapped)
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1})
        dpci = ffi.new("VkDescriptorPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                                       "maxSets": 1, "poolSizeCount": 1, "pPoolSizes": size})
        pdp = ffi.new("VkDescriptorPool*")
        assert lib.vkCreateDescriptorPool(self.dev, dpci, ffi.NULL, pdp) == 0
        self.dpool = pdp[0]
        dsai = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self.dpool,
            "descriptorSetCount": 1, "pSetLayouts": dsls})
        self.sets = ffi.new("VkDescriptorSet[1]")
        assert lib.vkAllocateDescriptorSets(self.dev, dsai, self.sets) == 0
        info = ffi.new("VkDescriptorBufferInfo*", {"buffer": self.buf.buffer, "offset": 0, "range": n * 4})
        write = ffi.new("VkWriteDescriptorSet*", {
            "sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": self.sets[0], "dstBinding": 0,
            "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": info})
        lib.vkUpdateDescriptorSets(self.dev, 1, write, 0, ffi.NULL)
        self.pc = ffi.new("int32_t[1]", [n])
        self.groups = (n + self.local - 1) // self.local
        self.staging = None

    # -- submission --------------------------------------------------------------------------------------------
    def _cb(self):
        i = self.value % self.ring
        if self.ring_values[i] and self.ring_values[i] > self._done():
            self._wait(self.ring_values[i])
        return i, self.ring_cbs[i]

    def _done(self) -> int:
        lib.vkGetSemaphoreCounterValue(self.dev, self.sem, self.u64)
        return self.u64[0]

    def _submit(self, i, cb) -> int:
        v = self.value + 1
        self.wait_vals[0] = self.value
        self.sig_vals[0] = v
        self.cbs[0] = cb
        r = lib.vkQueueSubmit(self.queue, 1, self.si, ffi.NULL)
        if r:
            raise RuntimeError(f"vkQueueSubmit: {r}")
        self.value = v
        self.ring_values[i] = v
        return v

    def _wait(self, value: int) -> None:
        self._wait_value[0] = value
        lib.vkWaitSemaphores(self.dev, self.wait_info, U64_MAX)

    def launch(self) -> _Value:
        i, cb = self._cb()
        lib.vkBeginCommandBuffer(cb, self.begin)
        lib.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
        lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1, self.sets, 0, ffi.NULL)
        lib.vkCmdPushConstants(cb, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, self.pc)
        lib.vkCmdDispatch(cb, self.groups, 1, 1)
        lib.vkEndCommandBuffer(cb)
        return _Value(self, self._submit(i, cb))

    def finish(self) -> None:
        self._wait(self.value)

    # -- memory ------------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> _Mem:
        return _Mem(self, nbytes, self.type_index, self.mapped)

    def _copy_cmd(self, src, src_off, dst, dst_off, n) -> None:
        i, cb = self._cb()
        lib.vkBeginCommandBuffer(cb, self.begin)
        self.region.srcOffset, self.region.dstOffset, self.region.size = src_off, dst_off, n
        lib.vkCmdCopyBuffer(cb, src, dst, 1, self.region)
        lib.vkCmdPipelineBarrier(cb, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                                 self.hostbar, 0, ffi.NULL, 0, ffi.NULL)
        lib.vkEndCommandBuffer(cb)
        self._wait(self._submit(i, cb))

    def _staging(self, n):
        if self.staging is None or self.staging.nbytes < n:
            self.staging = _Mem(self, n, self.device._staging_heap.type_index, True)
        return self.staging

    def upload(self, buf: _Mem, array: np.ndarray) -> None:
        a = np.ascontiguousarray(array)
        if self.mapped:
            ctypes.memmove(buf.addr, a.ctypes.data, a.nbytes)
        else:
            s = self._staging(a.nbytes)
            ctypes.memmove(s.addr, a.ctypes.data, a.nbytes)
            self._copy_cmd(s.buffer, 0, buf.buffer, 0, a.nbytes)

    def download(self, buf: _Mem, array: np.ndarray) -> None:
        if self.mapped:
            ctypes.memmove(array.ctypes.data, buf.addr, array.nbytes)
        else:
            s = self._staging(array.nbytes)
            self._copy_cmd(buf.buffer, 0, s.buffer, 0, array.nbytes)
            ctypes.memmove(array.ctypes.data, s.addr, array.nbytes)

    def copy(self, dst: _Mem, src: _Mem, nbytes: int) -> None:
        self._copy_cmd(src.buffer, 0, dst.buffer, 0, nbytes)
