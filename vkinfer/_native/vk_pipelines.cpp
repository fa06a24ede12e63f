// Pipelines: created on a small worker pool through the device's pipeline cache, one VkPipeline (Kernel) per
// distinct (SPIR-V, specialization, layout), shared by the Programs that bind it to their buffers.
//
// Why not kp::Algorithm: it creates a fresh, empty VkPipelineCache per pipeline and keeps its members private, so
// it can neither use a cache loaded from disk nor share one pipeline between programs that differ only in their
// buffers. Our Kernel/Program split does both: one VkPipeline per (SPIR-V, specialization, layout), created
// through the device's VkPipelineCache on a small worker pool, and one descriptor set per program. MobileNetV2 at
// 224: 64 programs, 37 distinct pipelines.
#include "vk_core.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>

namespace vki {

// --- pipeline creation: a small worker pool --------------------------------------------------------
// vkCreateComputePipelines may be called from several threads at once (the device and the pipeline
// cache are internally synchronized). On lavapipe 22.3 one pipeline costs 5-15 ms of SPIR-V -> NIR
// translation and optimization that no cache persists (its VkPipelineCache is a stub returning a 32-byte
// header), so creating them on every core while Python goes on building the session is the one lever.

void Workers::submit(std::function<void()> f)
{
    if (n_ == 0) {
        f();
        return;
    }
    {
        std::lock_guard<std::mutex> lk(m_);
        if (stop_) throw std::runtime_error("device is closing");
        if (threads_.empty())
            for (unsigned i = 0; i < n_; i++) threads_.emplace_back([this] { loop(); });
        q_.push_back(std::move(f));
        pending_++;
    }
    cv_.notify_one();
}

void Workers::drain()
{
    std::unique_lock<std::mutex> lk(m_);
    idle_.wait(lk, [this] { return pending_ == 0; });
}

void Workers::shutdown()
{
    {
        std::lock_guard<std::mutex> lk(m_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
}

void Workers::loop()
{
    for (;;) {
        std::function<void()> f;
        {
            std::unique_lock<std::mutex> lk(m_);
            cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
            if (q_.empty()) return; // stopping, and the queue is drained
            f = std::move(q_.front());
            q_.pop_front();
        }
        f(); // never throws: tasks catch into their promise
        {
            std::lock_guard<std::mutex> lk(m_);
            pending_--;
        }
        idle_.notify_all();
    }
}

// --- kernels and programs ----------------------------------------------------------------------------

Kernel::~Kernel()
{
    if (!pipe.valid()) return;
    try {
        vk::Pipeline p = pipe.get();
        if (p) {
            dev->destroyPipeline(p);
            live_add(LIVE_PIPELINES, -1);
        }
    } catch (...) {
    }
}

ProgramCore::~ProgramCore()
{
    if (pool) dev->destroyDescriptorPool(pool);
}

void ProgramCore::record(const vk::CommandBuffer& cb) const
{
    cb.bindPipeline(vk::PipelineBindPoint::eCompute, kernel->pipeline());
    cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, layout, 0, 1, &set, 0, nullptr);
    cb.pushConstants(layout, vk::ShaderStageFlagBits::eCompute, 0, (uint32_t)(4 * push.size()), push.data());
    cb.dispatch(groups[0], groups[1], groups[2]);
}

bool Program::ready() const { return p->kernel->pipe.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

void Program::wait() const
{
    py::gil_scoped_release nogil;
    p->kernel->pipeline();
}

// --- the device's layouts, kernels and programs ----------------------------------------------------------

std::pair<vk::DescriptorSetLayout, vk::PipelineLayout> Device::layout_for(uint32_t nbind, uint32_t push_bytes)
{
    auto key = std::make_pair(nbind, push_bytes);
    auto it = layouts.find(key);
    if (it != layouts.end()) return it->second;
    std::vector<vk::DescriptorSetLayoutBinding> binds;
    for (uint32_t i = 0; i < nbind; i++)
        binds.emplace_back(i, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute);
    auto dsl = dev->createDescriptorSetLayout(
      vk::DescriptorSetLayoutCreateInfo(vk::DescriptorSetLayoutCreateFlags(), (uint32_t)binds.size(), binds.data()));
    vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, push_bytes);
    auto pl = dev->createPipelineLayout(vk::PipelineLayoutCreateInfo(vk::PipelineLayoutCreateFlags(), 1, &dsl, 1, &range));
    layouts[key] = { dsl, pl };
    return { dsl, pl };
}

std::shared_ptr<Kernel> Device::kernel_for(const std::string& spirv, const std::vector<uint32_t>& spec,
                                           vk::PipelineLayout layout, uint32_t nbind, uint32_t push_bytes)
{
    std::string key = spirv;
    auto put = [&key](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), 4); };
    put(nbind);
    put(push_bytes);
    put((uint32_t)spec.size());
    for (auto v : spec) put(v);
    auto it = kernels.find(key);
    if (it != kernels.end())
        if (auto k = it->second.lock()) {
            bool failed = false; // a creation that failed (out of memory, say) is tried again, not shared
            if (k->pipe.wait_for(std::chrono::seconds(0)) == std::future_status::ready) try {
                    k->pipe.get();
                } catch (...) {
                    failed = true;
                }
            if (!failed) {
                reused++;
                return k;
            }
        }
    if (++kernel_inserts % 256 == 0) // forget kernels whose programs are all gone
        for (auto i = kernels.begin(); i != kernels.end();) i = i->second.expired() ? kernels.erase(i) : std::next(i);

    auto k = std::make_shared<Kernel>();
    k->dev = dev;
    auto prom = std::make_shared<std::promise<vk::Pipeline>>();
    k->pipe = prom->get_future().share();
    kernels[key] = k;
    auto code = std::make_shared<std::vector<uint32_t>>(spirv.size() / 4);
    std::memcpy(code->data(), spirv.data(), spirv.size());
    auto d = dev;
    vk::PipelineCache cache = pcache;
    auto* n_created = &created;
    auto* n_ns = &create_ns;
    auto lost_flag = lost;
    workers->submit([d, cache, layout, code, spec, prom, n_created, n_ns, lost_flag] {
        auto t0 = std::chrono::steady_clock::now();
        vk::ShaderModule mod;
        try {
            if (vk::Result r = injected(FAULT_PIPELINE); r != vk::Result::eSuccess)
                fail(r, "vkCreateComputePipelines", lost_flag.get()); // the test hook (vk_faults.cpp)
            mod = d->createShaderModule(
              vk::ShaderModuleCreateInfo(vk::ShaderModuleCreateFlags(), code->size() * 4, code->data()));
            std::vector<vk::SpecializationMapEntry> entries;
            for (uint32_t i = 0; i < spec.size(); i++) entries.emplace_back(i, 4 * i, 4);
            vk::SpecializationInfo si((uint32_t)entries.size(), entries.data(), 4 * spec.size(), spec.data());
            vk::PipelineShaderStageCreateInfo stage(vk::PipelineShaderStageCreateFlags(),
                                                    vk::ShaderStageFlagBits::eCompute, mod, "main", &si);
            vk::ComputePipelineCreateInfo ci(vk::PipelineCreateFlags(), stage, layout);
            vk::Pipeline p;
            vk::Result r = d->createComputePipelines(cache, 1, &ci, nullptr, &p);
            d->destroyShaderModule(mod);
            mod = nullptr;
            if (r != vk::Result::eSuccess) fail(r, "vkCreateComputePipelines", lost_flag.get());
            live_add(LIVE_PIPELINES, 1);
            n_created->fetch_add(1);
            n_ns->fetch_add((uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - t0).count());
            prom->set_value(p);
        } catch (const vk::SystemError& e) { // vkCreateShaderModule out of memory
            if (mod) d->destroyShaderModule(mod);
            try {
                fail_system(e, "vkCreateShaderModule", lost_flag.get());
            } catch (...) {
                prom->set_exception(std::current_exception());
            }
        } catch (...) {
            if (mod) d->destroyShaderModule(mod);
            prom->set_exception(std::current_exception());
        }
    });
    return k;
}

Program Device::program(py::bytes spirv, const std::vector<Buffer*>& bufs, std::array<uint32_t, 3> groups,
                        const std::vector<uint32_t>& spec, const std::vector<uint32_t>& push)
{
    std::string s = spirv;
    if (s.size() % 4 != 0 || s.empty()) throw std::invalid_argument("SPIR-V size is not a multiple of 4");
    if (bufs.empty()) throw std::invalid_argument("a program needs at least one buffer");
    check_lost(lost.get());
    auto pc = std::make_shared<ProgramCore>();
    pc->dev = dev;
    // Shaders without push constants get one ignored word, so every layout has a push range (as with
    // Kompute before, whose range sizing needed at least one).
    pc->push = push.empty() ? std::vector<uint32_t>{ 0u } : push;
    pc->groups = groups;
    for (auto* b : bufs) pc->tensors.push_back(b->t);
    uint32_t nbind = (uint32_t)bufs.size(), push_bytes = (uint32_t)(4 * pc->push.size());
    std::lock_guard<std::mutex> lk(m);
    vk::DescriptorSetLayout dsl;
    try { // out of memory here is a session's error like any other allocation's (pc's destructor frees the pool)
        auto [l, pl] = layout_for(nbind, push_bytes);
        dsl = l;
        pc->layout = pl;
        vk::DescriptorPoolSize ps(vk::DescriptorType::eStorageBuffer, nbind);
        pc->pool = dev->createDescriptorPool(vk::DescriptorPoolCreateInfo(vk::DescriptorPoolCreateFlags(), 1, 1, &ps));
        pc->set = dev->allocateDescriptorSets(vk::DescriptorSetAllocateInfo(pc->pool, 1, &dsl))[0];
    } catch (const vk::SystemError& e) {
        fail_system(e, "creating a descriptor set", lost.get());
    }
    std::vector<vk::DescriptorBufferInfo> infos;
    for (auto* b : bufs) infos.push_back(b->t->constructDescriptorBufferInfo());
    std::vector<vk::WriteDescriptorSet> writes;
    for (uint32_t i = 0; i < nbind; i++)
        writes.emplace_back(pc->set, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[i]);
    dev->updateDescriptorSets(writes, nullptr);
    pc->kernel = kernel_for(s, spec, pc->layout, nbind, push_bytes);
    return Program{ pc };
}

} // namespace vki
