// vkinfer._vkcore's private declarations, shared by its parts:
//   vk_instance.cpp   the Vulkan instance and what it says about each physical device
//   vk_buffers.cpp    buffers (kp::Tensor) and the packed form's packers, with the form's parameters from
//                     vkinfer/layout.py (set_packed_form)
//   vk_pipelines.cpp  pipeline creation on worker threads, kernels (one VkPipeline each) and programs
//   vk_sequences.cpp  recorded command sequences: one submit per run
//   vk_device.cpp     the logical device: queue, memory kind, layouts, the pipeline cache
//   vk_module.cpp     the pybind11 binding, and the C table (vk_api.h) the plan runner _planrun calls
//
// Why our own pipelines and command buffers rather than Kompute's kp::Algorithm and kp::Sequence: see
// vk_pipelines.cpp and vk_sequences.cpp. Why not kp's own Python binding: it has no memory barrier op
// (dependent dispatches race), cannot enable device features, and returns wrong views with numpy 2. We create
// the instance and device ourselves and use Kompute's kp::Tensor for buffers (memory type choice, staging
// buffer, mapping). Bytes cross the boundary through the buffer protocol or numpy arrays only.
#pragma once

#include <kompute/Kompute.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vk_api.h"

namespace vki {

namespace py = pybind11;

// --- vk_instance.cpp ------------------------------------------------------------------------------------------

// One vk::Instance, shared by every Device made from it.
struct Instance {
    std::shared_ptr<vk::Instance> inst;

    Instance();
    ~Instance();
    std::vector<vk::PhysicalDevice> physical() const { return inst->enumeratePhysicalDevices(); }
    vk::PhysicalDevice at(uint32_t index) const;
    py::list devices() const;
    py::dict identity(uint32_t index) const;
};

// --- vk_buffers.cpp -------------------------------------------------------------------------------------------

// A tensor's packed form (vkinfer/layout.py is the definition and the numpy reference): rows of `c` 8-bit
// values padded to whole 32-bit words. Pixel rows (`nchw`): n images of c channel planes of hw values, stored
// as n*hw rows of c (NHWC); else n rows of c values.
struct Form {
    size_t n = 1, c = 1, hw = 1;
    bool nchw = false;
    size_t rows() const { return nchw ? n * hw : n; }
    size_t words_per_row() const { return (c + 3) / 4; }
};

// The form's parameters, from vkinfer.layout.packed_form() (vkinfer._vk hands them over when it loads this
// module): the byte rows are padded with, and per rank the storage order that packs as pixel rows.
void set_packed_form(const py::dict& table);
Form form_of(const std::vector<py::ssize_t>& shape, bool pixel_rows);
size_t mul_checked(size_t a, size_t b);
size_t packed_bytes(const Form& f);
void pack_form(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip);
void unpack_form(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip);
void check_8bit(const py::object& dtype, const char* what);

struct Buffer {
    std::shared_ptr<kp::Tensor> t;
    size_t nbytes;

    // eDevice: device memory plus a host-visible staging copy (uploads/downloads record copies);
    // eHost: host-visible memory the shaders read directly (unified memory: nothing to copy);
    // eStorage: device memory only (intermediates).
    bool host_visible() const { return t->tensorType() != kp::Tensor::TensorTypes::eStorage; }
    bool direct() const { return t->tensorType() == kp::Tensor::TensorTypes::eHost; }
    std::string kind() const;
    uint8_t* host() const;
    void write(py::buffer b, size_t offset);
    void read_into(py::buffer b, size_t offset);
    void check_fits(const Form& f, const char* what) const;

    // A pack (host array -> this buffer's packed form) checked and set up with the GIL held, run without it.
    struct PackJob {
        Form f;
        const uint8_t* src = nullptr;
        uint8_t* h = nullptr;
        uint8_t flip = 0;
        py::buffer_info keep; // the array's buffer, released with the GIL held
        void run() const { pack_form(src, h, f, flip); }
    };
    struct UnpackJob {
        Form f;
        const uint8_t* h = nullptr;
        uint8_t* dst = nullptr;
        uint8_t flip = 0;
        py::object out;
        py::buffer_info keep;
        void run() const { unpack_form(h, dst, f, flip); }
    };
    PackJob prepare_write(const py::object& x, bool nchw, uint8_t flip);
    UnpackJob prepare_read(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw, uint8_t flip);
    void write_packed(const py::object& x, bool nchw, uint8_t flip = 0);
    py::object read_packed(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw,
                           uint8_t flip = 0);
};

// --- vk_pipelines.cpp -----------------------------------------------------------------------------------------

// A small pool of threads that create pipelines while Python goes on building the session.
class Workers {
  public:
    explicit Workers(unsigned n) : n_(n) {}
    ~Workers() { shutdown(); }
    void submit(std::function<void()> f);
    void drain(); // wait until every submitted task has finished
    void shutdown();

  private:
    void loop();
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
    ~Kernel();
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

    ~ProgramCore();
    void record(const vk::CommandBuffer& cb) const;
};

struct Program {
    std::shared_ptr<ProgramCore> p;
    bool ready() const;
    void wait() const;
};

// --- vk_sequences.cpp -----------------------------------------------------------------------------------------

struct SeqOp {
    enum Kind { Upload, Download, HostRead, Dispatch, Barrier } kind;
    std::vector<std::shared_ptr<kp::Tensor>> ts;
    std::shared_ptr<ProgramCore> prog;
};

struct Sequence {
    std::shared_ptr<vk::Device> dev;
    vk::Queue queue;
    vk::CommandPool pool;
    vk::CommandBuffer cbs[2]; // [0] plain, [1] with timestamps; each recorded on its first use
    bool recorded_cb[2] = { false, false };
    vk::Fence fence;
    vk::QueryPool queries; // two timestamps around the commands, where the queue supports them
    double period_ns = 1.0;
    uint64_t ts_mask = ~0ull;
    std::vector<SeqOp> ops;
    bool recorded = false;
    bool commands = false; // anything but global barriers recorded

    Sequence(std::shared_ptr<vk::Device> d, vk::Queue q, uint32_t family, uint32_t ts_bits, float period);
    ~Sequence();
    Sequence(const Sequence&) = delete;
    Sequence& operator=(const Sequence&) = delete;

    void add(SeqOp op);
    void upload(const std::vector<Buffer*>& bs);
    void download(const std::vector<Buffer*>& bs);
    void dispatch(const Program& p) { add(SeqOp{ SeqOp::Dispatch, {}, p.p }); }
    void barrier() { add(SeqOp{ SeqOp::Barrier, {}, nullptr }); }
    void record(const vk::CommandBuffer& cb, bool timed);
    std::optional<uint64_t> run_nogil(bool timed); // the GIL released by the caller
    std::optional<uint64_t> run(bool timed);
    py::tuple run_io(const py::list& ins, const py::list& outs, bool timed);
};

// --- vk_device.cpp --------------------------------------------------------------------------------------------

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

    Device(std::shared_ptr<Instance> in, uint32_t index, py::bytes cache_data, unsigned threads);
    ~Device();
    bool detect_unified();
    Buffer buffer(size_t nbytes, const std::string& kind);
    Sequence* sequence() { return new Sequence(dev, queue, family, ts_bits, ts_period); }
    void wait_pipelines();
    py::bytes pipeline_cache_data();
    py::dict stats();

    // vk_pipelines.cpp
    std::pair<vk::DescriptorSetLayout, vk::PipelineLayout> layout_for(uint32_t nbind, uint32_t push_bytes);
    std::shared_ptr<Kernel> kernel_for(const std::string& spirv, const std::vector<uint32_t>& spec,
                                       vk::PipelineLayout layout, uint32_t nbind, uint32_t push_bytes);
    Program program(py::bytes spirv, const std::vector<Buffer*>& bufs, std::array<uint32_t, 3> groups,
                    const std::vector<uint32_t>& spec, const std::vector<uint32_t>& push);
};

// --- vk_module.cpp's C table (vk_api.h), its parts defined beside what they use -------------------------------

// The Python exception for the C++ one in flight (call inside a catch block): pybind11's own error, a
// ValueError for std::invalid_argument, a TypeError for a failed cast, a RuntimeError otherwise.
void set_python_error();
void fill_move_api(vki_vk_api& api);     // vk_buffers.cpp
void fill_sequence_api(vki_vk_api& api); // vk_sequences.cpp

} // namespace vki
