// The Vulkan instance, and what it says about each physical device (vkinfer._vk's device list and the pipeline
// cache's identity).
#include "vk_core.hpp"

#include <stdexcept>

namespace vki {

namespace {

const char* type_name(vk::PhysicalDeviceType t)
{
    switch (t) {
        case vk::PhysicalDeviceType::eDiscreteGpu: return "discrete";
        case vk::PhysicalDeviceType::eIntegratedGpu: return "integrated";
        case vk::PhysicalDeviceType::eVirtualGpu: return "virtual";
        case vk::PhysicalDeviceType::eCpu: return "cpu";
        default: return "other";
    }
}

std::string version_str(uint32_t v)
{
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
           "." + std::to_string(VK_API_VERSION_PATCH(v));
}

py::bytes uuid_bytes(const uint8_t* p) { return py::bytes(reinterpret_cast<const char*>(p), VK_UUID_SIZE); }

} // namespace

bool has_extension(const vk::PhysicalDevice& pd, const char* name)
{
    for (const auto& e : pd.enumerateDeviceExtensionProperties())
        if (std::string(e.extensionName.data()) == name) return true;
    return false;
}

bool has_rte32(const vk::PhysicalDevice& pd)
{
    if (!has_extension(pd, VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME)) return false;
    vk::PhysicalDeviceProperties2 p2;
    vk::PhysicalDeviceFloatControlsProperties fc;
    p2.pNext = &fc;
    pd.getProperties2(&p2);
    return fc.shaderRoundingModeRTEFloat32 == VK_TRUE;
}

bool has_integer_dot(const vk::PhysicalDevice& pd)
{
    if (!has_extension(pd, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) return false;
    vk::PhysicalDeviceFeatures2 f2;
    vk::PhysicalDeviceShaderIntegerDotProductFeatures dotf;
    f2.pNext = &dotf;
    pd.getFeatures2(&f2);
    return dotf.shaderIntegerDotProduct == VK_TRUE;
}

Instance::Instance()
{
    vk::ApplicationInfo app("vkinfer", 1, "vkinfer", 1, VK_API_VERSION_1_1);
    vk::InstanceCreateInfo ci(vk::InstanceCreateFlags(), &app);
    inst = std::make_shared<vk::Instance>(vk::createInstance(ci));
}

Instance::~Instance()
{
    if (inst) inst->destroy();
}

vk::PhysicalDevice Instance::at(uint32_t index) const
{
    auto pds = physical();
    if (index >= pds.size()) throw std::invalid_argument("no Vulkan device with index " + std::to_string(index));
    return pds[index];
}

py::list Instance::devices() const
{
    py::list out;
    auto pds = physical();
    for (size_t i = 0; i < pds.size(); i++) {
        auto& pd = pds[i];
        vk::PhysicalDeviceProperties2 p2;
        vk::PhysicalDeviceSubgroupProperties sub;
        vk::PhysicalDeviceDriverProperties drv;
        bool has12 = pd.getProperties().apiVersion >= VK_API_VERSION_1_2;
        p2.pNext = &sub;
        if (has12) sub.pNext = &drv;
        pd.getProperties2(&p2);
        const auto& p = p2.properties;
        const auto& l = p.limits;
        py::dict d;
        d["index"] = i;
        d["name"] = std::string(p.deviceName.data());
        d["type"] = type_name(p.deviceType);
        d["api_version"] = version_str(p.apiVersion);
        d["vendor_id"] = p.vendorID;
        d["device_id"] = p.deviceID;
        d["driver"] = has12 ? std::string(drv.driverName.data()) : std::string("unknown");
        d["driver_info"] = has12 ? std::string(drv.driverInfo.data()) : std::string("");
        py::dict lim;
        lim["max_compute_workgroup_count"] = py::make_tuple(
          l.maxComputeWorkGroupCount[0], l.maxComputeWorkGroupCount[1], l.maxComputeWorkGroupCount[2]);
        lim["max_compute_workgroup_size"] = py::make_tuple(
          l.maxComputeWorkGroupSize[0], l.maxComputeWorkGroupSize[1], l.maxComputeWorkGroupSize[2]);
        lim["max_compute_workgroup_invocations"] = l.maxComputeWorkGroupInvocations;
        lim["max_compute_shared_memory_size"] = l.maxComputeSharedMemorySize;
        lim["max_storage_buffer_range"] = l.maxStorageBufferRange;
        lim["max_push_constants_size"] = l.maxPushConstantsSize;
        lim["subgroup_size"] = sub.subgroupSize;
        d["limits"] = lim;
        // Integer dot product (VK_KHR_shader_integer_dot_product): whether the device has it, and whether its
        // packed 4x8-bit forms are faster than the equivalent multiplies and adds (the driver's word; lavapipe
        // and SwiftShader have it, every Accelerated flag false).
        py::dict dot;
        const bool has_dot = has_integer_dot(pd);
        dot["supported"] = has_dot;
        if (has_dot) {
            vk::PhysicalDeviceProperties2 q2;
            vk::PhysicalDeviceShaderIntegerDotProductProperties dp;
            q2.pNext = &dp;
            pd.getProperties2(&q2);
            dot["signed_accelerated"] = bool(dp.integerDotProduct4x8BitPackedSignedAccelerated);
            dot["unsigned_accelerated"] = bool(dp.integerDotProduct4x8BitPackedUnsignedAccelerated);
            dot["mixed_accelerated"] = bool(dp.integerDotProduct4x8BitPackedMixedSignednessAccelerated);
        } else {
            for (const char* k : { "signed_accelerated", "unsigned_accelerated", "mixed_accelerated" }) dot[k] = false;
        }
        d["integer_dot_product"] = dot;
        // Float controls (VK_KHR_shader_float_controls): RTE rounding of float32 can be required by a shader.
        py::dict fc;
        fc["supported"] = has_extension(pd, VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME);
        fc["rte32"] = has_rte32(pd);
        d["float_controls"] = fc;
        out.append(d);
    }
    return out;
}

// What a pipeline cache blob is only valid for: the VkPipelineCacheHeaderVersionOne fields plus the
// device/driver UUIDs and driver version (lavapipe 22.3 reports the same pipelineCacheUUID,
// "val-%s" unformatted, for every Mesa version, so the UUID alone identifies nothing there).
py::dict Instance::identity(uint32_t index) const
{
    auto pd = at(index);
    vk::PhysicalDeviceProperties2 p2;
    vk::PhysicalDeviceIDProperties ids;
    p2.pNext = &ids;
    pd.getProperties2(&p2);
    const auto& p = p2.properties;
    py::dict d;
    d["vendor_id"] = p.vendorID;
    d["device_id"] = p.deviceID;
    d["driver_version"] = p.driverVersion;
    d["pipeline_cache_uuid"] = uuid_bytes(p.pipelineCacheUUID.data());
    d["device_uuid"] = uuid_bytes(ids.deviceUUID.data());
    d["driver_uuid"] = uuid_bytes(ids.driverUUID.data());
    return d;
}

} // namespace vki
