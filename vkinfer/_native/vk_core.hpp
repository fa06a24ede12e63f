// vkinfer._vkcore's private declarations, shared by its parts:
//   vk_instance.cpp   the Vulkan instance and what it says about each physical device
//   vk_buffers.cpp    buffers (kp::Tensor) and the packed form's packers, with the form's parameters from
//                     vkinfer/layout.py (set_packed_form)
//   vk_pipelines.cpp  pipeline creation on worker threads, kernels (one VkPipeline each) and programs
//   vk_sequences.cpp  recorded command sequences: one submit per run
//   vk_device.cpp     the logical device: queue, memory kind, layouts, the pipeline cache
//   vk_module.cpp     the pybind11 binding, and the C table (vk_api.h) the plan runner _planrun calls
//   vk_faults.cpp     device loss and out-of-memory: their errors, the fault-injection test hook, live counts
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

// --- vk_faults.cpp --------------------------------------------------------------------------------------------

// A Vulkan call failed in a way a session must survive: the device lost (or a fence wait past its timeout,
// taken as lost), or out of device or host memory. Python sees vkinfer.errors.VulkanDeviceLostError or
// VulkanOutOfMemoryError (vk_module.cpp's translator; the plan runner's table returns -2 / -3).
struct VkFault : std::runtime_error {
    vk::Result result;
    VkFault(vk::Result r, const std::string& what);
    bool lost() const;
};

// The hooked calls (vkinfer._vk.set_fault's points, in this order: alloc, submit, wait, pipeline).
enum FaultPoint { FAULT_ALLOC, FAULT_SUBMIT, FAULT_WAIT, FAULT_PIPELINE, FAULT_POINTS };
// Objects alive now (vkinfer._vk.live_objects): the leak tests count them.
enum LiveKind { LIVE_DEVICES, LIVE_BUFFERS, LIVE_PROGRAMS, LIVE_PIPELINES, LIVE_SEQUENCES, LIVE_KINDS };

bool is_fault(vk::Result r); // device lost, out of device/host memory, timeout
// Throw VkFault for a fault result of `call` (marking `*lost` for a loss), else a runtime_error.
[[noreturn]] void fail(vk::Result r, const std::string& call, std::atomic<bool>* lost);
[[noreturn]] void fail_system(const vk::SystemError& e, const std::string& call, std::atomic<bool>* lost);
void check_lost(const std::atomic<bool>* lost); // throws VkFault once the device is lost
vk::Result injected(FaultPoint p);              // the armed fault of this call, else eSuccess
uint64_t fence_timeout_ns();
void live_add(LiveKind k, int64_t d);
template <LiveKind K> struct Live { // a member that counts its owner
    Live() { live_add(K, 1); }
    Live(const Live&) { live_add(K, 1); }
    Live& operator=(const Live&) = default;
    ~Live() { live_add(K, -1); }
};
void set_fault(const std::string& point, const std::string& result, uint64_t after, uint64_t times);
void clear_faults();
void set_fence_timeout(double seconds);
py::dict live_objects();

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

// Whether a physical device offers VK_KHR_shader_integer_dot_product with shaderIntegerDotProduct (Vulkan 1.3
// made it core; we enable it as the extension, which every 1.3 driver still lists, so one path serves 1.1-1.3).
bool has_integer_dot(const vk::PhysicalDevice& pd);
// Whether it offers VK_KHR_shader_float_controls with shaderRoundingModeRTEFloat32: shaders may then declare the
// RoundingModeRTE execution mode, and their float32 conversions and products round to nearest even.
bool has_rte32(const vk::PhysicalDevice& pd);

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
    Live<LIVE_PROGRAMS> live;

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
    std::shared_ptr<std::atomic<bool>> lost; // the device's: set by a loss seen anywhere on it
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
    bool in_flight = false; // submitted, and no wait has seen it finish (a failed or timed-out wait)
    Live<LIVE_SEQUENCES> live;

    Sequence(std::shared_ptr<vk::Device> d, std::shared_ptr<std::atomic<bool>> lost, vk::Queue q, uint32_t family,
             uint32_t ts_bits, float period);
    ~Sequence();
    void destroy(); // every Vulkan object it made (after its work ends)
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
    bool dot = false; // shaderIntegerDotProduct enabled at creation (asked for, and the device has it)
    bool rte32 = false; // VK_KHR_shader_float_controls enabled with RTE float32 rounding available (asked for)
    vk::PipelineCache pcache;
    size_t pcache_initial = 0;
    std::unique_ptr<Workers> workers;
    // Set once a call on this device returns VK_ERROR_DEVICE_LOST (or a fence wait times out): every later
    // submit, buffer and program is refused at once (Vulkan's loss is permanent); vkinfer._vk then opens anew.
    std::shared_ptr<std::atomic<bool>> lost = std::make_shared<std::atomic<bool>>(false);
    Live<LIVE_DEVICES> live;

    std::mutex m; // guards the maps below (program() may run without the GIL in future callers)
    std::map<std::pair<uint32_t, uint32_t>, std::pair<vk::DescriptorSetLayout, vk::PipelineLayout>> layouts;
    std::unordered_map<std::string, std::weak_ptr<Kernel>> kernels;
    size_t kernel_inserts = 0;
    std::atomic<uint64_t> created{ 0 }, create_ns{ 0 };
    uint64_t reused = 0;

    Device(std::shared_ptr<Instance> in, uint32_t index, py::bytes cache_data, unsigned threads, bool want_dot,
           bool want_rte32);
    ~Device();
    bool detect_unified();
    Buffer buffer(size_t nbytes, const std::string& kind);
    Sequence* sequence()
    {
        check_lost(lost.get());
        return new Sequence(dev, lost, queue, family, ts_bits, ts_period);
    }
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
