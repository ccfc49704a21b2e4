// Self-validation of kernel variants that have never run on hardware of their kind
// (params::needs_self_validation). When select_and_build has built such a variant and no
// verdict exists yet for this device and program, the op's check runs a small case through
// the op with exactly that build and with the portable kernel, on buffers and a queue of its
// own, and compares. A match is "pass"; a mismatch (or any error inside the check) is
// "fail": the variant is skipped with a warning and the next candidate is used, so a wrong
// variant costs speed, never a wrong answer. Verdicts are kept per context and on disk
// beside the program binary (<key>.verdict, the program cache's key), so a program is
// checked once per device and driver. All of it happens at plan time.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/dispatch/tile.hpp"
#include "runtime/context_impl.hpp"

namespace clattn::ops {

struct Variant;

// What a check measured: the largest difference between the variant's results and the
// portable kernel's (infinity where either is not finite), and the tolerance it allows.
struct Comparison {
  double max_error = 0, tolerance = 0;
};

// An op's check of candidate `v` on the plan's own kind of case (its dtypes, head dim, page
// size and parameters). It plans inside CheckScopes (one pinned to `v`, one to "generic"),
// runs both and compares. Throws on errors, which count as a mismatch.
using SelfCheck = std::function<Comparison(const Variant& v)>;

struct Verdict {
  bool pass = false;
  double max_error = 0, tolerance = 0;
  std::string origin;  // "ran" (checked now), "memory" (this context), "disk" (<key>.verdict)
  std::string detail;  // what failed when it was not the comparison (an error's message)
};

// The verdict of `v` (built) on this context: this context's, else the disk's, else the
// check's (recorded both places; with no check, a fail that is not recorded). Logs a warning
// for a fail the first time this context meets it.
Verdict validate(detail::ContextImpl& c, const std::string& op, const Variant& v, const SelfCheck& check);

// While one lives on this thread, select_and_build validates nothing (the check's own plans)
// and takes for `op` only the candidate named `variant`: with `pin`, exactly that build (its
// options, reached from the candidate's first tile through the pinned tile where it shrank).
class CheckScope {
 public:
  CheckScope(std::string op, std::string variant);
  CheckScope(std::string op, const Variant& pin);
  ~CheckScope();
  CheckScope(const CheckScope&) = delete;
  CheckScope& operator=(const CheckScope&) = delete;

  const std::string& variant() const { return variant_; }
  const std::string& options() const { return options_; }  // "" = any build of the variant
  const Tile& tile() const { return tile_; }

 private:
  std::string op_, variant_, options_;
  Tile tile_;
  const CheckScope* outer_;
  friend bool in_self_check();
  friend const CheckScope* pinned_scope(const std::string& op);
};
bool in_self_check();
// The innermost CheckScope when it is for `op` (nullptr otherwise).
const CheckScope* pinned_scope(const std::string& op);

// Collects, on this thread while it lives, every verdict validate() returns (clattn-probe
// --self-check, tests).
struct VerdictRecord {
  std::string op, variant, file, options;
  Verdict verdict;
};
class VerdictLog {
 public:
  VerdictLog();
  ~VerdictLog();
  VerdictLog(const VerdictLog&) = delete;
  VerdictLog& operator=(const VerdictLog&) = delete;
  const std::vector<VerdictRecord>& records() const { return records_; }
  void add(VerdictRecord r) { records_.push_back(std::move(r)); }

 private:
  std::vector<VerdictRecord> records_;
  VerdictLog* outer_;
};

// Checks run in this process (every context): lets tests see a cached verdict reused.
int self_validations_run();

// For checks: max |a[i] - b[i]|, infinity where the sizes differ or a value is not finite.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

// One line for a verdict: "pass (max error 0.0012, tolerance 0.03)" / "fail: max error ...";
// "(cached)" where it came from memory or disk.
std::string describe(const Verdict& v);

}  // namespace clattn::ops
