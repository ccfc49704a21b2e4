// The timing harness of clattn-bench and clattn-tune: device time as the median between
// markers (idle single calls or back-to-back calls), the limits measured in the same
// process (streaming read, copy), and result rows (aligned text, optional JSON lines).
// Library clattn_harness; the namespace stays clattn::bench (its first user's).
#pragma once
#include <clattn/clattn.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace clattn::bench {

struct Harness {
  std::string device;    // selector from --device ("" = default)
  Context& ctx();        // created on first use, after options are parsed
  std::unique_ptr<Context> ctx_;
  Limits limits;  // measured once per process, on first use (limits())
  bool limits_measured = false;
  int warmup = 3, iters = 20;
  // Calls per timed sample. 1: one call on an idle device (marker, call, marker), so the
  // driver's launch latency is in every sample. N > 1: N calls back to back between the
  // markers, per-call time = span / N, as an engine runs layer after layer (launch latency
  // hidden, inter-kernel gaps counted; N shrinks so a sample stays near 25 ms, calls over
  // 12.5 ms are timed singly); the idle single-call median is kept in idle_ms.
  int reps = 1;
  double idle_ms = 0;    // last time_ms's single-call median (reps > 1 only; else = result)
  double host_us = 0;    // last time_ms's host time per call spent enqueueing (median)
  double host_idle_us = 0;  // the same for single calls on an idle device (no contention with the device's work)
  std::string json_out;  // optional: append result rows as JSON lines to this file

  const Limits& get_limits();
  // Streaming read of `bytes` (rounded to MiB), measured once per size: the same kernel as
  // the limit over the op's own byte count, which shows the per-launch ramp that a bare read
  // of that size pays too (printed beside the limit for ops reading less than it).
  double same_size_read_gbps(double bytes);
  std::map<size_t, double> same_size_reads;
  // Runs `enqueue` (which enqueues one call on ctx's queue) warmup + iters samples of
  // `reps` calls; returns the median per-call device milliseconds between a marker before
  // and a marker after each sample.
  double time_ms(const std::function<void()>& enqueue);
  // How many copies of a `bytes` working set to rotate through in back-to-back samples so
  // that a call never finds its inputs in the device's last-level cache (>= 3x its size
  // in all; at most 8; 1 when reps == 1 or the set is already that large).
  int rotation_copies(double bytes);
  // One call through `enqueue` on an idle device, its last command's event requested: that
  // command's profiled duration (kernel time, no launch latency) and the whole call's time
  // between a marker before and one after it, both in microseconds and of the same call.
  struct LastCommand {
    double last_us = 0, call_us = 0;
  };
  LastCommand last_command(const std::function<void(const Enqueue&)>& enqueue);
  // Rebuilds `file` with `options` (NVIDIA: plus -cl-nv-verbose: registers, spills) and
  // prints the build log.
  void print_build_log(const std::string& file, const std::string& options);
  // One line describing the timing method (printed by each op's header).
  std::string timing_desc() const;
  // Prints one aligned result line and (if json_out) appends a JSON row.
  void report(const std::string& op, const std::string& shape, double ms, double bytes, double flops,
              const std::string& limit_kind = "stream_read");
  // Compute-bound ops: prints TFLOP/s and the percentage of `peak_tflops`, a compute limit
  // the case measured or derived itself (`peak_desc` says how); JSON rows as report().
  void report_compute(const std::string& op, const std::string& shape, double ms, double flops, double peak_tflops,
                      const std::string& peak_desc);
};

// --param NAME=VALUE and --grid "A=1,2;B=3" (every combination) parsing, shared by the ops;
// malformed text throws InvalidArgument naming the argument.
std::pair<std::string, int> parse_param(const std::string& s);
std::vector<std::map<std::string, int>> parse_grid(const std::string& g);
// " NAME=VALUE" per override, appended to a case's shape so sweep rows say what they ran.
std::string param_suffix(const std::map<std::string, int>& params);

}  // namespace clattn::bench
