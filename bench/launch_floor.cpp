// The driver's own cost of one clEnqueueNDRangeKernel on this queue: kernels that do nothing,
// arguments set once, 200 launches back to back (best of 3 passes, host time only). The
// floor under any op's host time per call, and under a launch-by-launch replay (docs/replay.md).
#include "bench/launch_floor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/error.hpp"

namespace clattn::bench {

namespace {
// A kernel of `args` arguments, the first `buffers` of them buffers, that returns at once.
std::string empty_kernel(const std::string& name, int args, int buffers) {
  std::string s = "__kernel void " + name + "(";
  for (int i = 0; i < args; ++i)
    s += (i ? ", " : "") + std::string(i < buffers ? "__global int* a" : "int a") + std::to_string(i);
  return s + ") { if (get_global_id(0) == 0 && a" + std::to_string(args - 1) + " == -12345) a0[0] = 1; }\n";
}
}  // namespace

void print_launch_floor(const Context& ctx) {
  struct Case {
    const char* what;
    int args, buffers;
  } cases[] = {{"2 args (1 buffer)", 2, 1}, {"12 buffers", 12, 12}, {"43 args (15 buffers, as decode)", 43, 15}};
  std::string src;
  for (size_t i = 0; i < 3; ++i) src += empty_kernel("k" + std::to_string(i), cases[i].args, cases[i].buffers);
  const char* p = src.c_str();
  cl_int err = CL_SUCCESS;
  cl_device_id dev = ctx.cl_device();
  cl_program prog = clCreateProgramWithSource(ctx.cl_ctx(), 1, &p, nullptr, &err);
  rt::check_cl(err, "clCreateProgramWithSource", "launch floor");
  cl_mem buf = clCreateBuffer(ctx.cl_ctx(), CL_MEM_READ_WRITE, 64, nullptr, &err);
  if (err != CL_SUCCESS || clBuildProgram(prog, 1, &dev, "", nullptr, nullptr) != CL_SUCCESS) {
    std::printf("limits     launch floor not measured (the empty kernels did not build)\n");
    if (buf) clReleaseMemObject(buf);
    clReleaseProgram(prog);
    return;
  }
  std::printf("limits     launch floor (clEnqueueNDRangeKernel of an empty kernel, host us per call):");
  cl_command_queue q = ctx.cl_queue();
  for (size_t i = 0; i < 3; ++i) {
    cl_kernel k = clCreateKernel(prog, ("k" + std::to_string(i)).c_str(), &err);
    if (err != CL_SUCCESS) continue;
    const int zero = 0;
    for (int a = 0; a < cases[i].args; ++a)
      a < cases[i].buffers ? clSetKernelArg(k, cl_uint(a), sizeof buf, &buf) : clSetKernelArg(k, cl_uint(a), sizeof zero, &zero);
    const size_t gws = 64;
    double best = 1e30;
    for (int pass = 0; pass < 3; ++pass) {
      clFinish(q);
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 200; ++r) clEnqueueNDRangeKernel(q, k, 1, nullptr, &gws, nullptr, 0, nullptr, nullptr);
      const auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / 200);
    }
    clFinish(q);
    std::printf("%s %s %.1f", i ? "," : "", cases[i].what, best);
    clReleaseKernel(k);
  }
  std::printf("\n");
  clReleaseMemObject(buf);
  clReleaseProgram(prog);
}

}  // namespace clattn::bench
