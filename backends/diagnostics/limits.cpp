// Same-process limits for benchmarks: device copy bandwidth and a streaming-read kernel.
#include <algorithm>

#include "backends/params/database.hpp"
#include "clattn/diagnostics.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/timer.hpp"

namespace clattn {

Limits measure_limits(const Context& ctx, std::size_t bytes) {
  auto& c = rt::impl(ctx);
  if (!c.profiling) throw Error(Status::Unsupported, "measure_limits needs a queue with CL_QUEUE_PROFILING_ENABLE");
  const DeviceProfile& p = c.profile;
  if (bytes == 0) {
    // Large enough to defeat caches (H100 L2 is 50 MB), small enough for any device.
    bytes = p.is_gpu && p.global_mem_bytes > (8ull << 30) ? (1ull << 30) : (128ull << 20);
    bytes = std::min<std::size_t>(bytes, p.max_alloc_bytes / 2);
  }
  bytes &= ~std::size_t(15);
  DeviceBuffer a(ctx, bytes), b(ctx, bytes), o(ctx, 64);
  float one = 1.0f;
  rt::check_cl(clEnqueueFillBuffer(c.queue, a.get(), &one, 4, 0, bytes, 0, nullptr, nullptr), "clEnqueueFillBuffer");

  params::Entry e = params::lookup(p, "stream_read");
  size_t wg = std::min<size_t>(size_t(e.get("WG")), p.max_work_group_size);
  auto prog = c.programs.get("stream_read.cl", rt::make_options({{"CONTIGUOUS", std::to_string(e.get_or("CONTIGUOUS", 0))}}));
  auto& k = prog->kernel("stream_read");
  wg = std::min(wg, k.max_work_group_size(c.device));
  size_t gws = size_t(std::max(1u, p.compute_units)) * size_t(e.get("WGS_PER_CU")) * wg;
  cl_uint n4 = cl_uint(bytes / 16);
  cl_mem am = a.get(), om = o.get();

  Limits L;
  L.bytes = bytes;
  for (int it = 0; it < 6; ++it) {  // first iteration warms up and is not counted
    cl_event ev = nullptr;
    rt::check_cl(clEnqueueCopyBuffer(c.queue, a.get(), b.get(), 0, 0, bytes, 0, nullptr, &ev), "clEnqueueCopyBuffer");
    double ms = rt::event_ms(ev);
    clReleaseEvent(ev);
    if (it) L.copy_gbps = std::max(L.copy_gbps, 2.0 * bytes / (ms * 1e6));
    k.launch(c.queue, 1, &gws, &wg, 0, nullptr, &ev, am, om, n4);
    ms = rt::event_ms(ev);
    clReleaseEvent(ev);
    if (it) L.stream_read_gbps = std::max(L.stream_read_gbps, double(bytes) / (ms * 1e6));
  }
  L.method = std::string("best of 5: clEnqueueCopyBuffer (2x bytes) and a float4 ") +
             (e.get_or("CONTIGUOUS", 0) ? "contiguous-block" : "grid-stride") + " read kernel (" +
             std::to_string(gws / wg) + " x " + std::to_string(wg) + " work-items) over " +
             std::to_string(bytes >> 20) + " MiB, OpenCL profiling events";
  return L;
}

}  // namespace clattn
