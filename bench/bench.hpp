// clattn-bench harness: one case file per op registers a subcommand; every case prints
// its achieved rate and the percentage of a limit measured in the same process.
#pragma once
#include <CLI/CLI.hpp>
#include <clattn/clattn.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace clattn::bench {

struct Harness {
  std::string device;    // selector from --device ("" = default)
  Context& ctx();        // created on first use, after options are parsed
  std::unique_ptr<Context> ctx_;
  Limits limits;  // measured once per process, on first use (limits())
  bool limits_measured = false;
  int warmup = 3, iters = 20;
  std::string json_out;  // optional: append result rows as JSON lines to this file

  const Limits& get_limits();
  // Runs `enqueue` (which must enqueue work on ctx's queue and return the LAST event, or
  // nullptr to use a marker) warmup+iters times; returns the median device milliseconds
  // measured from a marker before each run to the event/marker after it.
  double time_ms(const std::function<void()>& enqueue);
  // Prints one aligned result line and (if json_out) appends a JSON row.
  void report(const std::string& op, const std::string& shape, double ms, double bytes, double flops,
              const std::string& limit_kind = "stream_read");
  // Compute-bound ops: prints TFLOP/s and the percentage of `peak_tflops`, a compute limit
  // the case measured or derived itself (`peak_desc` says how); JSON rows as report().
  void report_compute(const std::string& op, const std::string& shape, double ms, double flops, double peak_tflops,
                      const std::string& peak_desc);
};

using Registrar = std::function<void(CLI::App& app, Harness& h)>;
// Each case file adds itself in bench/main.cpp's list.
void register_decode(CLI::App& app, Harness& h);
void register_metadata(CLI::App& app, Harness& h);
void register_linear(CLI::App& app, Harness& h);
void register_extend(CLI::App& app, Harness& h);
void register_mla(CLI::App& app, Harness& h);

}  // namespace clattn::bench
