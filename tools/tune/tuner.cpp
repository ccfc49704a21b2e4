// clattn-tune's search: references first (generic = the correctness oracle, then the
// vendor default), then a coordinate descent from the better of the two over the op's
// axes (one parameter changed at a time, kept when it is >1% faster over all shapes),
// until the axes stop improving or the time budget is spent. Timing is clattn-bench's
// (bench::Harness::time_ms: median of marker-bracketed device time).
#include "tools/tune/tuner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <sstream>

#include "backends/params/database.hpp"
#include "harness/harness.hpp"
#include "runtime/disk_cache.hpp"

namespace clattn::tune {
namespace {

using Clock = std::chrono::steady_clock;

std::string params_str(const Params& p, const Params* base = nullptr) {
  std::string s;
  for (auto& [k, v] : p) {
    if (base) {
      auto it = base->find(k);
      if (it != base->end() && it->second == v) continue;
    }
    s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  }
  return s.empty() ? "(same)" : s;
}

// Candidate output vs the reference output: |got - want| <= atol + rtol |want|, with atol
// relative to the reference's largest magnitude (outputs of long contexts are small).
bool close(const std::vector<float>& got, const std::vector<float>& want, bool f32, std::string* why) {
  if (got.size() != want.size()) {
    *why = "output size " + std::to_string(got.size()) + " != reference " + std::to_string(want.size());
    return false;
  }
  float maxabs = 0;
  for (float w : want) maxabs = std::max(maxabs, std::fabs(w));
  const double rtol = f32 ? 1e-3 : 2e-2, atol = (f32 ? 1e-4 : 4e-3) * maxabs + 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (!(d <= atol + rtol * std::fabs(double(want[i])))) {  // NaN fails too
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %zu = %g, reference %g (tolerance %.2g + %.2g x |ref|)", i, double(got[i]),
                    double(want[i]), atol, rtol);
      *why = buf;
      return false;
    }
  }
  return true;
}

double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return v.empty() ? 0 : std::exp(s / double(v.size()));
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

struct OpRun {
  const OpSpec& spec;
  bench::Harness& h;
  const Options& opt;
  std::FILE* log;
  std::vector<std::unique_ptr<Instance>> inst;
  std::vector<std::vector<float>> ref;
  std::vector<double> ref_ms;
  OpResult res;
  std::set<Params> seen;
  Clock::time_point t0 = Clock::now();

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  // Plans, checks and times `p` on every shape. `reference`: record the output as the oracle.
  Measured evaluate(const Params& p, const char* label, bool reference) {
    Measured m;
    m.params = p;
    ++res.tried;
    std::vector<double> rates;
    for (size_t i = 0; i < inst.size(); ++i) {
      Instance& in = *inst[i];
      std::string stage = "plan/build";
      try {
        in.plan(p);
        in.reset();
        stage = "run";
        in.enqueue();
        std::vector<float> out = in.output();
        if (reference) {
          ref[i] = out;
        } else {
          if (opt.corrupt_output) opt.corrupt_output(spec.name, p, out);
          std::string why;
          if (!close(out, ref[i], in.f32_output, &why)) {
            ++res.rejected_wrong;
            std::fprintf(log, "[%s %5.1fs] %-9s REJECTED (wrong result on %s: %s): %s\n", spec.name.c_str(), elapsed(),
                         label, in.shape.c_str(), why.c_str(), params_str(p, &res.vendor.params).c_str());
            return m;
          }
        }
        stage = "timing";
        m.ms.push_back(h.time_ms([&] { in.enqueue(); }));
      } catch (const std::exception& e) {
        ++res.skipped;
        std::fprintf(log, "[%s %5.1fs] %-9s skipped (%s failed on %s: %s): %s\n", spec.name.c_str(), elapsed(), label,
                     stage.c_str(), in.shape.c_str(), e.what(), params_str(p, &res.vendor.params).c_str());
        return m;
      }
      rates.push_back(spec.compute_bound ? in.flops / (m.ms.back() * 1e9) : in.bytes / (m.ms.back() * 1e6));
    }
    m.ok = true;
    m.rate = geomean(rates);
    if (reference) ref_ms = m.ms;
    std::vector<double> speed;
    for (size_t i = 0; i < m.ms.size(); ++i) speed.push_back(ref_ms[i] / m.ms[i]);
    m.score = geomean(speed);
    std::string times;
    for (double t : m.ms) times += " " + std::to_string(t).substr(0, 7);
    std::fprintf(log, "[%s %5.1fs] %-9s %8.1f %s  x%.3f vs ref  ms:%s  %s\n", spec.name.c_str(), elapsed(), label,
                 m.rate, res.metric.c_str(), m.score, times.c_str(), params_str(p, &res.vendor.params).c_str());
    std::fflush(log);
    return m;
  }
};

OpResult tune_op(const OpSpec& spec, bench::Harness& h, const Options& opt, double budget_s, std::FILE* log) {
  Context& ctx = h.ctx();
  OpRun r{spec, h, opt, log, {}, {}, {}, {}, {}};
  r.res.op = spec.name;
  r.res.key = spec.key;
  r.res.metric = spec.compute_bound ? "TFLOP/s" : "GB/s";
  // Generic and vendor-default parameters: the same lookup as the runtime's, restricted to
  // those levels (a forced vendor skips device, architecture and tuned rows).
  DeviceProfile pg = ctx.profile(), pv = ctx.profile();
  pg.vendor_forced = "generic";
  pv.vendor_forced = ctx.profile().param_vendor();
  r.res.generic.params = params::lookup(pg, spec.name, spec.key).values;
  r.res.vendor.params = params::lookup(pv, spec.name, spec.key).values;
  try {
    r.inst = spec.instances(ctx, opt.quick);
  } catch (const std::exception& e) {
    r.res.error = std::string("could not set up the shapes: ") + e.what();
    std::fprintf(log, "[%s] %s\n", spec.name.c_str(), r.res.error.c_str());
    return r.res;
  }
  for (auto& in : r.inst) {
    r.res.shapes.push_back(in->shape);
    r.res.bytes.push_back(in->bytes);
    r.res.flops.push_back(in->flops);
  }
  r.ref.resize(r.inst.size());
  std::fprintf(log, "[%s] %zu shapes, key '%s', budget %s; vendor default (%s): %s\n", spec.name.c_str(),
               r.inst.size(), spec.key.c_str(), budget_s > 0 ? (std::to_string(int(budget_s)) + " s").c_str() : "none",
               pv.vendor_forced.c_str(), params_str(r.res.vendor.params).c_str());
  auto finish = [&] {
    for (auto& in : r.inst) in->done();
    return r.res;
  };
  r.res.generic = r.evaluate(r.res.generic.params, "generic", true);
  r.seen.insert(r.res.generic.params);
  const bool vendor_is_reference = !r.res.generic.ok;
  if (vendor_is_reference)  // e.g. a device below the generic work-group size: the vendor run is the oracle
    std::fprintf(log, "[%s] the generic parameters failed here: the vendor default becomes the reference\n",
                 spec.name.c_str());
  r.res.vendor = r.evaluate(r.res.vendor.params, "vendor", vendor_is_reference);
  r.seen.insert(r.res.vendor.params);
  if (!r.res.generic.ok && !r.res.vendor.ok) {
    r.res.error = "neither the generic nor the vendor-default parameters run here (no reference)";
    return finish();
  }
  Measured best = !r.res.generic.ok || (r.res.vendor.ok && r.res.vendor.score > r.res.generic.score) ? r.res.vendor
                                                                                                     : r.res.generic;
  auto out_of_time = [&] { return budget_s > 0 && r.elapsed() >= budget_s; };
  auto consider = [&](const Params& p, const char* label) {
    if (!r.seen.insert(p).second) return false;
    Measured m = r.evaluate(p, label, false);
    if (m.ok && m.score > best.score * 1.01) {
      std::fprintf(log, "[%s %5.1fs]   new best x%.3f\n", spec.name.c_str(), r.elapsed(), m.score);
      best = m;
      return true;
    }
    return false;
  };
  auto extra = opt.extra.find(spec.name);
  if (extra != opt.extra.end())
    for (auto& e : extra->second) {
      Params p = best.params;
      for (auto& [k, v] : e) p[k] = v;
      if (out_of_time()) break;
      consider(p, "extra");
    }
  // Only parameters the database has for this op (an axis for a parameter a newer kernel
  // reads is offered by tune_ops.cpp before every tree has it).
  std::vector<Axis> axes;
  for (auto& ax : spec.axes(ctx.profile(), opt.quick))
    if (r.res.generic.params.count(ax.name) || r.res.vendor.params.count(ax.name)) axes.push_back(ax);
  for (int pass = 0; pass < opt.passes && !out_of_time(); ++pass) {
    bool improved = false;
    for (auto& ax : axes) {
      const Params start = best.params;
      for (int v : ax.values) {
        if (out_of_time()) break;
        Params p = start;
        p[ax.name] = v;
        improved |= consider(p, ax.name.c_str());
      }
    }
    if (!improved) break;
  }
  if (out_of_time()) std::fprintf(log, "[%s %5.1fs] time budget spent: keeping the best so far\n", spec.name.c_str(), r.elapsed());
  r.res.tuned = best;
  std::fprintf(log, "[%s] chose x%.3f vs the reference (%s), %d tried, %d rejected as wrong, %d skipped\n",
               spec.name.c_str(), best.score, params_str(best.params, &r.res.vendor.params).c_str(), r.res.tried,
               r.res.rejected_wrong, r.res.skipped);
  return finish();
}

nlohmann::json measured_json(const Measured& m) {
  return {{"params", m.params}, {"ok", m.ok}, {"value", m.rate}, {"ms", m.ms}, {"speedup_vs_generic", m.score}};
}

Measured measured_from(const nlohmann::json& j) {
  Measured m;
  m.params = j.value("params", Params{});
  m.ok = j.value("ok", true);
  m.rate = j.value("value", 0.0);
  m.ms = j.value("ms", std::vector<double>{});
  m.score = j.value("speedup_vs_generic", 0.0);
  return m;
}

}  // namespace

Report run(bench::Harness& h, const Options& opt, std::FILE* log) {
  for (auto& name : opt.ops)
    if (std::none_of(op_specs().begin(), op_specs().end(), [&](const OpSpec& s) { return s.name == name; }))
      throw Error(Status::InvalidArgument, "--ops: unknown op '" + name + "' (known: " + [] {
        std::string n;
        for (auto& s : op_names()) n += (n.empty() ? "" : " ") + s;
        return n;
      }() + ")");
  Context& ctx = h.ctx();
  const auto& p = ctx.profile();
  if (opt.warmup >= 0) h.warmup = opt.warmup;
  else h.warmup = opt.quick ? 1 : 3;
  if (opt.iters >= 0) h.iters = opt.iters;
  else h.iters = opt.quick ? 3 : 15;
  Report rep;
  rep.device = p.device_name, rep.driver = p.driver_version, rep.platform = p.platform_name;
  rep.vendor = p.param_vendor(), rep.architecture = p.architecture, rep.date = today();
  const Limits& L = h.get_limits();
  rep.stream_read_gbps = L.stream_read_gbps;
  rep.limit_method = L.method;
  std::vector<const OpSpec*> selected;
  for (auto& s : op_specs())
    if (opt.ops.empty() || std::find(opt.ops.begin(), opt.ops.end(), s.name) != opt.ops.end()) selected.push_back(&s);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < selected.size(); ++i) {
    double budget = 0;
    if (opt.time_budget_s > 0) {  // what is left, shared by the ops still to tune
      double left = opt.time_budget_s - std::chrono::duration<double>(Clock::now() - t0).count();
      budget = std::max(0.001, left / double(selected.size() - i));
    }
    rep.ops.push_back(tune_op(*selected[i], h, opt, budget, log));
  }
  params::clear_overrides();
  return rep;
}

nlohmann::json to_json(const Report& r) {
  nlohmann::json ops = nlohmann::json::object();
  for (auto& o : r.ops) {
    if (!o.error.empty() || !o.tuned.ok) {
      ops[o.op]["_error"] = o.error.empty() ? "no candidate passed" : o.error;
      continue;
    }
    nlohmann::json e = measured_json(o.tuned);
    e["metric"] = o.metric;
    if (o.metric == "GB/s" && r.stream_read_gbps > 0) e["pct_of_stream_read"] = 100.0 * o.tuned.rate / r.stream_read_gbps;
    e["vendor_default"] = measured_json(o.vendor);
    e["generic"] = measured_json(o.generic);
    e["shapes"] = o.shapes;
    e["bytes"] = o.bytes;
    e["flops"] = o.flops;
    e["candidates"] = {{"tried", o.tried}, {"rejected_wrong", o.rejected_wrong}, {"skipped", o.skipped}};
    ops[o.op][o.key] = e;
  }
  return {{"format", "clattn-tune 1"},
          {"device", r.device},
          {"driver", r.driver},
          {"platform", r.platform},
          {"vendor", r.vendor},
          {"architecture", r.architecture},
          {"date", r.date},
          {"clattn_version", version()},
          {"stream_read_gbps", r.stream_read_gbps},
          {"limit_method", r.limit_method},
          {"ops", ops}};
}

Report from_json(const nlohmann::json& j) {
  Report r;
  r.device = j.at("device").get<std::string>();
  r.driver = j.value("driver", ""), r.platform = j.value("platform", ""), r.vendor = j.value("vendor", "");
  r.architecture = j.value("architecture", ""), r.date = j.value("date", "");
  r.stream_read_gbps = j.value("stream_read_gbps", 0.0), r.limit_method = j.value("limit_method", "");
  for (auto& [op, keys] : j.at("ops").items())
    for (auto& [key, e] : keys.items()) {
      if (!e.is_object()) continue;
      OpResult o;
      o.op = op, o.key = key, o.metric = e.value("metric", "GB/s");
      o.tuned = measured_from(e);
      if (e.contains("vendor_default")) o.vendor = measured_from(e["vendor_default"]);
      if (e.contains("generic")) o.generic = measured_from(e["generic"]);
      o.shapes = e.value("shapes", std::vector<std::string>{});
      o.bytes = e.value("bytes", std::vector<double>{});
      o.flops = e.value("flops", std::vector<double>{});
      if (auto c = e.find("candidates"); c != e.end())
        o.tried = c->value("tried", 0), o.rejected_wrong = c->value("rejected_wrong", 0), o.skipped = c->value("skipped", 0);
      r.ops.push_back(o);
    }
  return r;
}

std::string table(const Report& r) {
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "# %s (%s, driver %s), %s; stream-read limit %.1f GB/s (%s)\n", r.device.c_str(),
                r.platform.c_str(), r.driver.c_str(), r.date.c_str(), r.stream_read_gbps, r.limit_method.c_str());
  os << buf;
  for (auto& o : r.ops) {
    if (!o.error.empty()) {
      os << "\n== " << o.op << ": not tuned: " << o.error << "\n";
      continue;
    }
    const bool bw = o.metric == "GB/s";
    std::snprintf(buf, sizeof buf, "\n== %s [%s]: %d candidates, %d rejected (wrong result), %d skipped (build/plan)\n",
                  o.op.c_str(), o.key.c_str(), o.tried, o.rejected_wrong, o.skipped);
    os << buf;
    std::snprintf(buf, sizeof buf, "%-44s | %-27s | %-27s | %-27s\n", "shape", "tuned", "vendor default", "generic");
    os << buf;
    auto cell = [&](const Measured& m, size_t i) {
      if (!m.ok || i >= m.ms.size()) return std::string("failed");
      char c[32];
      std::snprintf(c, sizeof c, "%9.3f ms", m.ms[i]);
      return std::string(c);
    };
    for (size_t i = 0; i < o.shapes.size(); ++i) {
      auto rate_of = [&](const Measured& m) -> std::string {
        if (!m.ok || i >= m.ms.size()) return "";
        char c[48];
        double v = 0;
        if (i < o.bytes.size() && bw) v = o.bytes[i] / (m.ms[i] * 1e6);
        if (i < o.flops.size() && !bw) v = o.flops[i] / (m.ms[i] * 1e9);
        if (v <= 0) return "";
        if (bw && r.stream_read_gbps > 0) std::snprintf(c, sizeof c, " %7.1f %3.0f%%", v, 100.0 * v / r.stream_read_gbps);
        else std::snprintf(c, sizeof c, " %8.3g", v);
        return c;
      };
      std::snprintf(buf, sizeof buf, "%-44s | %-27s | %-27s | %-27s\n", o.shapes[i].substr(0, 44).c_str(),
                    (cell(o.tuned, i) + rate_of(o.tuned)).c_str(), (cell(o.vendor, i) + rate_of(o.vendor)).c_str(),
                    (cell(o.generic, i) + rate_of(o.generic)).c_str());
      os << buf;
    }
    auto agg = [&](const Measured& m) {
      char c[64];
      if (!m.ok) return std::string("failed");
      if (bw && r.stream_read_gbps > 0)
        std::snprintf(c, sizeof c, "%7.1f GB/s %3.0f%% x%.2f", m.rate, 100.0 * m.rate / r.stream_read_gbps, m.score);
      else std::snprintf(c, sizeof c, "%7.3g %s x%.2f", m.rate, o.metric.c_str(), m.score);
      return std::string(c);
    };
    std::snprintf(buf, sizeof buf, "%-44s | %-27s | %-27s | %-27s\n", "geomean (x = speed-up vs reference)",
                  agg(o.tuned).c_str(), agg(o.vendor).c_str(), agg(o.generic).c_str());
    os << buf;
    os << "  tuned:   " << params_str(o.tuned.params) << "\n";
    os << "  changed vs vendor default: " << params_str(o.tuned.params, &o.vendor.params) << "\n";
  }
  std::string t = os.str(), out;  // without the column padding at line ends
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\n')
      while (!out.empty() && out.back() == ' ') out.pop_back();
    out += t[i];
  }
  return out;
}

// A C++ string literal's body.
std::string cxx(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string emit_rows(const Report& r) {
  std::ostringstream os;
  os << "// clattn-tune " << r.date << " on " << r.device << " (" << r.platform << ", driver " << r.driver
     << "): paste each row into the op's table (file named above it).\n";
  for (auto& o : r.ops) {
    if (!o.error.empty() || !o.tuned.ok) continue;
    std::string file;
    for (auto& s : op_specs())
      if (s.name == o.op) file = s.rows_file;
    os << "\n// " << file << "\n";
    os << "      {\"" << o.op << "\", Level::Device, \"" << cxx(r.device) << "\", \"" << o.key << "\",\n       {";
    bool first = true;
    for (auto& [k, v] : o.tuned.params) {
      os << (first ? "" : ", ") << "{\"" << k << "\", " << v << "}";
      first = false;
    }
    char fig[256];
    const bool bw = o.metric == "GB/s";
    if (bw && r.stream_read_gbps > 0)
      std::snprintf(fig, sizeof fig, "%.4g GB/s = %.0f%% of stream-read %.4g GB/s; vendor default %.4g, generic %.4g",
                    o.tuned.rate, 100.0 * o.tuned.rate / r.stream_read_gbps, r.stream_read_gbps, o.vendor.rate,
                    o.generic.rate);
    else
      std::snprintf(fig, sizeof fig, "%.4g %s; vendor default %.4g, generic %.4g", o.tuned.rate, o.metric.c_str(),
                    o.vendor.rate, o.generic.rate);
    std::string shapes;
    for (auto& s : o.shapes) shapes += (shapes.empty() ? "" : "; ") + s;
    os << "},\n       \"" << cxx("clattn-tune " + r.date + " (driver " + r.driver + "): " + fig + " (geomean over " + shapes + "); " +
                       std::to_string(o.tried) + " candidates, " + std::to_string(o.rejected_wrong) + " rejected as wrong")
       << "\"},\n";
  }
  return os.str();
}

void write_json(const nlohmann::json& j, const std::string& path) {
  std::string why = rt::write_private_file(path, j.dump(2) + "\n");
  if (!why.empty()) throw Error(Status::InvalidArgument, "--out: " + why);
}

void write_json(const nlohmann::json& j, const params::TunedLocation& at) {
  if (at.path.empty()) throw Error(Status::InvalidArgument, "--out: no cache directory; give --out");
  if (at.named) return write_json(j, at.path);
  rt::DiskCache cache(at.cache_dir);
  std::string why = cache.write_file(params::kTunedSubdir, at.name, j.dump(2) + "\n");
  if (!why.empty()) throw Error(Status::InvalidArgument, "--out: cannot write " + at.path + ": " + why);
}

}  // namespace clattn::tune
