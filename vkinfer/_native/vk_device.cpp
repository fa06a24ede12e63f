// The logical device: its compute queue, the memory kind its buffers get, and the pipeline cache its pipelines
// are created through (loaded from and saved to disk by vkinfer._vk).
#include "vk_core.hpp"

#include <new>
#include <stdexcept>

namespace vki {

namespace {

// Why buffers are tried before kp::Tensor makes them: Kompute 0.9 calls the vkCreateBuffer and vkAllocateMemory
// overloads that return a vk::Result, drops it, and binds and maps the null handle left behind. When an allocation
// fails (a 256 MiB buffer with 100 MiB of address space left under RLIMIT_AS) lavapipe dereferences that handle in
// vkBindBufferMemory: SIGSEGV instead of an error. We do not patch Kompute (built from its sdist), so each buffer
// and memory it will make (the same usage, size and memory type: the first type with the properties it asks for)
// is made here first, every result checked, all of them alive at once as Kompute holds them, then released: a
// failure is a VkFault (VulkanOutOfMemoryError), and Kompute's calls ask for what was just given back. The GIL,
// held through Device::buffer, keeps vkinfer's other buffers out of that gap; only memory taken by a thread
// outside vkinfer in the same instant can still fail Kompute's call. Cost on lavapipe (best of 3, a loaded 2-core
// AMD EPYC VM): 0.3 us a 4 KiB buffer, 7-8 us a 1-32 MiB one (an mmap and munmap), where filling a host-visible
// buffer with its zeros takes 1.7 ms for 1 MiB, 120 ms for 32 MiB.
struct Trial {
    VkBufferUsageFlags usage;
    VkMemoryPropertyFlags props;
    bool map; // Kompute keeps the memory mapped (the host-visible one)
};

struct Made {
    VkBuffer b = VK_NULL_HANDLE;
    VkDeviceMemory m = VK_NULL_HANDLE;
    bool mapped = false;
};

void release(VkDevice d, std::vector<Made>& made)
{
    for (auto& x : made) {
        if (x.mapped) vkUnmapMemory(d, x.m);
        if (x.m != VK_NULL_HANDLE) vkFreeMemory(d, x.m, nullptr);
        if (x.b != VK_NULL_HANDLE) vkDestroyBuffer(d, x.b, nullptr);
    }
    made.clear();
}

// kp::Tensor's buffers for a tensor type (Tensor.cpp: getPrimary/StagingBufferUsageFlags, ...MemoryPropertyFlags).
std::vector<Trial> kompute_buffers(kp::Tensor::TensorTypes tt)
{
    const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                             copies = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    switch (tt) {
        case kp::Tensor::TensorTypes::eDevice: return { { storage | copies, local, false }, { copies, host, true } };
        case kp::Tensor::TensorTypes::eHost: return { { storage | copies, host, true } };
        default: return { { storage, local, false } };
    }
}

// Makes, checks and releases the buffers kp::Tensor will make for `bytes` of type `tt`; throws VkFault (or a
// runtime_error for a result that is no fault) naming the failed call.
void try_buffers(VkPhysicalDevice pd, VkDevice d, kp::Tensor::TensorTypes tt, VkDeviceSize bytes,
                 std::atomic<bool>* lost)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    std::vector<Made> made;
    const std::string size = " (a buffer of " + std::to_string(bytes) + " bytes)";
    auto check = [&](VkResult r, const char* call) {
        if (r == VK_SUCCESS) return;
        release(d, made);
        if (r == VK_ERROR_MEMORY_MAP_FAILED) // no address space for the mapping: the host is out of memory
            throw VkFault(vk::Result::eErrorOutOfHostMemory, std::string("out of host memory for Vulkan: ") + call +
                                                               size + " returned VK_ERROR_MEMORY_MAP_FAILED");
        fail(static_cast<vk::Result>(r), call + size, lost);
    };
    for (const Trial& t : kompute_buffers(tt)) {
        made.emplace_back();
        Made& x = made.back();
        VkBufferCreateInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bi.size = bytes;
        bi.usage = t.usage;
        bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        VkBuffer b = VK_NULL_HANDLE; // a failed call leaves its output undefined: kept only on success
        VkResult r = vkCreateBuffer(d, &bi, nullptr, &b);
        if (r == VK_SUCCESS) x.b = b;
        check(r, "vkCreateBuffer");
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(d, x.b, &req);
        uint32_t type = UINT32_MAX;
        for (uint32_t i = 0; i < mp.memoryTypeCount && type == UINT32_MAX; i++)
            if ((req.memoryTypeBits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & t.props) == t.props) type = i;
        if (type == UINT32_MAX) break; // Kompute raises its own error for that, before allocating
        VkMemoryAllocateInfo ai{};
        ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        ai.allocationSize = req.size;
        ai.memoryTypeIndex = type;
        VkDeviceMemory m = VK_NULL_HANDLE;
        r = vkAllocateMemory(d, &ai, nullptr, &m);
        if (r == VK_SUCCESS) x.m = m;
        check(r, "vkAllocateMemory");
        check(vkBindBufferMemory(d, x.b, x.m, 0), "vkBindBufferMemory");
        if (t.map) {
            void* p = nullptr;
            check(vkMapMemory(d, x.m, 0, bytes, 0, &p), "vkMapMemory");
            x.mapped = true;
        }
    }
    release(d, made);
}

} // namespace

Device::Device(std::shared_ptr<Instance> in, uint32_t index, py::bytes cache_data, unsigned threads, bool want_dot,
               bool want_rte32)
  : instance(std::move(in))
{
    pd = std::make_shared<vk::PhysicalDevice>(instance->at(index));
    auto families = pd->getQueueFamilyProperties();
    bool found = false;
    // Prefer a compute queue family without graphics (async compute), else any with compute.
    for (int pass = 0; pass < 2 && !found; pass++)
        for (uint32_t i = 0; i < families.size(); i++) {
            auto f = families[i].queueFlags;
            if ((f & vk::QueueFlagBits::eCompute) && (pass == 1 || !(f & vk::QueueFlagBits::eGraphics))) {
                family = i;
                found = true;
                break;
            }
        }
    if (!found) throw std::runtime_error("Vulkan device has no compute queue");
    ts_bits = families[family].timestampValidBits;
    ts_period = pd->getProperties().limits.timestampPeriod;
    float prio = 1.0f;
    vk::DeviceQueueCreateInfo qci(vk::DeviceQueueCreateFlags(), family, 1, &prio);
    vk::DeviceCreateInfo dci(vk::DeviceCreateFlags(), 1, &qci);
    // The integer-dot-product shaders (OpSDot/OpUDot/OpSUDot, SPV_KHR_integer_dot_product) are valid only on a
    // device created with the extension and its feature: enabled only when asked for and present, so a device
    // without it never runs them (vkinfer._vk then compiles the scalar variants).
    std::vector<const char*> exts;
    vk::PhysicalDeviceShaderIntegerDotProductFeatures dotf;
    dotf.shaderIntegerDotProduct = VK_TRUE;
    dot = want_dot && has_integer_dot(*pd);
    if (dot) {
        exts.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
        dci.pNext = &dotf;
    }
    // The float requantization shaders declare RoundingModeRTE for float32 (SPV_KHR_float_controls): valid only
    // with the extension enabled, and only where the device can honour it (shaderRoundingModeRTEFloat32).
    rte32 = want_rte32 && has_rte32(*pd);
    if (rte32) exts.push_back(VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME);
    dci.enabledExtensionCount = uint32_t(exts.size());
    dci.ppEnabledExtensionNames = exts.data();
    try {
        dev = std::make_shared<vk::Device>(pd->createDevice(dci));
    } catch (const vk::SystemError& e) {
        fail_system(e, "vkCreateDevice", nullptr);
    }
    queue = dev->getQueue(family, 0);
    unified = detect_unified();

    std::string blob = cache_data;
    vk::PipelineCacheCreateInfo pci(vk::PipelineCacheCreateFlags(), blob.size(), blob.data());
    if (dev->createPipelineCache(&pci, nullptr, &pcache) == vk::Result::eSuccess) {
        pcache_initial = blob.size();
    } else { // a driver refusing data we validated: start empty rather than fail
        pci.initialDataSize = 0;
        pci.pInitialData = nullptr;
        pcache = dev->createPipelineCache(pci);
        pcache_initial = 0;
    }
    workers = std::make_unique<Workers>(threads);
}

Device::~Device()
{
    if (!dev) return;
    workers->shutdown(); // finishes queued pipeline creations before their device goes
    kernels.clear();
    (void)vkDeviceWaitIdle(static_cast<VkDevice>(*dev)); // VK_ERROR_DEVICE_LOST here must not throw
    for (auto& [k, v] : layouts) {
        dev->destroyPipelineLayout(v.second);
        dev->destroyDescriptorSetLayout(v.first);
    }
    dev->destroyPipelineCache(pcache);
    dev->destroy();
}

// Kompute's eHost tensor takes the first memory type that is HOST_VISIBLE|HOST_COHERENT and allowed for
// a storage buffer. When that type is also DEVICE_LOCAL (integrated GPUs, lavapipe, SwiftShader: one
// memory type with all four bits) the shaders read the very memory the host writes, and a staging
// copy only doubles the traffic. On a discrete GPU the first such type is system memory (PCIe): there
// we keep device-local buffers with staging copies.
bool Device::detect_unified()
{
    vk::BufferCreateInfo bi(vk::BufferCreateFlags(), 256,
                            vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                              vk::BufferUsageFlagBits::eTransferDst);
    vk::Buffer b = dev->createBuffer(bi);
    uint32_t bits = dev->getBufferMemoryRequirements(b).memoryTypeBits;
    dev->destroyBuffer(b);
    auto mp = pd->getMemoryProperties();
    const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want)
            return bool(mp.memoryTypes[i].propertyFlags & vk::MemoryPropertyFlagBits::eDeviceLocal);
    return false;
}

Buffer Device::buffer(size_t nbytes, const std::string& kind)
{
    kp::Tensor::TensorTypes tt;
    if (kind == "staged")
        tt = kp::Tensor::TensorTypes::eDevice;
    else if (kind == "direct")
        tt = kp::Tensor::TensorTypes::eHost;
    else if (kind == "device")
        tt = kp::Tensor::TensorTypes::eStorage;
    else
        throw std::invalid_argument("buffer kind must be 'staged', 'direct' or 'device'");
    if (nbytes == 0) nbytes = 4;
    size_t words = (nbytes + 3) / 4;
    if (words > 0x3fffffffu) throw std::invalid_argument("buffer too large");
    check_lost(lost.get());
    const std::string call = "vkAllocateMemory (a buffer of " + std::to_string(words * 4) + " bytes)";
    if (vk::Result r = injected(FAULT_ALLOC); r != vk::Result::eSuccess) fail(r, call, lost.get());
    bool mapped = tt != kp::Tensor::TensorTypes::eStorage;
    std::vector<uint32_t> zeros; // Kompute copies initial data into mapped memory
    try {
        zeros.assign(mapped ? words : 1, 0u);
    } catch (const std::bad_alloc&) {
        throw VkFault(vk::Result::eErrorOutOfHostMemory,
                      "out of host memory for Vulkan: the initial contents" + call.substr(call.find(' ')) +
                        " (std::bad_alloc)");
    }
    // With the zeros alive, as they are while Kompute allocates (the address space it will find).
    try_buffers(static_cast<VkPhysicalDevice>(*pd), static_cast<VkDevice>(*dev), tt, words * 4, lost.get());
    std::shared_ptr<kp::Tensor> t;
    try {
        t = std::shared_ptr<kp::Tensor>(new kp::Tensor(pd, dev, zeros.data(), (uint32_t)words, 4,
                                                       kp::Tensor::TensorDataTypes::eUnsignedInt, tt),
                                         [](kp::Tensor* p) {
                                             delete p;
                                             live_add(LIVE_BUFFERS, -1);
                                         });
    } catch (const vk::SystemError& e) {
        fail_system(e, call, lost.get());
    }
    live_add(LIVE_BUFFERS, 1);
    return Buffer{ t, words * 4 };
}

void Device::wait_pipelines()
{
    py::gil_scoped_release nogil;
    workers->drain();
}

py::bytes Device::pipeline_cache_data()
{
    wait_pipelines();
    size_t n = 0;
    if (dev->getPipelineCacheData(pcache, &n, nullptr) != vk::Result::eSuccess)
        throw std::runtime_error("vkGetPipelineCacheData failed");
    std::string out(n, '\0');
    vk::Result r = dev->getPipelineCacheData(pcache, &n, out.data());
    if (r != vk::Result::eSuccess && r != vk::Result::eIncomplete)
        throw std::runtime_error("vkGetPipelineCacheData: " + vk::to_string(r));
    out.resize(n);
    return py::bytes(out);
}

py::dict Device::stats()
{
    py::dict d;
    std::lock_guard<std::mutex> lk(m);
    d["pipelines_created"] = created.load();
    d["pipelines_reused"] = reused;
    d["pipeline_create_ns"] = create_ns.load();
    d["pipeline_cache_initial_bytes"] = pcache_initial;
    return d;
}

} // namespace vki
