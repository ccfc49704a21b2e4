// The timing harness (harness.hpp) of clattn-bench and clattn-tune.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "harness/harness.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/program_cache.hpp"
#include "runtime/ptx_retarget.hpp"

namespace clattn::bench {

Context& Harness::ctx() {
  if (!ctx_) {
    ctx_ = std::make_unique<Context>(Context::create(device));
    std::printf("# device: %s (%s, driver %s)\n", ctx_->profile().device_name.c_str(),
                ctx_->profile().platform_name.c_str(), ctx_->profile().driver_version.c_str());
    std::printf("# timing: %s\n", timing_desc().c_str());
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

namespace {
struct Span {
  double ms = 0, host_us = 0;  // per call: device time between the markers, host time enqueueing
};
// Medians per call over `samples` samples of `reps` back-to-back calls.
Span median_span(cl_command_queue q, const std::function<void()>& enqueue, int warmup, int samples, int reps) {
  std::vector<double> times, host;
  for (int i = 0; i < warmup + samples; ++i) {
    cl_event a = nullptr, b = nullptr;
    clEnqueueMarkerWithWaitList(q, 0, nullptr, &a);
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) enqueue();
    const auto t1 = std::chrono::steady_clock::now();
    clEnqueueMarkerWithWaitList(q, 0, nullptr, &b);
    clWaitForEvents(1, &b);
    cl_ulong s = 0, e = 0;
    // Markers carry profiling info on every driver we know; END of the start marker and
    // END of the end marker bracket exactly the enqueued work.
    clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_END, sizeof s, &s, nullptr);
    clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof e, &e, nullptr);
    clReleaseEvent(a);
    clReleaseEvent(b);
    if (i >= warmup) {
      times.push_back(double(e - s) * 1e-6 / reps);
      host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / reps);
    }
  }
  std::sort(times.begin(), times.end());
  std::sort(host.begin(), host.end());
  return {times[times.size() / 2], host[host.size() / 2]};
}
}  // namespace

double Harness::time_ms(const std::function<void()>& enqueue) {
  cl_command_queue q = ctx().cl_queue();
  const Span idle = median_span(q, enqueue, warmup, iters, 1);
  idle_ms = idle.ms;
  host_us = host_idle_us = idle.host_us;
  // Launch latency only matters next to short calls: long ones get fewer calls per sample
  // (a sample stays near kSampleMs), and calls over half of it only the idle pass.
  constexpr double kSampleMs = 25.0;
  const int n = std::min(reps, int(kSampleMs / std::max(idle_ms, 1e-6)));
  if (n <= 1) return idle_ms;
  const Span run = median_span(q, enqueue, 1, iters, n);
  host_us = run.host_us;
  return run.ms;
}

int Harness::rotation_copies(double bytes) {
  if (reps <= 1 || bytes <= 0) return 1;
  cl_ulong llc = 0;
  clGetDeviceInfo(ctx().cl_device(), CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof llc, &llc, nullptr);
  const double want = 3.0 * double(llc);
  return int(std::min(8.0, std::max(1.0, std::ceil(want / bytes))));
}

std::string Harness::timing_desc() const {
  if (reps <= 1) return "median of " + std::to_string(iters) + " single calls on an idle device (marker to marker)";
  return "per call, median of " + std::to_string(iters) + " samples of " + std::to_string(reps) +
         " back-to-back calls (fewer for calls over 2.5 ms, single ones over 12.5 ms; marker to marker; decode "
         "and mla rotate KV copies past the last-level cache); 'idle' = one call on an idle device (host: its "
         "enqueue time, apart from the device's own work)";
}

Harness::LastCommand Harness::last_command(const std::function<void(const Enqueue&)>& enqueue) {
  cl_command_queue q = ctx().cl_queue();
  ctx().finish();
  cl_event a = nullptr, ev = nullptr, b = nullptr;
  Enqueue e;
  e.event = &ev;
  clEnqueueMarkerWithWaitList(q, 0, nullptr, &a);
  enqueue(e);
  clEnqueueMarkerWithWaitList(q, 0, nullptr, &b);
  clWaitForEvents(1, &b);
  cl_ulong s0 = 0, s1 = 0, m0 = 0, m1 = 0;
  clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof s0, &s0, nullptr);
  clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof s1, &s1, nullptr);
  clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_END, sizeof m0, &m0, nullptr);
  clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof m1, &m1, nullptr);
  for (cl_event x : {a, ev, b}) clReleaseEvent(x);
  return {double(s1 - s0) * 1e-3, double(m1 - m0) * 1e-3};
}

void Harness::print_build_log(const std::string& file, const std::string& options) {
  std::string src = rt::kernel_source(file);
  const char* sp = src.c_str();
  cl_int err = 0;
  cl_program pr = clCreateProgramWithSource(ctx().cl_ctx(), 1, &sp, nullptr, &err);
  cl_device_id dev = ctx().cl_device();
  std::string opts = options + (ctx().profile().vendor == "nvidia" ? " -cl-nv-verbose" : "");
  clBuildProgram(pr, 1, &dev, opts.c_str(), nullptr, nullptr);
  if (options.find(rt::kPtxSm90aOption) != std::string::npos) {
    // Rebuild for sm_90a as the program cache does, so the log is the one of the code that runs.
    pr = rt::rebuild_program_sm90a(ctx().cl_ctx(), dev, pr, opts, &err);
    if (!pr) {
      std::printf("#   %s: %s\n", file.c_str(),
                  err == CL_SUCCESS ? "not sm_90 PTX, no sm_90a rebuild" : "creating the sm_90a program failed");
      return;
    }
    if (const char* dump = std::getenv("CLATTN_DUMP_PTX")) {  // the rebuilt program's PTX
      const std::vector<unsigned char> bin = rt::program_binary(pr);
      if (FILE* f = std::fopen(dump, "w")) std::fputs(std::string(bin.begin(), bin.end()).c_str(), f), std::fclose(f);
    }
  }
  const std::string log = rt::build_log(pr, dev);
  clReleaseProgram(pr);
  std::printf("#   build log of %s [%s]:\n%s\n", file.c_str(), opts.c_str(), log.c_str());
}

namespace {
// The whole of `v` as an int ("--param 'A=x': 'x' is not an integer").
int to_int(const std::string& v, const std::string& arg) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || x < INT32_MIN || x > INT32_MAX)
    throw Error(Status::InvalidArgument, arg + ": '" + v + "' is not an integer");
  return int(x);
}
}  // namespace

std::pair<std::string, int> parse_param(const std::string& s) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(Status::InvalidArgument, "--param wants NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), to_int(s.substr(eq + 1), "--param '" + s + "'")};
}

std::string param_suffix(const std::map<std::string, int>& params) {
  std::string s;
  for (const auto& [name, val] : params) s += " " + name + "=" + std::to_string(val);
  return s;
}

// "A=1,2;B=3" -> [{A=1,B=3}, {A=2,B=3}]
std::vector<std::map<std::string, int>> parse_grid(const std::string& g) {
  std::vector<std::map<std::string, int>> out = {{}};
  std::stringstream ss(g);
  std::string axis;
  while (std::getline(ss, axis, ';')) {
    if (axis.empty()) continue;
    auto eq = axis.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(Status::InvalidArgument, "--grid axis '" + axis + "' is not NAME=V1,V2,...");
    std::string name = axis.substr(0, eq);
    std::stringstream vs(axis.substr(eq + 1));
    std::vector<int> vals;
    for (std::string v; std::getline(vs, v, ',');) vals.push_back(to_int(v, "--grid axis '" + axis + "'"));
    if (vals.empty()) throw Error(Status::InvalidArgument, "--grid axis '" + axis + "' has no values");
    std::vector<std::map<std::string, int>> next;
    for (auto& m : out)
      for (int v : vals) {
        auto m2 = m;
        m2[name] = v;
        next.push_back(m2);
      }
    out = next;
  }
  return out;
}

double Harness::same_size_read_gbps(double bytes) {
  const size_t mib = std::max<size_t>(1, size_t(bytes / double(1 << 20) + 0.5));
  auto it = same_size_reads.find(mib);
  if (it != same_size_reads.end()) return it->second;
  double g = 0;  // 0: not measured (e.g. a device too small for two more buffers of that size)
  try {
    g = measure_limits(ctx(), mib << 20).stream_read_gbps;
  } catch (const Error& e) {
    std::printf("#   same-size read of %zu MiB not measured: %s\n", mib, e.what());
  }
  same_size_reads[mib] = g;
  return g;
}

void Harness::report(const std::string& op, const std::string& shape, double ms, double bytes, double flops,
                     const std::string& limit_kind) {
  const Limits& L = get_limits();
  double gbps = bytes / (ms * 1e6);
  double tflops = flops / (ms * 1e9);
  double pct = 0, same = 0;
  std::string limit_desc;
  if (limit_kind == "stream_read") {
    pct = 100.0 * gbps / L.stream_read_gbps;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%% of stream-read %.1f GB/s", L.stream_read_gbps);
    limit_desc = buf;
    if (bytes < 0.75 * double(L.bytes)) same = same_size_read_gbps(bytes);
    if (same > 0) {
      std::snprintf(buf, sizeof buf, " | same-size read %.0f GB/s: %.1f%%", same, 100.0 * gbps / same);
      limit_desc += buf;
    }
  }
  std::string idle;
  if (reps > 1 && idle_ms > 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " | idle %.3f ms %.1f%% | host %.1f us/call (%.1f idle)", idle_ms, pct * ms / idle_ms,
                  host_us, host_idle_us);
    idle = buf;
  }
  std::printf("%-10s %-48s %9.3f ms %9.1f GB/s %8.2f TFLOP/s %6.1f%s%s\n", op.c_str(), shape.c_str(), ms, gbps, tflops,
              pct, limit_desc.empty() ? "" : (" " + limit_desc).c_str(), idle.c_str());
  std::fflush(stdout);
  if (!json_out.empty()) {
    std::ofstream out(json_out, std::ios::app);
    out << "{\"op\":\"" << op << "\",\"shape\":\"" << shape << "\",\"ms\":" << ms << ",\"gbps\":" << gbps
        << ",\"tflops\":" << tflops << ",\"pct_of_limit\":" << pct << ",\"reps\":" << reps
        << ",\"idle_ms\":" << idle_ms << ",\"host_us\":" << host_us << ",\"host_idle_us\":" << host_idle_us << ",\"limit_gbps\":" << L.stream_read_gbps
        << ",\"same_size_read_gbps\":" << same << ",\"device\":\"" << ctx().profile().device_name << "\"}\n";
  }
}

void Harness::report_compute(const std::string& op, const std::string& shape, double ms, double flops,
                             double peak_tflops, const std::string& peak_desc) {
  const double tflops = flops / (ms * 1e9);
  const double pct = peak_tflops > 0 ? 100.0 * tflops / peak_tflops : 0.0;
  char idle[96] = "";
  if (reps > 1 && idle_ms > 0)
    std::snprintf(idle, sizeof idle, " | idle %.3f ms | host %.1f us/call (%.1f idle)", idle_ms, host_us, host_idle_us);
  std::printf("%-10s %-48s %9.3f ms %8.3f TFLOP/s %6.1f%% of %.1f TFLOP/s (%s)%s\n", op.c_str(), shape.c_str(), ms,
              tflops, pct, peak_tflops, peak_desc.c_str(), idle);
  std::fflush(stdout);
  if (!json_out.empty()) {
    std::ofstream out(json_out, std::ios::app);
    out << "{\"op\":\"" << op << "\",\"shape\":\"" << shape << "\",\"ms\":" << ms << ",\"tflops\":" << tflops
        << ",\"pct_of_limit\":" << pct << ",\"reps\":" << reps << ",\"idle_ms\":" << idle_ms << ",\"host_us\":" << host_us << ",\"limit_tflops\":" << peak_tflops << ",\"limit\":\"" << peak_desc
        << "\",\"device\":\"" << ctx().profile().device_name << "\"}\n";
  }
}

}  // namespace clattn::bench
