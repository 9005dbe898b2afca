"""Sub-allocation of Vulkan memory: big VkDeviceMemory blocks, each with one VkBuffer, carved by best fit.

A block is one ``vkAllocateMemory`` plus one ``VkBuffer`` bound at offset 0 (mapped persistently when the
memory type is host-visible).  A request above half the block size gets a dedicated block of its own size.
Callers hold the device lock.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left

from devicelayer.errors import OutOfMemory

_ids = itertools.count(1)
WHOLE_SIZE = 0xFFFFFFFFFFFFFFFF  # vk.VK_WHOLE_SIZE is -1 in the package


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Block:
    """One VkDeviceMemory + VkBuffer, with a sorted, coalescing free list of [offset, size]."""

    __slots__ = ("id", "heap", "memory", "buffer", "size", "addr", "free", "used", "dedicated")

    def __init__(self, heap: "Heap", memory, buffer, size: int, addr: int, dedicated: bool) -> None:
        self.id = next(_ids)
        self.heap, self.memory, self.buffer, self.size, self.addr = heap, memory, buffer, size, addr
        self.dedicated = dedicated
        self.free = [[0, size]]
        self.used = 0

    def alloc(self, size: int) -> int | None:
        best, bsize = -1, 1 << 63
        for i, (_, sz) in enumerate(self.free):
            if size <= sz < bsize:
                best, bsize = i, sz
                if sz == size:
                    break
        if best < 0:
            return None
        off, sz = self.free[best]
        if sz == size:
            del self.free[best]
        else:
            self.free[best] = [off + size, sz - size]
        self.used += size
        return off

    def release(self, off: int, size: int) -> None:
        fl = self.free
        i = bisect_left(fl, [off, 0])
        self.used -= size
        if i < len(fl) and fl[i][0] == off + size:
            size += fl[i][1]
            del fl[i]
        if i > 0 and fl[i - 1][0] + fl[i - 1][1] == off:
            fl[i - 1][1] += size
        else:
            fl.insert(i, [off, size])


class Allocation:
    """What ``Buffer.handle`` holds: a range of a block.  ``offset`` is where the buffer starts in the block's VkBuffer."""

    __slots__ = ("block", "offset", "size", "nbytes")

    def __init__(self, block: Block, offset: int, size: int, nbytes: int) -> None:
        self.block, self.offset, self.size, self.nbytes = block, offset, size, nbytes

    @property
    def vk_buffer(self):
        return self.block.buffer

    @property
    def address(self) -> int:
        """Host address of the allocation's first byte (0 when the memory is not mapped)."""
        return self.block.addr + self.offset if self.block.addr else 0

    def __repr__(self) -> str:
        return f"<Allocation block {self.block.id} +{self.offset} {self.nbytes} B>"


class Heap:
    """The blocks of one memory type."""

    def __init__(self, dev, type_index: int, usage: int, block_size: int, mapped: bool, name: str,
                 align: int) -> None:
        self.dev, self.type_index, self.usage = dev, type_index, usage
        self.block_size, self.mapped, self.name, self.align = block_size, mapped, name, align
        self.blocks: list[Block] = []
        self.heap_index = dev.memory_types[type_index]["heap"]
        self.heap_size = dev.memory_heaps[self.heap_index]["size"]
        self.allocated = 0  # bytes of VkDeviceMemory held

    def new_block(self, size: int, dedicated: bool = False) -> Block:
        dev = self.dev
        vk, ffi, lib = dev.vk, dev.ffi, dev.lib
        if self.allocated + size > self.heap_size:
            raise OutOfMemory(f"{dev.id}: {size} bytes more would exceed memory heap {self.heap_index} "
                              f"({self.allocated} of {self.heap_size} bytes in use)")
        bci = ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size,
                                              "usage": self.usage, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
        pbuf = ffi.new("VkBuffer*")
        r = lib.vkCreateBuffer(dev.handle, bci, ffi.NULL, pbuf)
        if r:
            dev.check(r, f"vkCreateBuffer({size})")
        buf = pbuf[0]
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev.handle, buf, req)
        if not (req.memoryTypeBits >> self.type_index) & 1:
            lib.vkDestroyBuffer(dev.handle, buf, ffi.NULL)
            raise OutOfMemory(f"{dev.id}: memory type {self.type_index} cannot back storage buffers")
        mai = ffi.new("VkMemoryAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                                "allocationSize": req.size, "memoryTypeIndex": self.type_index})
        pmem = ffi.new("VkDeviceMemory*")
        r = lib.vkAllocateMemory(dev.handle, mai, ffi.NULL, pmem)
        if r:
            lib.vkDestroyBuffer(dev.handle, buf, ffi.NULL)
            dev.check(r, f"vkAllocateMemory({req.size}) for the {self.name} heap")
        mem = pmem[0]
        r = lib.vkBindBufferMemory(dev.handle, buf, mem, 0)
        addr = 0
        if not r and self.mapped:
            pp = ffi.new("void**")
            r = lib.vkMapMemory(dev.handle, mem, 0, WHOLE_SIZE, 0, pp)
            addr = int(ffi.cast("uintptr_t", pp[0]))
        if r:
            lib.vkDestroyBuffer(dev.handle, buf, ffi.NULL)
            lib.vkFreeMemory(dev.handle, mem, ffi.NULL)
            dev.check(r, "vkBindBufferMemory/vkMapMemory")
        blk = Block(self, mem, buf, size, addr, dedicated)
        self.blocks.append(blk)
        self.allocated += size
        dev.stats["blocks_allocated"] += 1
        return blk

    def alloc(self, nbytes: int) -> Allocation:
        size = align_up(max(nbytes, 1), self.align)
        for blk in self.blocks:
            if not blk.dedicated and blk.size - blk.used >= size:
                off = blk.alloc(size)
                if off is not None:
                    return Allocation(blk, off, size, nbytes)
        dedicated = size > self.block_size // 2
        bsize = align_up(size, 1 << 16) if dedicated else self.block_size
        try:
            blk = self.new_block(bsize, dedicated)
        except OutOfMemory:
            self.trim()  # give back empty blocks, then try once more with exactly what is needed
            blk = self.new_block(align_up(size, 1 << 16), dedicated=True)
        off = blk.alloc(size)
        return Allocation(blk, off, size, nbytes)

    def release(self, a: Allocation) -> None:
        blk = a.block
        blk.release(a.offset, a.size)
        if blk.dedicated and blk.used == 0:
            self.destroy_block(blk)

    def destroy_block(self, blk: Block) -> None:
        dev = self.dev
        dev.forget_block(blk)
        if blk.addr:
            dev.lib.vkUnmapMemory(dev.handle, blk.memory)
        dev.lib.vkDestroyBuffer(dev.handle, blk.buffer, dev.ffi.NULL)
        dev.lib.vkFreeMemory(dev.handle, blk.memory, dev.ffi.NULL)
        self.blocks.remove(blk)
        self.allocated -= blk.size

    def reusable(self) -> int:
        """Bytes free inside the blocks this heap holds (memory the driver counts as used, but free to us)."""
        return sum(b.size - b.used for b in self.blocks if not b.dedicated)

    def trim(self) -> None:
        for b in [b for b in self.blocks if b.used == 0]:
            self.destroy_block(b)

    def destroy(self) -> None:
        for b in list(self.blocks):
            self.destroy_block(b)
