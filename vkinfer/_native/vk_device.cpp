// The logical device: its compute queue, the memory kind its buffers get, and the pipeline cache its pipelines
// are created through (loaded from and saved to disk by vkinfer._vk).
#include "vk_core.hpp"

#include <stdexcept>

namespace vki {

Device::Device(std::shared_ptr<Instance> in, uint32_t index, py::bytes cache_data, unsigned threads)
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
    std::vector<uint32_t> zeros(mapped ? words : 1, 0u); // Kompute copies initial data into mapped memory
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
