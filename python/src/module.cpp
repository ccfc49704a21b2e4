// The native part of the clattn Python package (clattn._clattn). The public, documented
// API is the Python package python/clattn/, which wraps these functions.
#include "binding.hpp"

namespace clattn_py {
namespace {
PyObject* g_error = nullptr;  // clattn.Error (a RuntimeError subclass)
}
}  // namespace clattn_py

PYBIND11_MODULE(_clattn, m) {
  using namespace clattn_py;
  m.doc() = "clattn native binding (use the clattn package)";

  static py::exception<clattn::Error> exc(m, "Error", PyExc_RuntimeError);
  exc.doc() = "clattn.Error: a clattn call was rejected or failed. Attributes: status (the library's status name, e.g. "
              "'invalid argument'), status_code (int, clattn_status), cl_error (OpenCL error code or 0).";
  g_error = exc.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const clattn::Error& e) {
      py::object type = py::reinterpret_borrow<py::object>(g_error);
      py::object inst = type(py::str(std::string(e.what())));
      inst.attr("status") = clattn::status_name(e.status());
      inst.attr("status_code") = int(e.status());
      inst.attr("cl_error") = e.cl_error();
      PyErr_SetObject(g_error, inst.ptr());
    }
  });

  m.def("version", [] { return std::string(clattn::version()); }, "version() -> str: the library version.");
  m.def("status_name", [](int s) { return std::string(clattn::status_name(clattn::Status(s))); });

  init_tensor(m);
  init_ops(m);
  init_mla(m);
  init_linear(m);
  init_metadata(m);
  init_lse(m);
  init_sparse(m);
  init_dsa(m);
  init_rope(m);
  init_capture(m);
}
