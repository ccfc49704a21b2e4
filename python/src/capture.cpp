// clattn.Capture: op calls recorded once and replayed (clattn/capture.hpp).
#include "binding.hpp"

#include "clattn/capture.hpp"

namespace clattn_py {

void init_capture(py::module_& m) {
  py::class_<clattn::Capture>(
      m, "Capture",
      "Capture(ctx, command_buffer=True): op calls made inside ``with cap:`` (or between begin() and end()) on the "
      "context's queue are recorded instead of run; replay() enqueues them again (one clEnqueueCommandBufferKHR "
      "where the device has cl_khr_command_buffer). Recorded calls keep their buffers: pass device Tensors for every "
      "input and ``out=`` (numpy inputs are copied into temporaries a replay would not see) and change data, not "
      "buffers, between replays. docs/replay.md.")
      .def(py::init([](const clattn::Context& ctx, bool command_buffer) {
             return std::make_unique<clattn::Capture>(ctx, nullptr, command_buffer);
           }),
           py::arg("ctx"), py::arg("command_buffer") = true, py::keep_alive<1, 2>())
      .def("begin", &clattn::Capture::begin, "Starts recording this thread's op calls.")
      .def("end", &clattn::Capture::end, "Stops recording and finalises.")
      .def("replay", [](clattn::Capture& c) { c.replay(); }, "Enqueues the recorded calls.")
      .def("__enter__", [](clattn::Capture& c) -> clattn::Capture& { c.begin(); return c; },
           py::return_value_policy::reference)
      .def("__exit__", [](clattn::Capture& c, py::object, py::object, py::object) { c.end(); return false; })
      .def_property_readonly("launches", &clattn::Capture::launches, "Kernels recorded.")
      .def_property_readonly("uses_command_buffer", &clattn::Capture::uses_command_buffer,
                             "Whether a replay is one command buffer.")
      .def_property_readonly("fallback_reason", &clattn::Capture::fallback_reason,
                             "Why a replay is launch by launch (empty when it is a command buffer).");
  m.def("command_buffer_version", [](const clattn::Context& ctx) { return clattn::command_buffer_version(ctx); },
        py::arg("ctx"), "The device's cl_khr_command_buffer version, '' without it.");
}

}  // namespace clattn_py
