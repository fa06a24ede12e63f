// vkinfer's only contact with Kompute: a thin pybind11 module over Kompute's C++ library.
//
// Why one file of about 1,400 lines: it is one pybind11 extension whose parts (instance and devices, buffers
// and the packed layout's packers, kernels and programs over a shared pipeline cache, sequences, the plan
// runner) share the device's locks and lifetimes; split per part it would need a private header of those
// internals. Issue 24 item 6 splits it into instance, buffers, pipelines and sequences behind such a header.
//
// Why not kp's own Python binding: it has no memory barrier op (dependent dispatches race),
// cannot enable device features, and returns wrong views with numpy 2. Here we create the
// instance and device ourselves and use Kompute's kp::Tensor for buffers (memory type choice,
// staging buffer, mapping). Pipelines and command buffers are our own:
//  - kp::Algorithm creates a fresh, empty VkPipelineCache per pipeline and keeps its members
//    private, so it can neither use a cache loaded from disk nor share one pipeline between
//    programs that differ only in their buffers. Our Kernel/Program split does both: one VkPipeline
//    per (SPIR-V, specialization, layout), created through the device's VkPipelineCache on a small
//    worker pool, and one descriptor set per program. MobileNetV2 at 224: 64 programs, 37 distinct
//    pipelines.
//  - kp::Sequence creates and destroys a fence per submit and writes a timestamp after every op
//    without resetting its query pool first (a validation error). Our Sequence keeps one fence,
//    records its ops on the first run (so pipelines still compiling in the background are only
//    waited for then), and keeps a second command buffer bracketed by two timestamps for
//    Sequence.run(timed=True), recorded on the first timed run: on lavapipe the timestamps add about
//    45 us to every submit (95 vs 50 us for one small dispatch), too much to pay on untimed runs.
// Bytes cross the boundary through the buffer protocol or numpy arrays only.
#include <kompute/Kompute.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

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

// One vk::Instance, shared by every Device made from it.
struct Instance {
    std::shared_ptr<vk::Instance> inst;

    Instance()
    {
        vk::ApplicationInfo app("vkinfer", 1, "vkinfer", 1, VK_API_VERSION_1_1);
        vk::InstanceCreateInfo ci(vk::InstanceCreateFlags(), &app);
        inst = std::make_shared<vk::Instance>(vk::createInstance(ci));
    }
    ~Instance()
    {
        if (inst) inst->destroy();
    }

    std::vector<vk::PhysicalDevice> physical() const { return inst->enumeratePhysicalDevices(); }

    vk::PhysicalDevice at(uint32_t index) const
    {
        auto pds = physical();
        if (index >= pds.size())
            throw std::invalid_argument("no Vulkan device with index " + std::to_string(index));
        return pds[index];
    }

    py::list devices() const
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
            out.append(d);
        }
        return out;
    }

    // What a pipeline cache blob is only valid for: the VkPipelineCacheHeaderVersionOne fields plus the
    // device/driver UUIDs and driver version (lavapipe 22.3 reports the same pipelineCacheUUID,
    // "val-%s" unformatted, for every Mesa version, so the UUID alone identifies nothing there).
    py::dict identity(uint32_t index) const
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
};

// --- packing between numpy and the device layout ------------------------------------------------
// The packed form (vkinfer/vulkan/_layout.py is the reference): rows of `width` 8-bit values padded
// with zero bytes to a multiple of 4 and stored 4 per little-endian uint32 word. A 4-D NCHW tensor is
// N*H*W rows of C (NHWC), a 5-D (N, A, B, H, W) one N*H*W rows of A*B, any other rank rows of its
// last axis.

struct Form {
    size_t n = 1, c = 1, hw = 1; // nchw: n images of c planes of hw values; rows: n rows of c values
    bool nchw = false;
    size_t rows() const { return nchw ? n * hw : n; }
    size_t words_per_row() const { return (c + 3) / 4; }
};

size_t mul_checked(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) throw std::invalid_argument("tensor too large");
    return a * b;
}

Form form_of(const std::vector<py::ssize_t>& shape, bool nchw_if_4d)
{
    for (auto s : shape)
        if (s < 0) throw std::invalid_argument("negative dimension in shape");
    Form f;
    size_t r = shape.size();
    if (nchw_if_4d && (r == 4 || r == 5)) {
        f.nchw = true;
        f.n = (size_t)shape[0];
        f.c = r == 4 ? (size_t)shape[1] : mul_checked((size_t)shape[1], (size_t)shape[2]);
        f.hw = mul_checked((size_t)shape[r - 2], (size_t)shape[r - 1]);
        mul_checked(mul_checked(f.n, f.hw), f.c);
        return f;
    }
    if (r == 0) return f; // a scalar: one row of one value
    f.c = (size_t)shape[r - 1];
    for (size_t i = 0; i + 1 < r; i++) f.n = mul_checked(f.n, (size_t)shape[i]);
    return f;
}

size_t packed_bytes(const Form& f) { return mul_checked(mul_checked(f.rows(), f.words_per_row()), 4); }

// Pixels per block: a block's packed words (block * words_per_row) are assembled in a local buffer and
// written out with one memcpy, so device memory sees sequential full-word stores (write-combined host
// memory on some GPUs punishes scattered ones) and the planes are read in 64-byte runs.
size_t block_pixels(size_t wpr) { return std::max<size_t>(1, std::min<size_t>(64, 16384 / std::max<size_t>(wpr, 1))); }

void pack_nchw(const uint8_t* src, uint32_t* dst, const Form& f)
{
    const size_t c = f.c, hw = f.hw, wpr = f.words_per_row();
    if (wpr == 0) return;
    const size_t pb = block_pixels(wpr);
    std::vector<uint32_t> tmp(pb * wpr);
    for (size_t n = 0; n < f.n; n++) {
        const uint8_t* s = src + n * c * hw;
        uint32_t* d = dst + n * hw * wpr;
        for (size_t p0 = 0; p0 < hw; p0 += pb) {
            const size_t np = std::min(pb, hw - p0);
            for (size_t w = 0; w < wpr; w++) {
                const size_t ch = 4 * w;
                const uint8_t* s0 = s + ch * hw + p0;
                const size_t have = std::min<size_t>(4, c - ch);
                uint32_t* t = tmp.data() + w;
                if (have == 4) {
                    const uint8_t *s1 = s0 + hw, *s2 = s1 + hw, *s3 = s2 + hw;
                    for (size_t p = 0; p < np; p++)
                        t[p * wpr] = (uint32_t)s0[p] | (uint32_t)s1[p] << 8 | (uint32_t)s2[p] << 16 |
                                     (uint32_t)s3[p] << 24;
                } else {
                    for (size_t p = 0; p < np; p++) {
                        uint32_t v = 0;
                        for (size_t j = 0; j < have; j++) v |= (uint32_t)s0[j * hw + p] << (8 * j);
                        t[p * wpr] = v;
                    }
                }
            }
            std::memcpy(d + p0 * wpr, tmp.data(), np * wpr * 4);
        }
    }
}

void unpack_nchw(const uint32_t* src, uint8_t* dst, const Form& f)
{
    const size_t c = f.c, hw = f.hw, wpr = f.words_per_row();
    if (wpr == 0) return;
    const size_t pb = block_pixels(wpr);
    std::vector<uint32_t> tmp(pb * wpr);
    for (size_t n = 0; n < f.n; n++) {
        const uint32_t* s = src + n * hw * wpr;
        uint8_t* d = dst + n * c * hw;
        for (size_t p0 = 0; p0 < hw; p0 += pb) {
            const size_t np = std::min(pb, hw - p0);
            std::memcpy(tmp.data(), s + p0 * wpr, np * wpr * 4); // one sequential read of device memory
            for (size_t w = 0; w < wpr; w++) { // each word read once, its bytes to up to 4 planes
                const uint32_t* t = tmp.data() + w;
                const size_t ch = 4 * w, have = std::min<size_t>(4, c - ch);
                uint8_t* o0 = d + ch * hw + p0;
                if (have == 4) {
                    uint8_t *o1 = o0 + hw, *o2 = o1 + hw, *o3 = o2 + hw;
                    for (size_t p = 0; p < np; p++) {
                        const uint32_t v = t[p * wpr];
                        o0[p] = (uint8_t)v;
                        o1[p] = (uint8_t)(v >> 8);
                        o2[p] = (uint8_t)(v >> 16);
                        o3[p] = (uint8_t)(v >> 24);
                    }
                } else {
                    for (size_t j = 0; j < have; j++)
                        for (size_t p = 0; p < np; p++) o0[j * hw + p] = (uint8_t)(t[p * wpr] >> (8 * j));
                }
            }
        }
    }
}

// Rows of `width` bytes into rows of whole words (zero padded), XORing every byte with `flip` (0x80 turns the CPU
// graph's canonical int8 bytes into raw int8 and back). Narrow rows, an RGB image's 3 bytes per pixel above all,
// take a word per row: a memcpy + memset per row cost 10x that (3 -> 4 bytes per pixel of a 224x224 input).
void pack_rows(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip = 0)
{
    const size_t width = f.c, stride = 4 * f.words_per_row();
    if (width == stride && !flip) {
        std::memcpy(dst, src, f.n * width);
        return;
    }
    if (stride == 4) { // 1-4 bytes per row
        const uint32_t fl = flip * 0x01010101u & (width == 4 ? 0xFFFFFFFFu : (1u << (8 * width)) - 1);
        uint32_t* d = reinterpret_cast<uint32_t*>(dst);
        for (size_t r = 0; r < f.n; r++) {
            const uint8_t* s = src + r * width;
            uint32_t v = s[0];
            if (width > 1) v |= (uint32_t)s[1] << 8;
            if (width > 2) v |= (uint32_t)s[2] << 16;
            if (width > 3) v |= (uint32_t)s[3] << 24;
            d[r] = v ^ fl;
        }
        return;
    }
    for (size_t r = 0; r < f.n; r++) {
        uint8_t* d = dst + r * stride;
        const uint8_t* s = src + r * width;
        for (size_t k = 0; k < width; k++) d[k] = s[k] ^ flip;
        std::memset(d + width, 0, stride - width);
    }
}

void unpack_rows(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip = 0)
{
    const size_t width = f.c, stride = 4 * f.words_per_row();
    if (width == stride && !flip) {
        std::memcpy(dst, src, f.n * width);
        return;
    }
    for (size_t r = 0; r < f.n; r++) {
        const uint8_t* s = src + r * stride;
        uint8_t* d = dst + r * width;
        for (size_t k = 0; k < width; k++) d[k] = s[k] ^ flip;
    }
}

// Through Python attributes and the buffer protocol only: pybind11 2.10's dtype accessors (kind(),
// itemsize()) read numpy 1.x's descriptor layout and return garbage under numpy 2.
void check_8bit(const py::object& dtype, const char* what)
{
    std::string kind = py::str(dtype.attr("kind"));
    if ((kind != "u" && kind != "i") || dtype.attr("itemsize").cast<int>() != 1)
        throw py::type_error(std::string(what) + " must be uint8 or int8, got " + std::string(py::str(dtype)));
}

// --- buffers ---------------------------------------------------------------------------------------

struct Buffer {
    std::shared_ptr<kp::Tensor> t;
    size_t nbytes;

    // eDevice: device memory plus a host-visible staging copy (uploads/downloads record copies);
    // eHost: host-visible memory the shaders read directly (unified memory: nothing to copy);
    // eStorage: device memory only (intermediates).
    bool host_visible() const { return t->tensorType() != kp::Tensor::TensorTypes::eStorage; }
    bool direct() const { return t->tensorType() == kp::Tensor::TensorTypes::eHost; }
    std::string kind() const
    {
        switch (t->tensorType()) {
            case kp::Tensor::TensorTypes::eDevice: return "staged";
            case kp::Tensor::TensorTypes::eHost: return "direct";
            default: return "device";
        }
    }
    uint8_t* host() const
    {
        if (!host_visible()) throw std::invalid_argument("buffer has no host-visible memory (made with staged=False)");
        return static_cast<uint8_t*>(t->rawData());
    }

    void write(py::buffer b, size_t offset)
    {
        py::buffer_info info = b.request();
        size_t n = (size_t)info.size * (size_t)info.itemsize;
        uint8_t* h = host();
        if (!PyBuffer_IsContiguous(info.view(), 'C'))
            throw std::invalid_argument("write needs a C-contiguous buffer");
        if (offset > nbytes || n > nbytes - offset)
            throw std::invalid_argument("write of " + std::to_string(n) + " bytes at offset " +
                                        std::to_string(offset) + " overflows a " +
                                        std::to_string(nbytes) + "-byte buffer");
        std::memcpy(h + offset, info.ptr, n);
    }

    void read_into(py::buffer b, size_t offset)
    {
        py::buffer_info info = b.request(true);
        size_t n = (size_t)info.size * (size_t)info.itemsize;
        uint8_t* h = host();
        if (!PyBuffer_IsContiguous(info.view(), 'C'))
            throw std::invalid_argument("read_into needs a C-contiguous writable buffer");
        if (offset > nbytes || n > nbytes - offset)
            throw std::invalid_argument("read past the end of the buffer");
        std::memcpy(info.ptr, h + offset, n);
    }

    void check_fits(const Form& f, const char* what) const
    {
        size_t need = packed_bytes(f);
        if (need > nbytes)
            throw std::invalid_argument(std::string(what) + ": the packed tensor takes " + std::to_string(need) +
                                        " bytes, the buffer has " + std::to_string(nbytes));
    }

    // A pack (host array -> this buffer's packed layout) checked and set up with the GIL held, run without it.
    struct PackJob {
        Form f;
        const uint8_t* src = nullptr;
        uint8_t* h = nullptr;
        uint8_t flip = 0;
        py::buffer_info keep; // the array's buffer, released with the GIL held
        void run() const
        {
            if (f.nchw)
                pack_nchw(src, reinterpret_cast<uint32_t*>(h), f);
            else
                pack_rows(src, h, f, flip);
        }
    };
    struct UnpackJob {
        Form f;
        const uint8_t* h = nullptr;
        uint8_t* dst = nullptr;
        uint8_t flip = 0;
        py::object out;
        py::buffer_info keep;
        void run() const
        {
            if (f.nchw)
                unpack_nchw(reinterpret_cast<const uint32_t*>(h), dst, f);
            else
                unpack_rows(h, dst, f, flip);
        }
    };

    PackJob prepare_write(const py::object& x, bool nchw, uint8_t flip)
    {
        if (!py::hasattr(x, "dtype") || !PyObject_CheckBuffer(x.ptr()))
            throw py::type_error("packing needs a numpy array");
        check_8bit(x.attr("dtype"), "write_nchw/write_rows data");
        PackJob j;
        j.keep = py::reinterpret_borrow<py::buffer>(x).request();
        if (!PyBuffer_IsContiguous(j.keep.view(), 'C')) throw std::invalid_argument("packing needs a C-contiguous array");
        j.f = form_of(j.keep.shape, nchw);
        check_fits(j.f, "write");
        j.h = host();
        j.src = static_cast<const uint8_t*>(j.keep.ptr);
        j.flip = flip;
        return j;
    }

    UnpackJob prepare_read(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw, uint8_t flip)
    {
        py::module_ np = py::module_::import("numpy");
        py::object dt = np.attr("dtype")(dtype);
        check_8bit(dt, "dtype");
        UnpackJob j;
        j.f = form_of(shape, nchw);
        check_fits(j.f, "read");
        j.h = host();
        j.out = np.attr("empty")(py::tuple(py::cast(shape)), dt);
        j.keep = py::reinterpret_borrow<py::buffer>(j.out).request(true);
        j.dst = static_cast<uint8_t*>(j.keep.ptr);
        j.flip = flip;
        return j;
    }

    void write_packed(const py::object& x, bool nchw, uint8_t flip = 0)
    {
        PackJob j = prepare_write(x, nchw, flip);
        py::gil_scoped_release nogil;
        j.run();
    }

    py::object read_packed(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw,
                           uint8_t flip = 0)
    {
        UnpackJob j = prepare_read(shape, dtype, nchw, flip);
        {
            py::gil_scoped_release nogil;
            j.run();
        }
        return j.out;
    }
};

// --- pipeline creation: a small worker pool --------------------------------------------------------
// vkCreateComputePipelines may be called from several threads at once (the device and the pipeline
// cache are internally synchronized). On lavapipe 22.3 one pipeline costs 5-15 ms of SPIR-V -> NIR
// translation and optimization that no cache persists (its VkPipelineCache is a stub returning a 32-byte
// header), so creating them on every core while Python goes on building the session is the one lever.
class Workers {
  public:
    explicit Workers(unsigned n) : n_(n) {}
    ~Workers() { shutdown(); }

    void submit(std::function<void()> f)
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

    // Wait until every submitted task has finished.
    void drain()
    {
        std::unique_lock<std::mutex> lk(m_);
        idle_.wait(lk, [this] { return pending_ == 0; });
    }

    void shutdown()
    {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
        threads_.clear();
    }

  private:
    void loop()
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

    unsigned n_;
    std::mutex m_;
    std::condition_variable cv_, idle_;
    std::deque<std::function<void()>> q_;
    std::vector<std::thread> threads_;
    size_t pending_ = 0;
    bool stop_ = false;
};

// One VkPipeline, shared by every Program with the same SPIR-V, specialization and layout.
struct Kernel {
    std::shared_ptr<vk::Device> dev;
    std::shared_future<vk::Pipeline> pipe;

    vk::Pipeline pipeline() const { return pipe.get(); } // waits; rethrows a creation error
    ~Kernel()
    {
        if (!pipe.valid()) return;
        try {
            vk::Pipeline p = pipe.get();
            if (p) dev->destroyPipeline(p);
        } catch (...) {
        }
    }
};

// A kernel bound to its buffers: a descriptor set, push constants and a dispatch size.
struct ProgramCore {
    std::shared_ptr<vk::Device> dev;
    std::shared_ptr<Kernel> kernel;
    vk::PipelineLayout layout; // owned by the Device's layout cache
    vk::DescriptorPool pool;
    vk::DescriptorSet set;
    std::vector<std::shared_ptr<kp::Tensor>> tensors; // the buffers live as long as the program
    std::vector<uint32_t> push;
    std::array<uint32_t, 3> groups{};

    ~ProgramCore()
    {
        if (pool) dev->destroyDescriptorPool(pool);
    }

    void record(const vk::CommandBuffer& cb) const
    {
        cb.bindPipeline(vk::PipelineBindPoint::eCompute, kernel->pipeline());
        cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, layout, 0, 1, &set, 0, nullptr);
        cb.pushConstants(layout, vk::ShaderStageFlagBits::eCompute, 0, (uint32_t)(4 * push.size()), push.data());
        cb.dispatch(groups[0], groups[1], groups[2]);
    }
};

struct Program {
    std::shared_ptr<ProgramCore> p;
    bool ready() const
    {
        return p->kernel->pipe.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    void wait() const
    {
        py::gil_scoped_release nogil;
        p->kernel->pipeline();
    }
};

// --- command sequences -----------------------------------------------------------------------------

// All earlier transfer/shader writes available and visible to all later transfers, shaders and host
// reads: one global barrier (cheaper to record than per-buffer ones and as fast on every driver we ran).
void global_barrier(const vk::CommandBuffer& cb)
{
    vk::MemoryBarrier mb(vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderWrite,
                         vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite |
                           vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite |
                           vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                       vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader |
                         vk::PipelineStageFlagBits::eHost,
                       vk::DependencyFlags(), 1, &mb, 0, nullptr, 0, nullptr);
}

// Device writes -> host reads. A fence wait alone does not make device writes visible to the host: the
// writes must be made available to the host domain by a barrier whose destination is HOST / HOST_READ.
void host_read_barrier(const vk::CommandBuffer& cb)
{
    vk::MemoryBarrier mb(vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderWrite,
                         vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                       vk::PipelineStageFlagBits::eHost, vk::DependencyFlags(), 1, &mb, 0, nullptr, 0, nullptr);
}

struct SeqOp {
    enum Kind { Upload, Download, HostRead, Dispatch, Barrier } kind;
    std::vector<std::shared_ptr<kp::Tensor>> ts;
    std::shared_ptr<ProgramCore> prog;
};

struct DeviceCore; // fwd

struct Sequence {
    std::shared_ptr<vk::Device> dev;
    vk::Queue queue;
    vk::CommandPool pool;
    vk::CommandBuffer cbs[2];     // [0] plain, [1] with timestamps; each recorded on its first use
    bool recorded_cb[2] = { false, false };
    vk::Fence fence;
    vk::QueryPool queries; // two timestamps around the commands, where the queue supports them
    double period_ns = 1.0;
    uint64_t ts_mask = ~0ull;
    std::vector<SeqOp> ops;
    bool recorded = false;
    bool commands = false; // anything but global barriers recorded

    Sequence(std::shared_ptr<vk::Device> d, vk::Queue q, uint32_t family, uint32_t ts_bits, float period)
      : dev(std::move(d)), queue(q)
    {
        pool = dev->createCommandPool(vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlags(), family));
        auto cb = dev->allocateCommandBuffers(vk::CommandBufferAllocateInfo(pool, vk::CommandBufferLevel::ePrimary, 2));
        cbs[0] = cb[0];
        cbs[1] = cb[1];
        fence = dev->createFence(vk::FenceCreateInfo());
        if (ts_bits > 0) {
            queries = dev->createQueryPool(vk::QueryPoolCreateInfo(vk::QueryPoolCreateFlags(), vk::QueryType::eTimestamp, 2));
            period_ns = period;
            ts_mask = ts_bits >= 64 ? ~0ull : ((1ull << ts_bits) - 1);
        }
    }
    ~Sequence()
    {
        if (queries) dev->destroyQueryPool(queries);
        dev->destroyFence(fence);
        dev->freeCommandBuffers(pool, 2, cbs); // implied by destroying the pool; explicit for clarity
        dev->destroyCommandPool(pool);
    }
    Sequence(const Sequence&) = delete;
    Sequence& operator=(const Sequence&) = delete;

    void add(SeqOp op)
    {
        if (recorded)
            throw std::runtime_error("this sequence has already run: record every command before the first run()");
        if (op.kind != SeqOp::Barrier) commands = true;
        ops.push_back(std::move(op));
    }

    void upload(const std::vector<Buffer*>& bs)
    {
        SeqOp op{ SeqOp::Upload, {}, nullptr };
        for (auto* b : bs) {
            if (!b->host_visible()) throw std::invalid_argument("upload/download needs a buffer made with staged=True");
            // Direct (host-visible, device-local) memory: the host's writes before vkQueueSubmit are made
            // visible to the device by the submission itself; there is nothing to copy.
            if (!b->direct()) op.ts.push_back(b->t);
        }
        if (!op.ts.empty()) add(std::move(op));
    }

    void download(const std::vector<Buffer*>& bs)
    {
        SeqOp op{ SeqOp::Download, {}, nullptr };
        bool direct = false;
        size_t copies = 0;
        for (auto* b : bs) {
            if (!b->host_visible()) throw std::invalid_argument("upload/download needs a buffer made with staged=True");
            if (b->direct())
                direct = true;
            else
                op.ts.push_back(b->t);
        }
        copies = op.ts.size();
        if (copies) {
            // Copies read what earlier shaders wrote: order them, then make the copies host-visible.
            add(SeqOp{ SeqOp::Barrier, {}, nullptr });
            add(std::move(op));
        }
        // Copies or shader writes of direct memory -> host reads after the fence wait.
        if (direct || copies) add(SeqOp{ SeqOp::HostRead, {}, nullptr });
    }

    void dispatch(const Program& p) { add(SeqOp{ SeqOp::Dispatch, {}, p.p }); }
    void barrier() { add(SeqOp{ SeqOp::Barrier, {}, nullptr }); }

    void record(const vk::CommandBuffer& cb, bool timed)
    {
        cb.begin(vk::CommandBufferBeginInfo());
        if (timed) {
            cb.resetQueryPool(queries, 0, 2);
            cb.writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, queries, 0);
        }
        for (auto& op : ops) {
            switch (op.kind) {
                case SeqOp::Upload:
                    for (auto& t : op.ts) t->recordCopyFromStagingToDevice(cb);
                    break;
                case SeqOp::Download:
                    for (auto& t : op.ts) t->recordCopyFromDeviceToStaging(cb);
                    break;
                case SeqOp::HostRead: host_read_barrier(cb); break;
                case SeqOp::Dispatch: op.prog->record(cb); break;
                case SeqOp::Barrier: global_barrier(cb); break;
            }
        }
        if (timed) cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, queries, 1);
        cb.end();
    }

    std::optional<uint64_t> run_nogil(bool timed) // the GIL released by the caller
    {
        if (!commands) {
            // Only global barriers (e.g. an upload of direct memory followed by a barrier): every earlier
            // submit was waited for, and every sequence starts with its own barrier, so there is nothing
            // to order. Skipping the submit saves 30-60 us per constant upload on lavapipe.
            recorded = true;
            if (timed && queries) return 0;
            return std::nullopt;
        }
        const bool use_ts = timed && queries;
        recorded = true; // no more ops: they would be missing from the command buffer recorded here
        if (!recorded_cb[use_ts]) {
            try {
                record(cbs[use_ts], use_ts); // waits here for pipelines still being created
            } catch (...) {
                dev->resetCommandPool(pool); // both buffers back to the initial state: a later run retries
                recorded_cb[0] = recorded_cb[1] = false;
                throw;
            }
            recorded_cb[use_ts] = true;
        }
        vk::SubmitInfo si(0, nullptr, nullptr, 1, &cbs[use_ts]);
        if (queue.submit(1, &si, fence) != vk::Result::eSuccess) throw std::runtime_error("vkQueueSubmit failed");
        vk::Result r = dev->waitForFences(1, &fence, VK_TRUE, UINT64_MAX);
        if (r != vk::Result::eSuccess) throw std::runtime_error("vkWaitForFences: " + vk::to_string(r));
        if (dev->resetFences(1, &fence) != vk::Result::eSuccess) throw std::runtime_error("vkResetFences failed");
        if (!use_ts) return std::nullopt;
        uint64_t ts[2] = { 0, 0 };
        r = dev->getQueryPoolResults(queries, 0, 2, sizeof ts, ts, sizeof(uint64_t),
                                     vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
        if (r != vk::Result::eSuccess) throw std::runtime_error("vkGetQueryPoolResults: " + vk::to_string(r));
        uint64_t ticks = (ts[1] - ts[0]) & ts_mask;
        return (uint64_t)((double)ticks * period_ns + 0.5);
    }

    std::optional<uint64_t> run(bool timed)
    {
        py::gil_scoped_release nogil;
        return run_nogil(timed);
    }

    // One inference of a segment in one call: pack the inputs into their buffers, submit, wait, unpack the
    // outputs, with no Python between the fence wait and the unpacking (output arrays are allocated first).
    // On lavapipe the device's work evicts the interpreter from the CPU caches: a Python-level unpack of
    // MobileNetV2's 1000 logits took 67-90 us right after the wait against 3.8 us warm.
    //   ins:  [(buffer, array, nchw, flip)]; outs: [(buffer, shape, dtype, nchw, flip)]
    //   -> (output arrays, device ns or None)
    py::tuple run_io(const py::list& ins, const py::list& outs, bool timed)
    {
        std::vector<Buffer::PackJob> packs;
        std::vector<Buffer::UnpackJob> unpacks;
        packs.reserve(ins.size());
        unpacks.reserve(outs.size());
        for (const auto& item : ins) {
            auto t = item.cast<py::tuple>();
            if (t.size() != 4) throw std::invalid_argument("run_io: inputs are (buffer, array, nchw, flip)");
            packs.push_back(t[0].cast<Buffer&>().prepare_write(t[1], t[2].cast<bool>(), t[3].cast<uint8_t>()));
        }
        for (const auto& item : outs) {
            auto t = item.cast<py::tuple>();
            if (t.size() != 5) throw std::invalid_argument("run_io: outputs are (buffer, shape, dtype, nchw, flip)");
            unpacks.push_back(t[0].cast<Buffer&>().prepare_read(t[1].cast<std::vector<py::ssize_t>>(), t[2],
                                                                 t[3].cast<bool>(), t[4].cast<uint8_t>()));
        }
        std::optional<uint64_t> ns;
        {
            py::gil_scoped_release nogil;
            for (const auto& j : packs) j.run();
            ns = run_nogil(timed);
            for (const auto& j : unpacks) j.run();
        }
        py::list res;
        for (auto& j : unpacks) res.append(j.out);
        return py::make_tuple(res, ns ? py::object(py::int_(*ns)) : py::object(py::none()));
    }
};


// --- a whole plan of CPU and Vulkan segments in one call ----------------------------------------------
// vkinfer's plan (vkinfer/compiler/plan.py) is a list of segments; where none runs on the host, PlanRunner
// runs them all without returning to Python: each CPU segment's native graph through vki_graph_run's address
// (resolved by ctypes from whichever libvkinfer_cpu the package loaded, as vkinfer._fastrun does), each
// Vulkan segment as pack, submit, wait, unpack. Tensors between segments live in host arrays ("slots")
// allocated once with the plan; the caller holds the devices' locks, and this runner's own mutex
// serialises runs over its slots. Why: on lavapipe, the Python between MobileNetV2's three segments cost
// 200-260 us per run (a device that shares the CPU evicts the interpreter: 1000 logits took 67-90 us to
// unpack right after the wait, 3.8 us warm) beside 120 us in the native code itself.
typedef int (*graph_run_fn)(void* g, void* const* ext, uint32_t threads);

struct PlanRunner {
    struct Move { // a slot <-> a device buffer in its packed layout
        size_t slot;
        Buffer* buf;
        Form f;
        uint8_t flip;
    };
    struct Step {
        bool vulkan = false;
        graph_run_fn fn = nullptr; // cpu
        void* graph = nullptr;
        uint32_t threads = 0;
        std::vector<size_t> ext;
        Sequence* seq = nullptr;   // vulkan
        std::vector<Move> packs, unpacks;
    };
    size_t n_in = 0, n_out = 0;
    std::vector<size_t> slot_bytes;
    std::vector<uint8_t*> slot_ptr; // persistent slots (the per-run ones are filled in by run)
    std::vector<Step> steps;
    std::vector<py::object> keep; // graphs' owners, sequences, buffers and slot arrays stay alive
    std::vector<py::buffer_info> views;
    std::mutex m;

    static size_t as_size(const py::handle& h) { return h.cast<size_t>(); }

    // slots: [bytes of every slot]; persistent: {slot: array}; steps: ("cpu", fn, graph, owner, [slot], threads)
    // or ("vulkan", sequence, [(slot, buffer, shape, nchw, flip)] packs, [... ] unpacks)
    PlanRunner(size_t ins, size_t outs, const std::vector<size_t>& bytes, const py::dict& persistent,
               const py::list& step_list)
      : n_in(ins), n_out(outs), slot_bytes(bytes), slot_ptr(bytes.size(), nullptr)
    {
        if (n_in + n_out > slot_bytes.size()) throw std::invalid_argument("PlanRunner: fewer slots than inputs and outputs");
        for (auto item : persistent) {
            size_t k = as_size(item.first);
            if (k < n_in + n_out || k >= slot_bytes.size()) throw std::invalid_argument("PlanRunner: bad persistent slot");
            py::object a = py::reinterpret_borrow<py::object>(item.second);
            views.push_back(py::reinterpret_borrow<py::buffer>(a).request(true));
            const auto& v = views.back();
            if (!PyBuffer_IsContiguous(v.view(), 'C') || (size_t)(v.size * v.itemsize) != slot_bytes[k])
                throw std::invalid_argument("PlanRunner: a persistent slot's array has the wrong size or layout");
            slot_ptr[k] = static_cast<uint8_t*>(v.ptr);
            keep.push_back(a);
        }
        for (size_t k = n_in + n_out; k < slot_bytes.size(); k++)
            if (!slot_ptr[k]) throw std::invalid_argument("PlanRunner: an intermediate slot has no array");
        for (auto h : step_list) {
            auto t = h.cast<py::tuple>();
            Step st;
            std::string kind = t[0].cast<std::string>();
            if (kind == "cpu") {
                if (t.size() != 6) throw std::invalid_argument("PlanRunner: cpu steps are (\"cpu\", fn, graph, owner, ext, threads)");
                st.fn = reinterpret_cast<graph_run_fn>(t[1].cast<uintptr_t>());
                st.graph = reinterpret_cast<void*>(t[2].cast<uintptr_t>());
                if (!st.fn || !st.graph) throw std::invalid_argument("PlanRunner: NULL graph or function");
                keep.push_back(py::reinterpret_borrow<py::object>(t[3]));
                for (auto e : t[4].cast<py::list>()) {
                    size_t k = as_size(e);
                    if (k >= slot_bytes.size()) throw std::invalid_argument("PlanRunner: slot out of range");
                    st.ext.push_back(k);
                }
                st.threads = t[5].cast<uint32_t>();
            } else if (kind == "vulkan") {
                if (t.size() != 4) throw std::invalid_argument("PlanRunner: vulkan steps are (\"vulkan\", seq, packs, unpacks)");
                st.vulkan = true;
                st.seq = &t[1].cast<Sequence&>();
                keep.push_back(py::reinterpret_borrow<py::object>(t[1]));
                for (int which = 0; which < 2; which++) {
                    for (auto mh : t[2 + which].cast<py::list>()) {
                        auto mt = mh.cast<py::tuple>();
                        Move mv;
                        mv.slot = as_size(mt[0]);
                        if (mv.slot >= slot_bytes.size()) throw std::invalid_argument("PlanRunner: slot out of range");
                        mv.buf = &mt[1].cast<Buffer&>();
                        keep.push_back(py::reinterpret_borrow<py::object>(mt[1]));
                        mv.f = form_of(mt[2].cast<std::vector<py::ssize_t>>(), mt[3].cast<bool>());
                        mv.flip = mt[4].cast<uint8_t>();
                        mv.buf->check_fits(mv.f, which ? "read" : "write");
                        mv.buf->host(); // throws for a buffer without host-visible memory
                        if (mv.f.n * mv.f.c * mv.f.hw != slot_bytes[mv.slot])
                            throw std::invalid_argument("PlanRunner: a packed tensor differs in size from its slot");
                        (which ? st.unpacks : st.packs).push_back(mv);
                    }
                }
            } else {
                throw std::invalid_argument("PlanRunner: unknown step kind " + kind);
            }
            steps.push_back(std::move(st));
        }
        map_copies();
    }

    // A pack that is a plain copy (rows already padded to whole words, no XOR: a CPU quantize writing the device
    // layout, or uint8 rows of a multiple of 4) of an intermediate slot that one earlier CPU graph writes and
    // nothing else touches: the graph writes straight into the buffer's host-visible memory instead, and the
    // copy goes. MobileNetV2's 224x224x3 input: the 22 us row pack on lavapipe.
    std::vector<size_t> mapped; // slots now living in a device buffer's memory
    void map_copies()
    {
        std::vector<int> uses(slot_bytes.size(), 0), writer(slot_bytes.size(), -1);
        for (size_t i = 0; i < steps.size(); i++) {
            for (size_t k : steps[i].ext) {
                uses[k]++;
                if (writer[k] < 0) writer[k] = (int)i;
            }
            for (const auto& mv : steps[i].packs) uses[mv.slot]++;
            for (const auto& mv : steps[i].unpacks) uses[mv.slot]++;
        }
        for (size_t i = 0; i < steps.size(); i++) {
            auto& packs = steps[i].packs;
            for (size_t j = 0; j < packs.size();) {
                const Move& mv = packs[j];
                bool plain = !mv.f.nchw && mv.flip == 0 && mv.f.c == 4 * mv.f.words_per_row();
                // writer: only CPU steps list ext slots
                if (plain && mv.slot >= n_in + n_out && uses[mv.slot] == 2 && writer[mv.slot] >= 0 &&
                    (size_t)writer[mv.slot] < i) {
                    slot_ptr[mv.slot] = mv.buf->host();
                    mapped.push_back(mv.slot);
                    packs.erase(packs.begin() + (std::ptrdiff_t)j);
                } else {
                    j++;
                }
            }
        }
    }

    // inputs and outputs: C-contiguous arrays of exactly their slots' sizes (outputs writable). Returns
    // (status of the first failing CPU graph or 0, [device ns of each Vulkan step, or None]).
    py::tuple run(const py::list& inputs, const py::list& outputs, bool timed)
    {
        if (inputs.size() != n_in || outputs.size() != n_out)
            throw std::invalid_argument("PlanRunner.run: wrong number of inputs or outputs");
        std::vector<py::buffer_info> io;
        io.reserve(n_in + n_out);
        std::vector<uint8_t*> ptr(slot_ptr);
        for (size_t k = 0; k < n_in + n_out; k++) {
            py::handle h = k < n_in ? inputs[k] : outputs[k - n_in];
            io.push_back(py::reinterpret_borrow<py::buffer>(h).request(k >= n_in));
            const auto& v = io.back();
            if (!PyBuffer_IsContiguous(v.view(), 'C') || (size_t)(v.size * v.itemsize) != slot_bytes[k])
                throw std::invalid_argument("PlanRunner.run: array " + std::to_string(k) + " has " +
                                            std::to_string(v.size * v.itemsize) + " bytes or a strided layout, its slot " +
                                            std::to_string(slot_bytes[k]) + " bytes");
            ptr[k] = static_cast<uint8_t*>(v.ptr);
        }
        std::vector<std::optional<uint64_t>> ns;
        int status;
        {
            py::gil_scoped_release nogil;
            status = run_steps(ptr, timed, ns);
        }
        py::list out_ns;
        for (const auto& v : ns) out_ns.append(v ? py::object(py::int_(*v)) : py::object(py::none()));
        return py::make_tuple(status, out_ns);
    }

    // The GIL released by the caller; ptr: every slot's address.
    int run_steps(std::vector<uint8_t*>& ptr, bool timed, std::vector<std::optional<uint64_t>>& ns)
    {
        int status = 0;
        {
            std::lock_guard<std::mutex> lk(m);
            std::vector<void*> ext;
            for (const auto& st : steps) {
                if (!st.vulkan) {
                    ext.assign(st.ext.size(), nullptr);
                    for (size_t i = 0; i < st.ext.size(); i++) ext[i] = ptr[st.ext[i]];
                    status = st.fn(st.graph, ext.data(), st.threads);
                    if (status) break;
                    continue;
                }
                for (const auto& mv : st.packs) {
                    if (mv.f.nchw)
                        pack_nchw(ptr[mv.slot], reinterpret_cast<uint32_t*>(mv.buf->host()), mv.f);
                    else
                        pack_rows(ptr[mv.slot], mv.buf->host(), mv.f, mv.flip);
                }
                ns.push_back(st.seq->run_nogil(timed));
                for (const auto& mv : st.unpacks) {
                    if (mv.f.nchw)
                        unpack_nchw(reinterpret_cast<const uint32_t*>(mv.buf->host()), ptr[mv.slot], mv.f);
                    else
                        unpack_rows(mv.buf->host(), ptr[mv.slot], mv.f, mv.flip);
                }
            }
        }
        return status;
    }

    // --- the session's common call, whole in C++ ---------------------------------------------------------
    // On lavapipe the Python of a run (the session's call, the feed checks, numpy.empty, the lock) took 71 us
    // (median, MobileNetV2, pinned): the device's work on the same core evicts the interpreter from the caches,
    // so each bytecode runs cold. run_feed does those steps here.
    struct FeedSpec {
        py::object name;
        std::string format;
        std::vector<py::ssize_t> shape;
    };
    std::vector<FeedSpec> feed_in;
    py::list out_args;           // (shape, dtype) per output, for numpy.empty
    py::object ndarray, empty;
    std::vector<py::object> locks;  // the devices' threading locks, taken in order
    std::vector<py::object> vk_segs; // their `timed` read per run, `last_device_ns` set after a timed run
    bool feed_ready = false;

    void set_feed(const py::list& names, const py::list& formats, const py::list& shapes, const py::list& outs,
                  py::object nd, py::object emp, const py::list& lks, const py::list& segs)
    {
        if (names.size() != n_in || formats.size() != n_in || shapes.size() != n_in || outs.size() != n_out)
            throw std::invalid_argument("PlanRunner.set_feed: one name, format and shape per input, (shape, dtype) per output");
        feed_in.clear();
        for (size_t k = 0; k < n_in; k++)
            feed_in.push_back(FeedSpec{ py::reinterpret_borrow<py::object>(names[k]), formats[k].cast<std::string>(),
                                        shapes[k].cast<std::vector<py::ssize_t>>() });
        out_args = outs;
        ndarray = std::move(nd);
        empty = std::move(emp);
        locks.clear();
        for (auto h : lks) locks.push_back(py::reinterpret_borrow<py::object>(h));
        vk_segs.clear();
        for (auto h : segs) vk_segs.push_back(py::reinterpret_borrow<py::object>(h));
        feed_ready = true;
    }

    // feed: a dict of exactly the inputs as C-contiguous ndarrays of their format and shape. Returns the list of
    // new output arrays, a nonzero int (a CPU graph's status: the caller raises its error), or None for any other
    // feed (the caller's checked path takes it, and names what is wrong).
    py::object run_feed(py::handle feed)
    {
        if (!feed_ready) throw std::runtime_error("PlanRunner.run_feed before set_feed");
        PyObject* f = feed.ptr();
        if (!PyDict_CheckExact(f) || (size_t)PyDict_GET_SIZE(f) != n_in) return py::none();
        std::vector<py::buffer_info> io;
        io.reserve(n_in + n_out);
        std::vector<uint8_t*> ptr(slot_ptr);
        for (size_t k = 0; k < n_in; k++) {
            const auto& sp = feed_in[k];
            PyObject* v = PyDict_GetItemWithError(f, sp.name.ptr());
            if (!v) {
                if (PyErr_Occurred()) throw py::error_already_set();
                return py::none();
            }
            if ((PyObject*)Py_TYPE(v) != ndarray.ptr()) return py::none();
            auto* view = new Py_buffer;
            if (PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
                delete view;
                PyErr_Clear(); // strided: the checked path copies it
                return py::none();
            }
            io.emplace_back(view, true); // owns the view from here (released and deleted with it)
            const auto& b = io.back();
            bool ok = (size_t)(b.size * b.itemsize) == slot_bytes[k] && b.format == sp.format &&
                      b.shape.size() == sp.shape.size();
            for (size_t d = 0; ok && d < b.shape.size(); d++) ok = b.shape[d] == sp.shape[d];
            if (!ok) return py::none();
            ptr[k] = static_cast<uint8_t*>(b.ptr);
        }
        py::list res(n_out);
        for (size_t k = 0; k < n_out; k++) {
            py::object a = empty(*out_args[k].cast<py::tuple>());
            io.push_back(py::reinterpret_borrow<py::buffer>(a).request(true));
            const auto& b = io.back();
            if ((size_t)(b.size * b.itemsize) != slot_bytes[n_in + k] || !PyBuffer_IsContiguous(b.view(), 'C'))
                throw std::runtime_error("internal: an output array differs from its slot");
            ptr[n_in + k] = static_cast<uint8_t*>(b.ptr);
            res[k] = a;
        }
        bool timed = false;
        for (const auto& s : vk_segs) timed = timed || s.attr("timed").cast<bool>();
        std::vector<std::optional<uint64_t>> ns;
        int status;
        size_t held = 0;
        try {
            for (; held < locks.size(); held++) locks[held].attr("acquire")();
            {
                py::gil_scoped_release nogil;
                status = run_steps(ptr, timed, ns);
            }
        } catch (...) {
            while (held) locks[--held].attr("release")();
            throw;
        }
        while (held) locks[--held].attr("release")();
        if (status) return py::int_(status);
        if (timed)
            for (size_t i = 0; i < vk_segs.size() && i < ns.size(); i++)
                vk_segs[i].attr("last_device_ns") = ns[i] ? py::object(py::int_(*ns[i])) : py::object(py::none());
        return res;
    }
};

// --- the device ------------------------------------------------------------------------------------

struct Device {
    std::shared_ptr<Instance> instance;
    std::shared_ptr<vk::PhysicalDevice> pd;
    std::shared_ptr<vk::Device> dev;
    vk::Queue queue;
    uint32_t family = 0;
    uint32_t ts_bits = 0;
    float ts_period = 1.0f;
    bool unified = false;
    vk::PipelineCache pcache;
    size_t pcache_initial = 0;
    std::unique_ptr<Workers> workers;

    std::mutex m; // guards the maps below (program() may run without the GIL in future callers)
    std::map<std::pair<uint32_t, uint32_t>, std::pair<vk::DescriptorSetLayout, vk::PipelineLayout>> layouts;
    std::unordered_map<std::string, std::weak_ptr<Kernel>> kernels;
    size_t kernel_inserts = 0;
    std::atomic<uint64_t> created{ 0 }, create_ns{ 0 };
    uint64_t reused = 0;

    Device(std::shared_ptr<Instance> in, uint32_t index, py::bytes cache_data, unsigned threads)
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
        dev = std::make_shared<vk::Device>(pd->createDevice(dci));
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

    ~Device()
    {
        if (!dev) return;
        workers->shutdown(); // finishes queued pipeline creations before their device goes
        kernels.clear();
        dev->waitIdle();
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
    bool detect_unified()
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

    Buffer buffer(size_t nbytes, const std::string& kind)
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
        bool mapped = tt != kp::Tensor::TensorTypes::eStorage;
        std::vector<uint32_t> zeros(mapped ? words : 1, 0u); // Kompute copies initial data into mapped memory
        auto t = std::make_shared<kp::Tensor>(pd, dev, zeros.data(), (uint32_t)words, 4,
                                              kp::Tensor::TensorDataTypes::eUnsignedInt, tt);
        return Buffer{ t, words * 4 };
    }

    std::pair<vk::DescriptorSetLayout, vk::PipelineLayout> layout_for(uint32_t nbind, uint32_t push_bytes)
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

    std::shared_ptr<Kernel> kernel_for(const std::string& spirv, const std::vector<uint32_t>& spec,
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
                reused++;
                return k;
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
        workers->submit([d, cache, layout, code, spec, prom, n_created, n_ns] {
            auto t0 = std::chrono::steady_clock::now();
            vk::ShaderModule mod;
            try {
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
                if (r != vk::Result::eSuccess) throw std::runtime_error("vkCreateComputePipelines: " + vk::to_string(r));
                n_created->fetch_add(1);
                n_ns->fetch_add((uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - t0).count());
                prom->set_value(p);
            } catch (...) {
                if (mod) d->destroyShaderModule(mod);
                prom->set_exception(std::current_exception());
            }
        });
        return k;
    }

    Program program(py::bytes spirv, const std::vector<Buffer*>& bufs, std::array<uint32_t, 3> groups,
                    const std::vector<uint32_t>& spec, const std::vector<uint32_t>& push)
    {
        std::string s = spirv;
        if (s.size() % 4 != 0 || s.empty()) throw std::invalid_argument("SPIR-V size is not a multiple of 4");
        if (bufs.empty()) throw std::invalid_argument("a program needs at least one buffer");
        auto pc = std::make_shared<ProgramCore>();
        pc->dev = dev;
        // Shaders without push constants get one ignored word, so every layout has a push range (as with
        // Kompute before, whose range sizing needed at least one).
        pc->push = push.empty() ? std::vector<uint32_t>{ 0u } : push;
        pc->groups = groups;
        for (auto* b : bufs) pc->tensors.push_back(b->t);
        uint32_t nbind = (uint32_t)bufs.size(), push_bytes = (uint32_t)(4 * pc->push.size());
        std::lock_guard<std::mutex> lk(m);
        auto [dsl, pl] = layout_for(nbind, push_bytes);
        pc->layout = pl;
        vk::DescriptorPoolSize ps(vk::DescriptorType::eStorageBuffer, nbind);
        pc->pool = dev->createDescriptorPool(vk::DescriptorPoolCreateInfo(vk::DescriptorPoolCreateFlags(), 1, 1, &ps));
        pc->set = dev->allocateDescriptorSets(vk::DescriptorSetAllocateInfo(pc->pool, 1, &dsl))[0];
        std::vector<vk::DescriptorBufferInfo> infos;
        for (auto* b : bufs) infos.push_back(b->t->constructDescriptorBufferInfo());
        std::vector<vk::WriteDescriptorSet> writes;
        for (uint32_t i = 0; i < nbind; i++)
            writes.emplace_back(pc->set, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[i]);
        dev->updateDescriptorSets(writes, nullptr);
        pc->kernel = kernel_for(s, spec, pl, nbind, push_bytes);
        return Program{ pc };
    }

    Sequence* sequence() { return new Sequence(dev, queue, family, ts_bits, ts_period); }

    void wait_pipelines()
    {
        py::gil_scoped_release nogil;
        workers->drain();
    }

    py::bytes pipeline_cache_data()
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

    py::dict stats()
    {
        py::dict d;
        std::lock_guard<std::mutex> lk(m);
        d["pipelines_created"] = created.load();
        d["pipelines_reused"] = reused;
        d["pipeline_create_ns"] = create_ns.load();
        d["pipeline_cache_initial_bytes"] = pcache_initial;
        return d;
    }
};

} // namespace

PYBIND11_MODULE(_vkcore, m)
{
    m.doc() = "vkinfer's internal Vulkan binding over Kompute (use vkinfer._vk, not this module)";
    py::class_<Instance, std::shared_ptr<Instance>>(m, "Instance")
      .def(py::init<>())
      .def("devices", &Instance::devices)
      .def("identity", &Instance::identity, py::arg("index"));
    py::class_<Buffer>(m, "Buffer")
      .def_readonly("nbytes", &Buffer::nbytes)
      .def_property_readonly("kind", &Buffer::kind)
      .def("write", &Buffer::write, py::arg("data"), py::arg("offset") = 0)
      .def("read_into", &Buffer::read_into, py::arg("out"), py::arg("offset") = 0)
      .def(
        "write_nchw", [](Buffer& b, const py::object& x) { b.write_packed(x, true); }, py::arg("x"))
      .def(
        "write_rows", [](Buffer& b, const py::object& x, uint8_t flip) { b.write_packed(x, false, flip); },
        py::arg("x"), py::arg("flip") = 0)
      .def(
        "read_nchw",
        [](Buffer& b, const std::vector<py::ssize_t>& shape, const py::object& dtype) {
            return b.read_packed(shape, dtype, true);
        },
        py::arg("shape"), py::arg("dtype"))
      .def(
        "read_rows",
        [](Buffer& b, const std::vector<py::ssize_t>& shape, const py::object& dtype, uint8_t flip) {
            return b.read_packed(shape, dtype, false, flip);
        },
        py::arg("shape"), py::arg("dtype"), py::arg("flip") = 0);
    py::class_<Program>(m, "Program").def_property_readonly("ready", &Program::ready).def("wait", &Program::wait);
    py::class_<Sequence, std::unique_ptr<Sequence>>(m, "Sequence")
      .def("upload", &Sequence::upload)
      .def("download", &Sequence::download)
      .def("dispatch", &Sequence::dispatch)
      .def("barrier", &Sequence::barrier)
      .def("run", &Sequence::run, py::arg("timed") = false)
      .def("run_io", &Sequence::run_io, py::arg("ins"), py::arg("outs"), py::arg("timed") = false)
      .def_property_readonly("timestamps", [](const Sequence& s) { return bool(s.queries); });
    py::class_<PlanRunner>(m, "PlanRunner")
      .def(py::init<size_t, size_t, const std::vector<size_t>&, const py::dict&, const py::list&>(), py::arg("inputs"),
           py::arg("outputs"), py::arg("slot_bytes"), py::arg("persistent"), py::arg("steps"))
      .def("run", &PlanRunner::run, py::arg("inputs"), py::arg("outputs"), py::arg("timed") = false)
      .def("set_feed", &PlanRunner::set_feed)
      .def("run_feed", &PlanRunner::run_feed)
      .def_readonly("mapped", &PlanRunner::mapped,
                    "intermediate slots a CPU graph writes straight into a Vulkan buffer's memory (no copy)");
    py::class_<Device>(m, "Device")
      .def(py::init<std::shared_ptr<Instance>, uint32_t, py::bytes, unsigned>(), py::arg("instance"),
           py::arg("index"), py::arg("pipeline_cache") = py::bytes(), py::arg("threads") = 0,
           py::keep_alive<1, 2>())
      .def_readonly("unified_memory", &Device::unified)
      .def_property_readonly("timestamp_valid_bits", [](const Device& d) { return d.ts_bits; })
      .def("buffer", &Device::buffer, py::keep_alive<0, 1>())
      .def("program", &Device::program, py::keep_alive<0, 1>())
      .def("sequence", &Device::sequence, py::keep_alive<0, 1>(), py::return_value_policy::take_ownership)
      .def("wait_pipelines", &Device::wait_pipelines)
      .def("pipeline_cache_data", &Device::pipeline_cache_data)
      .def("stats", &Device::stats);
}
