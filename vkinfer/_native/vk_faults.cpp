// Vulkan failures a session must survive (device loss, out of device or host memory, a fence that never
// signals), their messages, and the test hook that injects them.
//
// The hook (set_fault) is compiled into every build: a hooked call costs one relaxed atomic load while nothing
// is armed, and a fault the driver cannot be made to give on demand (lavapipe never loses its device) is then
// testable on every machine, in the wheel too. Four points are hooked: buffer allocation (Device::buffer),
// queue submit and fence wait (Sequence::run_nogil), pipeline creation (the workers of Device::kernel_for).
// An injected submit fault submits nothing; an injected wait fault first waits for the real work, so that
// nothing is left in flight (closing the session afterwards is clean under the validation layer).
#include "vk_core.hpp"

#include <cstdio>
#include <stdexcept>

namespace vki {

namespace {

struct Armed {
    std::atomic<bool> on{ false };
    std::mutex m;
    vk::Result result = vk::Result::eSuccess;
    uint64_t after = 0;   // calls of the point that pass before the first fault
    uint64_t times = 1;   // faults to give (0: every later call)
    uint64_t seen = 0;
};

Armed g_armed[FAULT_POINTS];
const char* const g_point_names[FAULT_POINTS] = { "alloc", "submit", "wait", "pipeline" };
std::atomic<uint64_t> g_fence_timeout_ns{ 120'000'000'000ull }; // vkinfer._vk sets it ($VKINFER_FENCE_TIMEOUT_S)
std::atomic<int64_t> g_live[LIVE_KINDS];
const char* const g_live_names[LIVE_KINDS] = { "devices", "buffers", "programs", "pipelines", "sequences" };

const char* result_name(vk::Result r)
{
    switch (r) {
        case vk::Result::eErrorDeviceLost: return "VK_ERROR_DEVICE_LOST";
        case vk::Result::eErrorOutOfDeviceMemory: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case vk::Result::eErrorOutOfHostMemory: return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case vk::Result::eTimeout: return "VK_TIMEOUT";
        default: return nullptr;
    }
}

} // namespace

VkFault::VkFault(vk::Result r, const std::string& what) : std::runtime_error(what), result(r) {}

bool VkFault::lost() const { return result == vk::Result::eErrorDeviceLost || result == vk::Result::eTimeout; }

bool is_fault(vk::Result r) { return result_name(r) != nullptr; }

[[noreturn]] void fail(vk::Result r, const std::string& call, std::atomic<bool>* lost)
{
    const char* name = result_name(r);
    if (!name) throw std::runtime_error(call + ": " + vk::to_string(r));
    std::string msg;
    if (r == vk::Result::eErrorDeviceLost) {
        msg = "Vulkan device lost: " + call + " returned VK_ERROR_DEVICE_LOST (the device runs nothing more; a new "
              "session opens it afresh)";
    } else if (r == vk::Result::eTimeout) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", (double)g_fence_timeout_ns.load() / 1e9);
        msg = "Vulkan device hung: " + call + " did not finish within " + secs +
              " s (VK_TIMEOUT; $VKINFER_FENCE_TIMEOUT_S sets the limit); the device is taken as lost";
    } else {
        msg = std::string(r == vk::Result::eErrorOutOfDeviceMemory ? "out of Vulkan device memory: "
                                                                    : "out of host memory for Vulkan: ") +
              call + " returned " + name;
    }
    VkFault f(r, msg);
    if (lost && f.lost()) lost->store(true);
    throw f;
}

[[noreturn]] void fail_system(const vk::SystemError& e, const std::string& call, std::atomic<bool>* lost)
{
    vk::Result r = static_cast<vk::Result>(e.code().value());
    if (!is_fault(r)) throw std::runtime_error(call + ": " + e.what());
    fail(r, call, lost);
}

void check_lost(const std::atomic<bool>* lost)
{
    if (lost && lost->load(std::memory_order_relaxed))
        throw VkFault(vk::Result::eErrorDeviceLost,
                      "Vulkan device lost earlier (VK_ERROR_DEVICE_LOST): it runs nothing more; a new session opens "
                      "it afresh");
}

vk::Result injected(FaultPoint p)
{
    Armed& a = g_armed[p];
    if (!a.on.load(std::memory_order_relaxed)) return vk::Result::eSuccess;
    std::lock_guard<std::mutex> lk(a.m);
    if (!a.on.load() || a.seen++ < a.after) return vk::Result::eSuccess;
    if (a.times > 0 && --a.times == 0) a.on.store(false);
    return a.result;
}

uint64_t fence_timeout_ns() { return g_fence_timeout_ns.load(std::memory_order_relaxed); }

void live_add(LiveKind k, int64_t d) { g_live[k].fetch_add(d, std::memory_order_relaxed); }

// --- the Python side of the hook (vkinfer._vk.set_fault / clear_faults / live_objects) -------------------------

void set_fault(const std::string& point, const std::string& result, uint64_t after, uint64_t times)
{
    int p = -1;
    for (int i = 0; i < FAULT_POINTS; i++)
        if (point == g_point_names[i]) p = i;
    if (p < 0) throw std::invalid_argument("set_fault: point must be alloc, submit, wait or pipeline, got " + point);
    vk::Result r = vk::Result::eSuccess;
    for (auto c : { vk::Result::eErrorDeviceLost, vk::Result::eErrorOutOfDeviceMemory,
                    vk::Result::eErrorOutOfHostMemory, vk::Result::eTimeout })
        if (result == result_name(c)) r = c;
    if (r == vk::Result::eSuccess)
        throw std::invalid_argument("set_fault: result must be VK_ERROR_DEVICE_LOST, VK_ERROR_OUT_OF_DEVICE_MEMORY, "
                                    "VK_ERROR_OUT_OF_HOST_MEMORY or VK_TIMEOUT, got " + result);
    if (r == vk::Result::eTimeout && p != FAULT_WAIT)
        throw std::invalid_argument("set_fault: VK_TIMEOUT is a fence wait's result only (point 'wait')");
    Armed& a = g_armed[p];
    std::lock_guard<std::mutex> lk(a.m);
    a.result = r;
    a.after = after;
    a.times = times;
    a.seen = 0;
    a.on.store(true);
}

void clear_faults()
{
    for (auto& a : g_armed) {
        std::lock_guard<std::mutex> lk(a.m);
        a.on.store(false);
    }
}

void set_fence_timeout(double seconds)
{
    if (!(seconds > 0) || seconds > 1e9) throw std::invalid_argument("fence timeout must be in (0, 1e9] seconds");
    g_fence_timeout_ns.store((uint64_t)(seconds * 1e9));
}

py::dict live_objects()
{
    py::dict d;
    for (int i = 0; i < LIVE_KINDS; i++) d[g_live_names[i]] = g_live[i].load();
    return d;
}

} // namespace vki
