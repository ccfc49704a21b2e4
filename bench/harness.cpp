#include <algorithm>
#include <cstdio>
#include <fstream>

#include "bench/bench.hpp"

namespace clattn::bench {

Context& Harness::ctx() {
  if (!ctx_) {
    ctx_ = std::make_unique<Context>(Context::create(device));
    std::printf("# device: %s (%s, driver %s)\n", ctx_->profile().device_name.c_str(),
                ctx_->profile().platform_name.c_str(), ctx_->profile().driver_version.c_str());
  }
  return *ctx_;
}

const Limits& Harness::get_limits() {
  if (!limits_measured) {
    limits = measure_limits(ctx());
    limits_measured = true;
    std::printf("# limit: streaming read %.1f GB/s, copy %.1f GB/s (%s)\n", limits.stream_read_gbps,
                limits.copy_gbps, limits.method.c_str());
  }
  return limits;
}

double Harness::time_ms(const std::function<void()>& enqueue) {
  cl_command_queue q = ctx().cl_queue();
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    cl_event a = nullptr, b = nullptr;
    clEnqueueMarkerWithWaitList(q, 0, nullptr, &a);
    enqueue();
    clEnqueueMarkerWithWaitList(q, 0, nullptr, &b);
    clWaitForEvents(1, &b);
    cl_ulong s = 0, e = 0;
    // Markers carry profiling info on every driver we know; END of the start marker and
    // END of the end marker bracket exactly the enqueued work.
    clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_END, sizeof s, &s, nullptr);
    clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof e, &e, nullptr);
    clReleaseEvent(a);
    clReleaseEvent(b);
    if (i >= warmup) times.push_back(double(e - s) * 1e-6);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Harness::report(const std::string& op, const std::string& shape, double ms, double bytes, double flops,
                     const std::string& limit_kind) {
  const Limits& L = get_limits();
  double gbps = bytes / (ms * 1e6);
  double tflops = flops / (ms * 1e9);
  double pct = 0;
  std::string limit_desc;
  if (limit_kind == "stream_read") {
    pct = 100.0 * gbps / L.stream_read_gbps;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%% of stream-read %.1f GB/s", L.stream_read_gbps);
    limit_desc = buf;
  }
  std::printf("%-10s %-48s %9.3f ms %9.1f GB/s %8.2f TFLOP/s %6.1f%s\n", op.c_str(), shape.c_str(), ms, gbps, tflops,
              pct, limit_desc.empty() ? "" : (" " + limit_desc).c_str());
  std::fflush(stdout);
  if (!json_out.empty()) {
    std::ofstream out(json_out, std::ios::app);
    out << "{\"op\":\"" << op << "\",\"shape\":\"" << shape << "\",\"ms\":" << ms << ",\"gbps\":" << gbps
        << ",\"tflops\":" << tflops << ",\"pct_of_limit\":" << pct << ",\"limit_gbps\":" << L.stream_read_gbps
        << ",\"device\":\"" << ctx().profile().device_name << "\"}\n";
  }
}

void Harness::report_compute(const std::string& op, const std::string& shape, double ms, double flops,
                             double peak_tflops, const std::string& peak_desc) {
  const double tflops = flops / (ms * 1e9);
  const double pct = peak_tflops > 0 ? 100.0 * tflops / peak_tflops : 0.0;
  std::printf("%-10s %-48s %9.3f ms %8.3f TFLOP/s %6.1f%% of %.1f TFLOP/s (%s)\n", op.c_str(), shape.c_str(), ms,
              tflops, pct, peak_tflops, peak_desc.c_str());
  std::fflush(stdout);
  if (!json_out.empty()) {
    std::ofstream out(json_out, std::ios::app);
    out << "{\"op\":\"" << op << "\",\"shape\":\"" << shape << "\",\"ms\":" << ms << ",\"tflops\":" << tflops
        << ",\"pct_of_limit\":" << pct << ",\"limit_tflops\":" << peak_tflops << ",\"limit\":\"" << peak_desc
        << "\",\"device\":\"" << ctx().profile().device_name << "\"}\n";
  }
}

}  // namespace clattn::bench
