// clattn-tune: tunes kernel parameters on the device at hand and writes the JSON the
// runtime reads at its next start (<cache dir>/tuned/<device>.json, or $CLATTN_TUNED_FILE).
//
//   clattn-tune                                  every op, full shapes, no time limit
//   clattn-tune --ops decode --time-budget 120   decode only, stop trying after 120 s
//   clattn-tune --quick --time-budget 30         tiny shapes (PoCL / CI)
//   clattn-tune --from tuned.json --emit-rows    table + C++ rows from a written file
//
// Progress (one line per candidate) goes to stderr; the table (and --emit-rows) to stdout.
// Details: docs/tuning.md.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backends/params/database.hpp"
#include "harness/harness.hpp"
#include "tools/cli.hpp"
#include "tools/tune/tuner.hpp"

namespace {

// --ops: comma-separated names of ops clattn-tune knows.
CLI::Validator known_ops() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto names = clattn::tune::op_names();
        std::stringstream ss(s);
        for (std::string op; std::getline(ss, op, ',');)
          if (!op.empty() && std::find(names.begin(), names.end(), op) == names.end())
            return "unknown op '" + op + "' (one of " + clattn::cli::join(names) + ")";
        return {};
      },
      "OP[,OP...]");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"clattn-tune: search kernel parameters on this device and write them where the runtime reads them"};
  clattn::tune::Options opt;
  std::string device, out, ops, from;
  bool emit = false, dry = false, check_args = false;
  using clattn::cli::at_least;
  app.add_option("--ops", ops,
                 "comma-separated ops to tune (default: all = " + clattn::cli::join(clattn::tune::op_names(), ",") + ")")
      ->check(known_ops());
  app.add_option("--time-budget", opt.time_budget_s,
                 "seconds for all ops together; when spent, stop trying candidates and keep the best so far "
                 "(the generic and vendor-default reference runs always run). 0 = no limit")
      ->check(at_least(0));
  app.add_option("--out", out, "JSON file to write (default: $CLATTN_TUNED_FILE, else <cache dir>/tuned/<device>.json)");
  app.add_option("--device", device, "device selector (index, vendor or name substring)");
  app.add_flag("--quick", opt.quick, "tiny shapes and short axes (PoCL / CI)");
  app.add_option("--warmup", opt.warmup, "untimed runs per measurement (default 3, --quick 1)")->check(at_least(0));
  app.add_option("--iters", opt.iters, "timed runs per measurement, median kept (default 15, --quick 3)")
      ->check(at_least(1));
  app.add_option("--passes", opt.passes, "coordinate-descent passes over the axes (default 2)")->check(at_least(1));
  app.add_flag("--emit-rows", emit, "also print ready-to-paste Level::Device rows for backends/params/rows_<op>.cpp");
  app.add_option("--from", from, "read a JSON file written earlier instead of tuning (with --emit-rows: rows only)");
  app.add_flag("--dry-run", dry, "tune and print, but write no file");
  clattn::cli::add_check_args(app, &check_args);
  return clattn::cli::run("clattn-tune", app, argc, argv, [&]() -> int {
    if (check_args) return 0;
    clattn::tune::Report rep;
    if (!from.empty()) {
      std::ifstream in(from);
      if (!in) throw clattn::Error(clattn::Status::InvalidArgument, "--from: cannot read '" + from + "'");
      rep = clattn::tune::from_json(nlohmann::json::parse(in));
    } else {
      std::stringstream ss(ops);
      for (std::string op; std::getline(ss, op, ',');)
        if (!op.empty()) opt.ops.push_back(op);
      clattn::bench::Harness h;
      h.device = device;
      rep = clattn::tune::run(h, opt, stderr);
      if (!dry) {
        clattn::params::TunedLocation at = clattn::params::tuned_location(h.ctx().profile());
        if (!out.empty()) at = {out, /*named=*/true, "", ""};
        // Ops tuned earlier and not re-tuned now are kept (same device only), from a file the
        // runtime itself would trust: a distrusted one is not laundered into ours.
        nlohmann::json j = clattn::tune::to_json(rep);
        if (auto old = clattn::params::read_tuned_text(at)) {
          try {
            nlohmann::json prev = nlohmann::json::parse(*old);
            if (prev.value("device", std::string()) == rep.device)
              for (auto& [op, body] : prev.at("ops").items())
                if (!j["ops"].contains(op)) j["ops"][op] = body;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "clattn-tune: previous %s unreadable (%s): replaced\n", at.path.c_str(), e.what());
          }
        }
        clattn::tune::write_json(j, at);
        out = at.path;
        std::fprintf(stderr, "clattn-tune: wrote %s (the runtime reads it at its next start)\n", out.c_str());
        if (!h.ctx().profile().vendor_forced.empty())
          std::fprintf(stderr, "clattn-tune: note: CLATTN_FORCE_VENDOR=%s is set; the runtime ignores tuned rows while it is\n",
                       h.ctx().profile().vendor_forced.c_str());
      }
    }
    if (!(emit && !from.empty())) std::cout << clattn::tune::table(rep);
    if (emit) std::cout << "\n" << clattn::tune::emit_rows(rep);
    return 0;
  });
}
