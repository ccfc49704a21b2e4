#include "runtime/buffer.hpp"

#include "runtime/error.hpp"

namespace clattn::rt {

void check_alloc_size(const DeviceProfile& p, std::size_t bytes, const std::string& what) {
  if (p.max_alloc_bytes && bytes > p.max_alloc_bytes)
    throw Error(Status::OutOfMemory, what + " needs " + std::to_string(bytes) +
                                         " bytes, more than the device allows in one buffer "
                                         "(CL_DEVICE_MAX_MEM_ALLOC_SIZE = " +
                                         std::to_string(p.max_alloc_bytes) + " bytes)");
}

namespace {

[[noreturn]] void fill_failed(cl_int err, const NewBuffer& b) {
  std::string msg = "cannot back " + b.what + " (" + std::to_string(b.bytes) + " bytes) with device memory";
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
    throw Error(Status::OutOfMemory, msg + ": " + cl_error_name(err), err);
  throw_cl(err, "clEnqueueFillBuffer", msg);
}

struct Events {
  std::vector<cl_event> v;
  ~Events() {
    for (cl_event e : v) clReleaseEvent(e);
  }
};

}  // namespace

void zero_fill(cl_command_queue q, const std::vector<NewBuffer>& bufs) {
  Events evs;
  std::vector<const NewBuffer*> filled;
  for (const auto& b : bufs) {
    if (!b.bytes) continue;
    const cl_uint zero = 0;
    cl_event ev = nullptr;
    cl_int err = clEnqueueFillBuffer(q, b.mem, &zero, b.bytes % 4 ? 1 : 4, 0, b.bytes, 0, nullptr, &ev);
    if (err != CL_SUCCESS) fill_failed(err, b);
    evs.v.push_back(ev);
    filled.push_back(&b);
  }
  if (evs.v.empty()) return;
  cl_int err = clWaitForEvents(cl_uint(evs.v.size()), evs.v.data());
  if (err == CL_SUCCESS) return;
  // A negative execution status is the failed fill's error.
  for (size_t i = 0; i < evs.v.size(); ++i) {
    cl_int st = CL_COMPLETE;
    clGetEventInfo(evs.v[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, nullptr);
    if (st < 0) fill_failed(st, *filled[i]);
  }
  throw_cl(err, "clWaitForEvents", "zero-filling new buffers");
}

}  // namespace clattn::rt
