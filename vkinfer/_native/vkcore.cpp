// vkinfer's only contact with Kompute: a thin pybind11 module over Kompute's C++ library.
//
// Why not kp's own Python binding: it has no memory barrier op (dependent dispatches race),
// cannot enable device features, and returns wrong views with numpy 2. Here we create the
// instance and device ourselves, build kp::Sequence / kp::Tensor / kp::Algorithm on them, and
// record our own small ops: upload, dispatch, a global barrier, download. Bytes cross the
// boundary through the buffer protocol only.
#include <kompute/Kompute.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
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
};

struct Buffer {
    std::shared_ptr<kp::Tensor> t;
    size_t nbytes;

    // Host-visible staging copy exists only for transfer buffers (inputs, outputs, weights).
    bool staged() const { return t->tensorType() == kp::Tensor::TensorTypes::eDevice; }

    void write(py::buffer b, size_t offset)
    {
        py::buffer_info info = b.request();
        size_t n = (size_t)info.size * (size_t)info.itemsize;
        if (!staged()) throw std::invalid_argument("buffer has no host staging memory");
        if (!PyBuffer_IsContiguous(info.view(), 'C'))
            throw std::invalid_argument("write needs a C-contiguous buffer");
        if (offset > nbytes || n > nbytes - offset)
            throw std::invalid_argument("write of " + std::to_string(n) + " bytes at offset " +
                                        std::to_string(offset) + " overflows a " +
                                        std::to_string(nbytes) + "-byte buffer");
        std::memcpy(static_cast<char*>(t->rawData()) + offset, info.ptr, n);
    }

    void read_into(py::buffer b, size_t offset)
    {
        py::buffer_info info = b.request(true);
        size_t n = (size_t)info.size * (size_t)info.itemsize;
        if (!staged()) throw std::invalid_argument("buffer has no host staging memory");
        if (!PyBuffer_IsContiguous(info.view(), 'C'))
            throw std::invalid_argument("read_into needs a C-contiguous writable buffer");
        if (offset > nbytes || n > nbytes - offset)
            throw std::invalid_argument("read past the end of the buffer");
        std::memcpy(info.ptr, static_cast<char*>(t->rawData()) + offset, n);
    }
};

struct Program {
    std::shared_ptr<kp::Algorithm> algo;
};

// --- our recorded ops -------------------------------------------------------------------------

struct OpUpload : kp::OpBase {
    std::vector<std::shared_ptr<kp::Tensor>> ts;
    explicit OpUpload(std::vector<std::shared_ptr<kp::Tensor>> t) : ts(std::move(t)) {}
    void record(const vk::CommandBuffer& cb) override
    {
        for (auto& t : ts) t->recordCopyFromStagingToDevice(cb);
    }
    void preEval(const vk::CommandBuffer&) override {}
    void postEval(const vk::CommandBuffer&) override {}
};

struct OpDownload : kp::OpBase {
    std::vector<std::shared_ptr<kp::Tensor>> ts;
    explicit OpDownload(std::vector<std::shared_ptr<kp::Tensor>> t) : ts(std::move(t)) {}
    void record(const vk::CommandBuffer& cb) override
    {
        for (auto& t : ts) t->recordCopyFromDeviceToStaging(cb);
    }
    void preEval(const vk::CommandBuffer&) override {}
    void postEval(const vk::CommandBuffer&) override {}
};

// Bind, push and dispatch only: the barriers are recorded explicitly by the caller, because
// kp::OpAlgoDispatch's own barrier (transfer write -> shader read) does not order one
// dispatch after another.
struct OpDispatch : kp::OpBase {
    std::shared_ptr<kp::Algorithm> algo;
    explicit OpDispatch(std::shared_ptr<kp::Algorithm> a) : algo(std::move(a)) {}
    void record(const vk::CommandBuffer& cb) override
    {
        algo->recordBindCore(cb);
        algo->recordBindPush(cb);
        algo->recordDispatch(cb);
    }
    void preEval(const vk::CommandBuffer&) override {}
    void postEval(const vk::CommandBuffer&) override {}
};

// One global memory barrier covering every hazard between transfers, compute shaders and host
// reads: kp::OpMemoryBarrier takes a single access bit and per-buffer barriers, so it cannot
// express "all earlier writes visible to all later reads and writes" in one command.
struct OpGlobalBarrier : kp::OpBase {
    void record(const vk::CommandBuffer& cb) override
    {
        vk::MemoryBarrier mb(
          vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderWrite,
          vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite |
            vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite |
            vk::AccessFlagBits::eHostRead);
        cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                           vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader |
                             vk::PipelineStageFlagBits::eHost,
                           vk::DependencyFlags(), 1, &mb, 0, nullptr, 0, nullptr);
    }
    void preEval(const vk::CommandBuffer&) override {}
    void postEval(const vk::CommandBuffer&) override {}
};

struct Sequence {
    std::shared_ptr<kp::Sequence> seq;

    static std::vector<std::shared_ptr<kp::Tensor>> tensors(const std::vector<Buffer*>& bs)
    {
        std::vector<std::shared_ptr<kp::Tensor>> out;
        for (auto* b : bs) {
            if (!b->staged()) throw std::invalid_argument("upload/download needs a staged buffer");
            out.push_back(b->t);
        }
        return out;
    }
    void upload(const std::vector<Buffer*>& bs) { seq->record(std::make_shared<OpUpload>(tensors(bs))); }
    void download(const std::vector<Buffer*>& bs) { seq->record(std::make_shared<OpDownload>(tensors(bs))); }
    void dispatch(const Program& p) { seq->record(std::make_shared<OpDispatch>(p.algo)); }
    void barrier() { seq->record(std::make_shared<OpGlobalBarrier>()); }
    void run()
    {
        py::gil_scoped_release nogil;
        seq->eval();
    }
};

struct Device {
    std::shared_ptr<Instance> instance;
    std::shared_ptr<vk::PhysicalDevice> pd;
    std::shared_ptr<vk::Device> dev;
    std::shared_ptr<vk::Queue> queue;
    uint32_t family = 0;

    Device(std::shared_ptr<Instance> in, uint32_t index) : instance(std::move(in))
    {
        auto pds = instance->physical();
        if (index >= pds.size())
            throw std::invalid_argument("no Vulkan device with index " + std::to_string(index));
        pd = std::make_shared<vk::PhysicalDevice>(pds[index]);
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
        float prio = 1.0f;
        vk::DeviceQueueCreateInfo qci(vk::DeviceQueueCreateFlags(), family, 1, &prio);
        vk::DeviceCreateInfo dci(vk::DeviceCreateFlags(), 1, &qci);
        dev = std::make_shared<vk::Device>(pd->createDevice(dci));
        queue = std::make_shared<vk::Queue>(dev->getQueue(family, 0));
    }
    ~Device()
    {
        if (dev) {
            dev->waitIdle();
            dev->destroy();
        }
    }

    Buffer buffer(size_t nbytes, bool staged)
    {
        if (nbytes == 0) nbytes = 4;
        size_t words = (nbytes + 3) / 4;
        if (words > 0x3fffffffu) throw std::invalid_argument("buffer too large");
        std::vector<uint32_t> zeros(staged ? words : 1, 0u);
        auto t = std::make_shared<kp::Tensor>(
          pd, dev, zeros.data(), (uint32_t)words, 4, kp::Tensor::TensorDataTypes::eUnsignedInt,
          staged ? kp::Tensor::TensorTypes::eDevice : kp::Tensor::TensorTypes::eStorage);
        return Buffer{ t, words * 4 };
    }

    Program program(py::bytes spirv, const std::vector<Buffer*>& bufs, std::array<uint32_t, 3> groups,
                    const std::vector<uint32_t>& spec, const std::vector<uint32_t>& push)
    {
        std::string s = spirv;
        if (s.size() % 4 != 0 || s.empty()) throw std::invalid_argument("SPIR-V size is not a multiple of 4");
        std::vector<uint32_t> code(s.size() / 4);
        std::memcpy(code.data(), s.data(), s.size());
        std::vector<std::shared_ptr<kp::Tensor>> ts;
        for (auto* b : bufs) ts.push_back(b->t);
        auto algo = std::make_shared<kp::Algorithm>(dev);
        // Kompute needs at least one push constant to size the range; shaders ignore a dummy one.
        std::vector<uint32_t> p = push.empty() ? std::vector<uint32_t>{ 0u } : push;
        algo->rebuild<uint32_t, uint32_t>(ts, code, kp::Workgroup{ groups[0], groups[1], groups[2] }, spec, p);
        return Program{ algo };
    }

    Sequence sequence() { return Sequence{ std::make_shared<kp::Sequence>(pd, dev, queue, family) }; }
};

} // namespace

PYBIND11_MODULE(_vkcore, m)
{
    m.doc() = "vkinfer's internal Kompute binding (use vkinfer._vk, not this module)";
    py::class_<Instance, std::shared_ptr<Instance>>(m, "Instance")
      .def(py::init<>())
      .def("devices", &Instance::devices);
    py::class_<Buffer>(m, "Buffer")
      .def_readonly("nbytes", &Buffer::nbytes)
      .def("write", &Buffer::write, py::arg("data"), py::arg("offset") = 0)
      .def("read_into", &Buffer::read_into, py::arg("out"), py::arg("offset") = 0);
    py::class_<Program>(m, "Program");
    py::class_<Sequence>(m, "Sequence")
      .def("upload", &Sequence::upload)
      .def("download", &Sequence::download)
      .def("dispatch", &Sequence::dispatch)
      .def("barrier", &Sequence::barrier)
      .def("run", &Sequence::run);
    py::class_<Device>(m, "Device")
      .def(py::init<std::shared_ptr<Instance>, uint32_t>(), py::keep_alive<1, 2>())
      .def("buffer", &Device::buffer, py::keep_alive<0, 1>())
      .def("program", &Device::program, py::keep_alive<0, 1>(), py::keep_alive<0, 3>())
      .def("sequence", &Device::sequence, py::keep_alive<0, 1>());
}
