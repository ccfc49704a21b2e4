#include "backends/dispatch/self_validation.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "backends/dispatch/variant.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::ops {

namespace {

thread_local const CheckScope* t_scope = nullptr;
thread_local VerdictLog* t_log = nullptr;
std::atomic<int> g_runs{0};

// The verdict as one line of text: "pass|fail <max error> <tolerance> <op> <variant>[ <detail>]".
std::string to_text(const Verdict& v, const std::string& op, const std::string& variant) {
  char nums[64];
  std::snprintf(nums, sizeof nums, "%.6g %.6g", v.max_error, v.tolerance);
  std::string detail = v.detail.substr(0, 300);
  for (char& ch : detail)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return std::string(v.pass ? "pass " : "fail ") + nums + " " + op + " " + variant +
         (detail.empty() ? "" : " " + detail) + "\n";
}

// nullopt when `text` is not a verdict (then it is checked again).
std::optional<Verdict> from_text(const std::string& text) {
  std::istringstream in(text);
  std::string word, max_error, tolerance;
  if (!(in >> word >> max_error >> tolerance) || (word != "pass" && word != "fail")) return std::nullopt;
  Verdict v;
  v.pass = word == "pass";
  char* end = nullptr;
  v.max_error = std::strtod(max_error.c_str(), &end);
  if (*end) return std::nullopt;
  v.tolerance = std::strtod(tolerance.c_str(), &end);
  if (*end) return std::nullopt;
  std::string op, variant;
  in >> op >> variant;
  std::getline(in, v.detail);
  while (!v.detail.empty() && (v.detail.front() == ' ' || v.detail.back() == '\n')) {
    if (v.detail.front() == ' ') v.detail.erase(0, 1);
    else v.detail.pop_back();
  }
  return v;
}

Verdict note(Verdict v, const std::string& op, const Variant& var) {
  if (t_log) t_log->add({op, var.name, var.file, var.options, v});
  return v;
}

void warn_fail(const detail::ContextImpl& c, const std::string& op, const Variant& var, const Verdict& v) {
  char err[96];
  std::snprintf(err, sizeof err, "max error %.3g against the generic kernel, tolerance %.3g", v.max_error, v.tolerance);
  rt::log().warn("{}: variant {} failed self-validation on {} ({}{}); using the next candidate", op, var.name,
                 c.profile.device_name, v.detail.empty() ? std::string(err) : v.detail,
                 v.origin == "ran" ? "" : "; verdict cached beside its program binary");
}

}  // namespace

CheckScope::CheckScope(std::string op, std::string variant)
    : op_(std::move(op)), variant_(std::move(variant)), outer_(t_scope) {
  t_scope = this;
}
CheckScope::CheckScope(std::string op, const Variant& pin)
    : op_(std::move(op)), variant_(pin.name), options_(pin.options), tile_(pin.tile), outer_(t_scope) {
  t_scope = this;
}
CheckScope::~CheckScope() { t_scope = outer_; }

bool in_self_check() { return t_scope != nullptr; }

const CheckScope* pinned_scope(const std::string& op) { return t_scope && t_scope->op_ == op ? t_scope : nullptr; }

VerdictLog::VerdictLog() : outer_(t_log) { t_log = this; }
VerdictLog::~VerdictLog() { t_log = outer_; }

int self_validations_run() { return g_runs.load(); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  const double inf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return inf;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return inf;
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  }
  return m;
}

std::string describe(const Verdict& v) {
  char buf[96];
  std::string s;
  if (v.pass) {
    std::snprintf(buf, sizeof buf, "pass (max error %.3g, tolerance %.3g)", v.max_error, v.tolerance);
    s = buf;
  } else if (!v.detail.empty()) {
    s = "fail: " + v.detail;
  } else {
    std::snprintf(buf, sizeof buf, "fail: max error %.3g against the generic kernel, tolerance %.3g", v.max_error,
                  v.tolerance);
    s = buf;
  }
  if (v.origin == "memory" || v.origin == "disk") s += " (cached)";
  return s;
}

Verdict validate(detail::ContextImpl& c, const std::string& op, const Variant& var, const SelfCheck& check) {
  bool unreadable = false;
  auto known = [&](bool* from_disk, bool use_disk) -> std::optional<Verdict> {
    auto text = c.programs.note(var.file, var.options, ".verdict", from_disk, use_disk);
    if (!text) return std::nullopt;
    auto v = from_text(*text);
    if (!v) {
      std::string shown = text->substr(0, 80);
      for (char& ch : shown)
        if (ch < ' ' || ch > '~') ch = '?';
      rt::log().warn("{}: unreadable self-validation verdict for {} ('{}'); checking again", op, var.name, shown);
      unreadable = true;
      return std::nullopt;
    }
    v->origin = *from_disk ? "disk" : "memory";
    if (!v->pass && *from_disk) warn_fail(c, op, var, *v);  // once per context: later it comes from memory
    return v;
  };
  bool from_disk = false;
  if (auto v = known(&from_disk, true)) return note(*v, op, var);
  std::lock_guard<std::mutex> lock(c.self_validation_mu);
  if (!unreadable)
    if (auto v = known(&from_disk, false)) return note(*v, op, var);  // another thread checked it meanwhile

  Verdict v;
  v.origin = "ran";
  if (!check) {
    v.max_error = std::numeric_limits<double>::infinity();
    v.detail = op + " has no self-validation check";
    static std::mutex mu;
    static std::set<std::string> warned;  // once per process: a property of the library, not recorded
    std::lock_guard<std::mutex> once(mu);
    if (warned.insert(op + " " + var.name).second) warn_fail(c, op, var, v);
    return note(v, op, var);
  }
  ++g_runs;
  try {
    const Comparison cmp = check(var);
    v.max_error = cmp.max_error, v.tolerance = cmp.tolerance;
    v.pass = cmp.max_error <= cmp.tolerance;  // false for NaN and infinity
  } catch (const std::exception& e) {
    v.pass = false;
    v.max_error = std::numeric_limits<double>::infinity();
    v.detail = std::string("the check failed: ") + e.what();
  }
  c.programs.set_note(var.file, var.options, ".verdict", to_text(v, op, var.name));
  if (v.pass)
    rt::log().info("{}: variant {} passed self-validation on {} (max error {:.3g}, tolerance {:.3g})", op, var.name,
                   c.profile.device_name, v.max_error, v.tolerance);
  else
    warn_fail(c, op, var, v);
  return note(v, op, var);
}

}  // namespace clattn::ops
