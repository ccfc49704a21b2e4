// CLBlast SGEMM as a compute ceiling (clattn::measure_sgemm): n x n x n f32, row-major,
// C = A x B, timed between markers on the context's queue (CLBlast may run helper kernels
// before its GEMM kernel; the markers bracket all of them). Without CLBlast at build time
// (CLATTN_HAVE_CLBLAST undefined) the ceiling is reported as not available.
#include <algorithm>

#include "clattn/diagnostics.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/timer.hpp"

#ifdef CLATTN_HAVE_CLBLAST
#include <clblast.h>

#include "backends/ops/clblast_context.hpp"
#endif

namespace clattn {

ComputeCeiling measure_sgemm(const Context& ctx, int n, int samples) {
  if (n < 1) rt::invalid("measure_sgemm: n = " + std::to_string(n) + ", must be >= 1");
  if (samples < 1) rt::invalid("measure_sgemm: samples = " + std::to_string(samples) + ", must be >= 1");
  ComputeCeiling r;
#ifndef CLATTN_HAVE_CLBLAST
  (void)ctx;
  r.method = "clattn was built without CLBlast (install libclblast-dev and rebuild)";
#else
  auto& c = rt::impl(ctx);
  if (!c.profiling) throw Error(Status::Unsupported, "measure_sgemm needs a queue with CL_QUEUE_PROFILING_ENABLE");
  const size_t N = size_t(n), bytes = N * N * sizeof(float);
  const unsigned long long alloc_limit = c.profile.max_alloc_bytes ? c.profile.max_alloc_bytes : ~0ull;
  if (bytes > alloc_limit) {
    r.method = "n = " + std::to_string(n) + " needs " + std::to_string(bytes >> 20) +
               " MiB per matrix, over the device's allocation limit";
    return r;
  }
  DeviceBuffer A(ctx, bytes), B(ctx, bytes), C(ctx, bytes);
  const float v = 0.01f;  // small finite values; the work does not depend on them
  for (DeviceBuffer* b : {&A, &B})
    rt::check_cl(clEnqueueFillBuffer(c.queue, b->get(), &v, sizeof v, 0, bytes, 0, nullptr, nullptr),
                 "clEnqueueFillBuffer", "SGEMM ceiling operands");
  cl_command_queue q = c.queue;
  auto gemm = [&] {
    return clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo, N, N, N,
                                1.0f, A.get(), 0, N, B.get(), 0, N, 0.0f, C.get(), 0, N, &q, nullptr);
  };
  ops::clblast_programs_follow(ctx);
  // The first call compiles CLBlast's kernels for this device (not timed).
  const clblast::StatusCode first = gemm();
  if (first != clblast::StatusCode::kSuccess) {
    r.method = "clblast::Gemm<float> failed with CLBlast status " + std::to_string(int(first));
    return r;
  }
  for (int s = 0; s < samples; ++s) {
    cl_event before = nullptr, after = nullptr;
    rt::check_cl(clEnqueueMarkerWithWaitList(q, 0, nullptr, &before), "clEnqueueMarkerWithWaitList");
    const clblast::StatusCode st = gemm();
    rt::check_cl(clEnqueueMarkerWithWaitList(q, 0, nullptr, &after), "clEnqueueMarkerWithWaitList");
    const double ms = rt::event_span_ms(before, after);
    clReleaseEvent(before);
    clReleaseEvent(after);
    if (st != clblast::StatusCode::kSuccess) {
      r.method = "clblast::Gemm<float> failed with CLBlast status " + std::to_string(int(st));
      return r;
    }
    r.tflops = std::max(r.tflops, 2.0 * double(N) * double(N) * double(N) / (ms * 1e9));
  }
  r.available = true;
  r.method = "best of " + std::to_string(samples) + ": CLBlast SGEMM " + std::to_string(n) + "x" + std::to_string(n) +
             "x" + std::to_string(n) + " f32 row-major, between markers (OpenCL profiling events)";
#endif
  return r;
}

}  // namespace clattn
