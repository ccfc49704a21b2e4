// clattn-tune's library part (tools/tune/): per op, a list of candidate parameter sets is
// run over a few representative shapes on the device at hand; every candidate's output is
// compared with the reference run (the generic parameters' output) before it is timed, so a
// wrong fast kernel is never chosen. The result is the JSON that params::tuned_rows() reads
// (docs/tuning.md), a table (tuned vs vendor default vs generic) and ready-to-paste C++ rows.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/params/database.hpp"
#include "clattn/clattn.hpp"

namespace clattn::bench { struct Harness; }

namespace clattn::tune {

using Params = std::map<std::string, int>;

// One problem instance of an op (buffers filled with random data at construction).
class Instance {
 public:
  virtual ~Instance() = default;
  virtual void plan(const Params& p) = 0;  // builds / plans with `p`; throws clattn::Error when unusable
  virtual void enqueue() = 0;              // enqueues one run on the context's queue (nothing blocks)
  virtual void reset() {}                  // restores inputs the op updates in place (linear state)
  virtual std::vector<float> output() = 0; // blocking read-back of everything the op writes
  virtual void done() {}                   // after the op's last candidate (clears process overrides)
  std::string shape;
  double bytes = 0, flops = 0;  // per run: bytes that must move, useful FLOPs
  bool f32_output = false;      // tolerance class of output()
};

// A tunable parameter and the values tried, in the order they are tried.
struct Axis {
  std::string name;
  std::vector<int> values;
};

struct OpSpec {
  std::string name;  // database op
  std::string key;   // database key the tuned row is written for ("bf16", "d128", "*")
  bool compute_bound = false;  // TFLOP/s (else GB/s against the stream-read limit)
  std::string rows_file;       // where built-in rows live (for --emit-rows)
  std::function<std::vector<Axis>(const DeviceProfile&, bool quick)> axes;
  std::function<std::vector<std::unique_ptr<Instance>>(const Context&, bool quick)> instances;
};
// Every op clattn-tune knows, in the order it tunes them.
const std::vector<OpSpec>& op_specs();
std::vector<std::string> op_names();

struct Options {
  std::vector<std::string> ops;  // empty = all
  double time_budget_s = 0;      // total for all ops (0 = no limit); references are always run
  bool quick = false;            // tiny shapes (PoCL / CI)
  int warmup = -1, iters = -1;   // -1: 3/15 (1/3 with quick)
  int passes = 2;                // coordinate-descent passes over the axes
  // Test hook: sees every candidate's output before the comparison (may corrupt it).
  std::function<void(const std::string& op, const Params&, std::vector<float>&)> corrupt_output;
  // Extra candidates per op, tried right after the references (tests, hand-picked points).
  std::map<std::string, std::vector<Params>> extra;
};

struct Measured {
  Params params;
  bool ok = false;
  std::vector<double> ms;  // per shape
  double score = 0;        // geometric mean of reference_ms / ms
  double rate = 0;         // geometric mean of per-shape GB/s or TFLOP/s
};

struct OpResult {
  std::string op, key, metric;  // metric "GB/s" or "TFLOP/s"
  std::vector<std::string> shapes;
  std::vector<double> bytes, flops;
  Measured tuned, vendor, generic;
  int tried = 0, rejected_wrong = 0, skipped = 0;
  std::string error;  // non-empty when the op could not be tuned (reference failed)
};

struct Report {
  std::string device, driver, platform, vendor, architecture, date;
  double stream_read_gbps = 0;
  std::string limit_method;
  std::vector<OpResult> ops;
};

// Tunes the selected ops on h's context. Progress goes to `log` (stderr in the tool).
Report run(bench::Harness& h, const Options& opt, std::FILE* log);

nlohmann::json to_json(const Report& r);
Report from_json(const nlohmann::json& j);  // for --from (table / rows from a written file)
std::string table(const Report& r);
std::string emit_rows(const Report& r);
// Writes `j` to `path` atomically (O_EXCL temp file + rename), mode 0600, creating missing
// parent directories 0700 (rt::write_private_file). Throws InvalidArgument naming --out.
void write_json(const nlohmann::json& j, const std::string& path);
// Writes `j` where the runtime reads it: a named file as above, or the cache's tuned/
// directory (private, 0700) through rt::DiskCache::write_file, so that the runtime's trust
// rules accept what the tuner wrote.
void write_json(const nlohmann::json& j, const params::TunedLocation& at);

}  // namespace clattn::tune
