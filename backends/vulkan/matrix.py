"""Cooperative matrices (``VK_NV_cooperative_matrix``): the matrix-multiply shapes a device's subgroups run, as
``DeviceInfo.matrix_units`` lists them, and the device feature and extension that switch them on.

Kernels use them through the GLSL NV form (``GL_NV_cooperative_matrix``), which the shader compiler here
(glslang 11) has; ``VK_KHR_cooperative_matrix``'s GLSL form needs glslang 13 or later, so a device offering only
the KHR extension lists no units.
"""

from __future__ import annotations

import vulkan as vk

ffi, lib = vk.ffi, vk.lib

EXTENSION = "VK_NV_cooperative_matrix"

#: VkComponentTypeNV values (the Vulkan registry's; the ``vulkan`` package leaves the NV aliases as None) as dtype
#: names
_COMPONENTS = {0: "float16", 1: "float32", 2: "float64", 3: "int8", 4: "int16", 5: "int32", 6: "int64", 7: "uint8",
               8: "uint16", 9: "uint32", 10: "uint64"}
#: VkScopeNV's subgroup scope
_SUBGROUP = 3


def units(instance, pd, extensions: set[str], features: dict[str, bool]) -> tuple[tuple[str, str, int, int, int], ...]:
    """(operand dtype, accumulator dtype, M, N, K) of each subgroup-scope multiply-add D = A B + C the device
    runs, where A, B share a type and C, D share one; () without the extension, its feature or the Vulkan memory
    model its shaders declare."""
    if EXTENSION not in extensions or not (features.get("cooperativeMatrix") and features.get("vulkanMemoryModel")):
        return ()
    address = lib.vkGetInstanceProcAddr(instance, b"vkGetPhysicalDeviceCooperativeMatrixPropertiesNV")
    if address == ffi.NULL:
        return ()
    query = ffi.cast("PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV", address)
    count = ffi.new("uint32_t*")
    if query(pd, count, ffi.NULL) != 0 or not count[0]:
        return ()
    props = ffi.new("VkCooperativeMatrixPropertiesNV[]", count[0])
    for i in range(count[0]):
        props[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV
    if query(pd, count, props) != 0:
        return ()
    found = []
    for p in props[0:count[0]]:
        a, b, c, d = (_COMPONENTS.get(t) for t in (p.AType, p.BType, p.CType, p.DType))
        if p.scope == _SUBGROUP and a and a == b and c and c == d:
            found.append((a, c, int(p.MSize), int(p.NSize), int(p.KSize)))
    return tuple(sorted(set(found)))


def feature_struct(next_struct, enable: bool = False):
    """A ``VkPhysicalDeviceCooperativeMatrixFeaturesNV`` chained before ``next_struct``: for
    ``vkGetPhysicalDeviceFeatures2`` to fill in, or (``enable``) asking for the feature at device creation."""
    return ffi.new("VkPhysicalDeviceCooperativeMatrixFeaturesNV*", {
        "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, "pNext": next_struct,
        "cooperativeMatrix": int(enable)})
