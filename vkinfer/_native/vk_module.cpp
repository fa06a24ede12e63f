// vkinfer._vkcore: vkinfer's only contact with Kompute, a pybind11 module over Kompute's C++ library (its parts:
// vk_core.hpp). Python uses it through vkinfer._vk only; the plan runner vkinfer._planrun calls its Vulkan steps
// through the C table exported here as `_C_API` (vk_api.h), so that the runner itself needs no Vulkan.
#include "vk_core.hpp"

#include <stdexcept>

namespace vki {

namespace {

// vkinfer.errors' class for a fault (imported on the first fault: that module is loaded before this one).
void set_fault_error(const VkFault& e)
{
    try {
        auto errors = py::module_::import("vkinfer.errors");
        py::object cls = errors.attr(e.lost() ? "VulkanDeviceLostError" : "VulkanOutOfMemoryError");
        PyErr_SetString(cls.ptr(), e.what());
    } catch (py::error_already_set&) {
        PyErr_Clear();
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
}

} // namespace

void set_python_error()
{
    try {
        throw;
    } catch (const VkFault& e) {
        set_fault_error(e);
    } catch (const vk::SystemError& e) { // one not caught where it arose: a fault is still a fault
        vk::Result r = static_cast<vk::Result>(e.code().value());
        if (is_fault(r))
            set_fault_error(VkFault(r, std::string("Vulkan: ") + e.what()));
        else
            PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (const py::cast_error& e) {
        PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const py::builtin_exception& e) {
        e.set_error();
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
    }
}

namespace {

vki_vk_api make_api()
{
    vki_vk_api api{};
    api.version = VKI_VK_API_VERSION;
    fill_move_api(api);
    fill_sequence_api(api);
    return api;
}

const vki_vk_api g_api = make_api();

} // namespace

} // namespace vki

PYBIND11_MODULE(_vkcore, m)
{
    using namespace vki;
    m.doc() = "vkinfer's internal Vulkan binding over Kompute (use vkinfer._vk, not this module)";
    m.def("set_packed_form", &set_packed_form, py::arg("table"),
          "The packed form's parameters (vkinfer.layout.packed_form()): the packers refuse to run before this");
    m.attr("_C_API") = py::capsule(const_cast<vki_vk_api*>(&g_api), VKI_VK_API_CAPSULE);
    // Device loss and out-of-memory (VkFault, or vulkan.hpp's own exception for such a result) raise
    // vkinfer.errors.VulkanDeviceLostError / VulkanOutOfMemoryError; everything else as before.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const VkFault&) {
            set_python_error();
        } catch (const vk::SystemError& e) {
            if (!is_fault(static_cast<vk::Result>(e.code().value()))) throw;
            set_python_error();
        }
    });
    m.def("set_fault", &set_fault, py::arg("point"), py::arg("result"), py::arg("after") = 0, py::arg("times") = 1,
          "Test hook: the calls of `point` (alloc, submit, wait, pipeline) after the first `after` return `result` "
          "(VK_ERROR_DEVICE_LOST, VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_OUT_OF_HOST_MEMORY; VK_TIMEOUT at wait), "
          "`times` times (0: every later call)");
    m.def("clear_faults", &clear_faults, "Disarm every injected fault");
    m.def("set_fence_timeout", &set_fence_timeout, py::arg("seconds"),
          "The longest a submit is waited for before its device is taken as lost");
    m.def("live_objects", &live_objects, "Counts of the native objects alive now, by kind");
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
    py::class_<Device>(m, "Device")
      .def(py::init<std::shared_ptr<Instance>, uint32_t, py::bytes, unsigned, bool, bool>(), py::arg("instance"),
           py::arg("index"), py::arg("pipeline_cache") = py::bytes(), py::arg("threads") = 0,
           py::arg("integer_dot") = false, py::arg("rte32") = false, py::keep_alive<1, 2>())
      .def_readonly("unified_memory", &Device::unified)
      .def_readonly("integer_dot", &Device::dot)
      .def_readonly("rte32", &Device::rte32)
      .def_property_readonly("lost", [](const Device& d) { return d.lost->load(); })
      .def_property_readonly("timestamp_valid_bits", [](const Device& d) { return d.ts_bits; })
      .def("buffer", &Device::buffer, py::keep_alive<0, 1>())
      .def("program", &Device::program, py::keep_alive<0, 1>())
      .def("sequence", &Device::sequence, py::keep_alive<0, 1>(), py::return_value_policy::take_ownership)
      .def("wait_pipelines", &Device::wait_pipelines)
      .def("pipeline_cache_data", &Device::pipeline_cache_data)
      .def("stats", &Device::stats);
}
