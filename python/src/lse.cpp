// Rescaling of f32 log-sum-exp buffers on the device, in place, on the context's queue:
// the library's LSE is natural log (its contract), FlashInfer's Python API speaks base 2,
// and the wrappers convert between them (x *= log2(e) or ln(2)) without a host round trip.
// One small program per cl_context, built on first use and kept for the process.
#include <map>
#include <mutex>

#include "binding.hpp"

namespace clattn_py {

namespace {

const char* kSource = R"CL(
kernel void clattn_py_scale_f32(global float* x, float s, uint n) {
  uint i = (uint)get_global_id(0);
  if (i < n) x[i] *= s;
}
)CL";

struct ScaleKernel {
  cl_context ctx = nullptr;  // retained: the map key stays unique while the entry lives
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
};

void cl_check(cl_int err, const std::string& what) {
  if (err != CL_SUCCESS) throw clattn::Error(clattn::Status::OpenCLError, what + " failed: " + std::to_string(err), err);
}

ScaleKernel build(const clattn::Context& c) {
  ScaleKernel k;
  cl_int err = CL_SUCCESS;
  k.program = clCreateProgramWithSource(c.cl_ctx(), 1, &kSource, nullptr, &err);
  cl_check(err, "clCreateProgramWithSource (lse scale)");
  cl_device_id dev = c.cl_device();
  err = clBuildProgram(k.program, 1, &dev, "", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    clReleaseProgram(k.program);
    cl_check(err, "clBuildProgram (lse scale)");
  }
  k.kernel = clCreateKernel(k.program, "clattn_py_scale_f32", &err);
  if (err != CL_SUCCESS) {
    clReleaseProgram(k.program);
    cl_check(err, "clCreateKernel (lse scale)");
  }
  clRetainContext(c.cl_ctx());
  k.ctx = c.cl_ctx();
  return k;
}

std::mutex g_mu;
std::map<cl_context, ScaleKernel> g_kernels;

}  // namespace

void init_lse(py::module_& m) {
  m.def("_scale_f32", [](const clattn::Context& ctx, py::handle t_, float factor) {
    const TensorPtr t = tensor_arg(t_, "lse");
    cl_mem mem = check_tensor(ctx, t, "lse", {PDType::F32});
    const int64_t n = t->numel();
    if (n == 0) return;
    if (n > int64_t(UINT32_MAX)) invalid("lse: " + std::to_string(n) + " elements do not fit the scale kernel's uint index");
    std::lock_guard<std::mutex> lock(g_mu);  // clSetKernelArg + enqueue on the shared kernel
    auto it = g_kernels.find(ctx.cl_ctx());
    if (it == g_kernels.end()) it = g_kernels.emplace(ctx.cl_ctx(), build(ctx)).first;
    cl_kernel k = it->second.kernel;
    const cl_uint count = cl_uint(n);
    cl_check(clSetKernelArg(k, 0, sizeof(cl_mem), &mem), "clSetKernelArg (lse scale)");
    cl_check(clSetKernelArg(k, 1, sizeof(float), &factor), "clSetKernelArg (lse scale)");
    cl_check(clSetKernelArg(k, 2, sizeof(cl_uint), &count), "clSetKernelArg (lse scale)");
    const size_t local = 64, global = (size_t(n) + local - 1) / local * local;
    cl_check(clEnqueueNDRangeKernel(ctx.cl_queue(), k, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
             "clEnqueueNDRangeKernel (lse scale)");
  }, py::arg("ctx"), py::arg("lse"), py::arg("factor"),
     "_scale_f32(ctx, lse, factor): lse *= factor on the device (enqueued on ctx's queue).");
}

}  // namespace clattn_py
