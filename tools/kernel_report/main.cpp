// clattn-kernel-report: the offline build gate. For each GPU target (Intel through ocloc, AMD
// through clang-15's amdgcn backend) it asks every op which programs it would build there
// (ops::catalog: the ops' own parameter lookup and candidate code, for a profile of that GPU),
// compiles each with exactly the runtime's source and options, and prints per target the
// registers, spills, local memory and occupancy / SIMD width of every kernel. --check fails
// on a build error, a register spill in a program the runtime would choose, a matrix variant
// whose binary lacks the matrix instructions, or a shape an op would refuse on that target.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/kernel_sources.hpp"
#include "tools/cli.hpp"
#include "tools/kernel_report/report.hpp"

namespace fs = std::filesystem;
using clattn::kreport::Build;
using clattn::kreport::KernelFigures;
using clattn::kreport::Target;

namespace {

// One distinct program (file + options) of one target and the op shapes that build it.
struct Program {
  std::string file, options, variant;
  std::vector<std::string> used_by;
  bool chosen = false;  // the runtime's first choice for at least one shape
  Build build;
};

// The instruction a matrix-engine variant must contain ("" for the others).
const char* matrix_mnemonic(const std::string& variant) {
  if (variant == "intel_dpas") return "dpas";
  if (variant == "amd_wmma") return "v_wmma";
  if (variant == "amd_mfma") return "v_mfma";
  return "";
}

std::string cell(long v) { return v < 0 ? "-" : std::to_string(v); }

struct TargetResult {
  const Target* target;
  std::vector<Program> programs;
  std::vector<std::string> refused;  // op shapes the op would refuse here
  int errors = 0, spills = 0, fallback_spills = 0, missing_matrix = 0, matrix_ok = 0, warned = 0;
};

void print_target(const TargetResult& r, bool show_options, bool show_logs) {
  const Target& t = *r.target;
  std::printf("\n== %s: %s  [%s %s]\n", t.name.c_str(), t.about.c_str(),
              t.compiler == "ocloc" ? "ocloc -device" : "clang-15 -mcpu=", t.device.c_str());
  const bool intel = t.compiler == "ocloc";
  if (intel)
    std::printf("%-22s %-14s %-22s %4s %4s %8s %8s %7s  %s\n", "program", "variant", "kernel", "simd", "grf", "scratch",
                "private", "slm", "used by");
  else
    std::printf("%-22s %-14s %-22s %5s %5s %5s %6s %8s %4s %7s  %s\n", "program", "variant", "kernel", "vgpr", "agpr",
                "sgpr", "spill", "scratch", "occ", "lds", "used by");
  std::map<std::string, int> per_file;
  for (const Program& p : r.programs) {
    const std::string id = p.file + "#" + std::to_string(++per_file[p.file]);
    const std::string variant = p.variant + (p.chosen ? "*" : "");
    std::string users = p.used_by.front();
    if (p.used_by.size() > 1) users += " (+" + std::to_string(p.used_by.size() - 1) + ")";
    if (!p.build.ok) {
      std::printf("%-22s %-14s BUILD FAILED  %s\n", id.c_str(), variant.c_str(), users.c_str());
    }
    for (const KernelFigures& k : p.build.kernels) {
      const char* flag = k.spills() ? "  SPILLS" : "";
      if (intel)
        std::printf("%-22s %-14s %-22s %4s %4s %8s %8s %7s  %s%s\n", id.c_str(), variant.c_str(), k.kernel.c_str(),
                    cell(k.simd).c_str(), cell(k.grf).c_str(), cell(k.scratch).c_str(), cell(k.private_bytes).c_str(),
                    cell(k.lds).c_str(), users.c_str(), flag);
      else
        std::printf("%-22s %-14s %-22s %5s %5s %5s %6s %8s %4s %7s  %s%s\n", id.c_str(), variant.c_str(),
                    k.kernel.c_str(), cell(k.vgpr).c_str(), cell(k.agpr).c_str(), cell(k.sgpr).c_str(),
                    (cell(k.vgpr_spill) + "/" + cell(k.sgpr_spill)).c_str(), cell(k.scratch).c_str(),
                    cell(k.occupancy).c_str(), cell(k.lds).c_str(), users.c_str(), flag);
    }
    const std::string mm = matrix_mnemonic(p.variant);
    if (!mm.empty() && p.build.ok)
      std::printf("    %s: %s\n", mm.c_str(),
                  p.build.matrix_lines.empty() ? "NOT FOUND in the disassembly"
                                               : (std::to_string(p.build.matrix_lines.size()) + " instructions, e.g. " +
                                                  p.build.matrix_lines.front()).c_str());
    for (const std::string& w : p.build.warnings) std::printf("    WARNING %s\n", w.c_str());
    if (show_options) std::printf("    options: %s\n", p.options.c_str());
    if (!p.build.ok && show_logs) std::printf("%s\n", p.build.log.c_str());
  }
  for (const std::string& s : r.refused) std::printf("REFUSED  %s\n", s.c_str());
  std::printf("summary %s: %zu programs, %d build errors, %d spills in chosen programs (%d in fallbacks), "
              "%d matrix variants with their instructions, %d without, %zu refused shapes, %d builds with warnings\n",
              t.name.c_str(), r.programs.size(), r.errors, r.spills, r.fallback_spills, r.matrix_ok, r.missing_matrix,
              r.refused.size(), r.warned);
}

nlohmann::json to_json(const TargetResult& r) {
  nlohmann::json j{{"target", r.target->name}, {"about", r.target->about}, {"errors", r.errors}, {"spills", r.spills},
                   {"fallback_spills", r.fallback_spills}, {"warned", r.warned}, {"refused", r.refused}};
  for (const Program& p : r.programs) {
    nlohmann::json pj{{"file", p.file}, {"variant", p.variant}, {"chosen", p.chosen}, {"options", p.options},
                      {"used_by", p.used_by}, {"ok", p.build.ok}, {"matrix_lines", p.build.matrix_lines.size()},
                      {"warnings", p.build.warnings}};
    for (const KernelFigures& k : p.build.kernels)
      pj["kernels"].push_back({{"kernel", k.kernel}, {"simd", k.simd}, {"grf", k.grf}, {"scratch", k.scratch},
                               {"private", k.private_bytes}, {"vgpr", k.vgpr}, {"agpr", k.agpr}, {"sgpr", k.sgpr},
                               {"vgpr_spill", k.vgpr_spill}, {"sgpr_spill", k.sgpr_spill},
                               {"occupancy", k.occupancy}, {"lds", k.lds}});
    if (!p.build.ok) pj["log"] = p.build.log;
    j["programs"].push_back(pj);
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"clattn-kernel-report: every program the ops would build on each GPU target, compiled offline "
               "(ocloc for Intel, clang-15 amdgcn for AMD) with the runtime's options"};
  std::vector<std::string> targets, ops_filter;
  bool check = false, list = false, show_options = false, show_logs = false, keep = false, check_args = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::string work_dir, json_file;
  std::vector<std::string> target_names;
  for (const Target& t : clattn::kreport::all_targets()) target_names.push_back(t.name);
  app.add_option("-t,--target", targets, "targets (default: all; --list-targets)")
      ->check(clattn::cli::one_of(target_names));
  app.add_option("--op", ops_filter, "only these ops (decode, extend, mla_decode, ...)");
  app.add_flag("--check", check, "exit 1 on a build error, a spill in a chosen program, a matrix variant without its "
                                 "instructions or a refused shape");
  app.add_flag("--list-targets", list, "list the targets and exit");
  app.add_flag("--options", show_options, "print each program's build options");
  app.add_flag("--logs", show_logs, "print the compiler output of failed builds");
  app.add_option("-j,--jobs", jobs, "compilers run at once")->check(CLI::Range(1, 256));
  app.add_option("--work-dir", work_dir, "where sources and binaries go (default: a temporary directory)");
  app.add_flag("--keep", keep, "keep the work directory");
  app.add_option("--json", json_file, "also write the figures as JSON");
  clattn::cli::add_check_args(app, &check_args);
  return clattn::cli::run("clattn-kernel-report", app, argc, argv, [&]() -> int {
    const auto& all = clattn::kreport::all_targets();
    if (list) {
      for (const Target& t : all) std::printf("%-8s %-7s %s\n", t.name.c_str(), t.compiler.c_str(), t.about.c_str());
      return 0;
    }
    std::vector<const Target*> chosen;
    for (const Target& t : all)
      if (targets.empty() || std::find(targets.begin(), targets.end(), t.name) != targets.end()) chosen.push_back(&t);
    // Tuned files are per real device: none applies to a made-up profile (no cache, no named file).
    setenv("CLATTN_CACHE_DIR", "off", 1);
    unsetenv("CLATTN_TUNED_FILE");
    if (!ops_filter.empty()) {  // the ops' names as the catalog of the chosen targets spells them
      std::vector<std::string> known;
      for (const Target* t : chosen)
        for (const clattn::ops::CatalogEntry& e : clattn::ops::catalog(t->ops))
          if (std::find(known.begin(), known.end(), e.op) == known.end()) known.push_back(e.op);
      for (const std::string& op : ops_filter)
        if (std::find(known.begin(), known.end(), op) == known.end())
          clattn::cli::bad_argument("--op", "unknown op '" + op + "' (one of " + clattn::cli::join(known) + ")");
    }
    if (check_args) return 0;
    std::vector<TargetResult> results;
    for (const Target* t : chosen) {
      const std::string miss = clattn::kreport::missing_tools(*t);
      if (!miss.empty()) {
        std::fprintf(stderr, "clattn-kernel-report: %s needs %s (scripts/install-deps.sh installs them)\n",
                     t->name.c_str(), miss.c_str());
        return 77;  // (ctest's SKIP_RETURN_CODE)
      }
    }

    bool own_dir = work_dir.empty();
    if (own_dir) {
      char tmpl[] = "/tmp/clattn-kreport-XXXXXX";
      if (!mkdtemp(tmpl)) {
        std::perror("clattn-kernel-report: mkdtemp");
        return clattn::cli::kFailed;
      }
      work_dir = tmpl;
    }
    fs::create_directories(work_dir);

    // The programs per target, then one work list over all targets.
    for (const Target* t : chosen) {
      TargetResult r;
      r.target = t;
      std::map<std::string, size_t> index;
      for (const clattn::ops::CatalogEntry& e : clattn::ops::catalog(t->ops)) {
        if (!ops_filter.empty() && std::find(ops_filter.begin(), ops_filter.end(), e.op) == ops_filter.end()) continue;
        const std::string label = e.op + " " + e.shape;
        if (!e.error.empty()) {
          r.refused.push_back(label + ": " + e.error);
          continue;
        }
        bool first = true;
        for (const clattn::ops::Variant& v : e.variants) {
          if (!v.why_not.empty()) continue;
          const std::string key = v.file + "\n" + v.options;
          auto it = index.find(key);
          if (it == index.end()) {
            it = index.emplace(key, r.programs.size()).first;
            r.programs.push_back(Program{v.file, v.options, v.name, {}, false, {}});
          }
          Program& p = r.programs[it->second];
          p.used_by.push_back(label);
          p.chosen = p.chosen || first;
          first = false;
        }
      }
      results.push_back(std::move(r));
    }
    // One target at a time (its table prints as soon as its builds are done), `jobs` builds at once.
    bool failed = false;
    nlohmann::json out = nlohmann::json::array();
    for (TargetResult& r : results) {
      std::fprintf(stderr, "clattn-kernel-report: %s: %zu builds, %u at once\n", r.target->name.c_str(),
                   r.programs.size(), jobs);
      std::mutex mu;
      size_t next = 0;
      auto worker = [&] {
        for (;;) {
          size_t w;
          {
            std::lock_guard<std::mutex> lock(mu);
            if (next == r.programs.size()) return;
            w = next++;
          }
          Program& p = r.programs[w];
          p.build = clattn::kreport::compile(*r.target, clattn::rt::kernel_source(p.file), p.options, work_dir);
        }
      };
      std::vector<std::thread> pool;
      for (unsigned i = 0; i < jobs; ++i) pool.emplace_back(worker);
      for (auto& th : pool) th.join();
      for (const Program& p : r.programs) {
        if (!p.build.ok) ++r.errors;
        if (!p.build.warnings.empty()) ++r.warned;
        for (const KernelFigures& k : p.build.kernels)
          if (k.spills()) ++(p.chosen ? r.spills : r.fallback_spills);
        if (*matrix_mnemonic(p.variant) && p.build.ok)
          ++(p.build.matrix_lines.empty() ? r.missing_matrix : r.matrix_ok);
      }
      print_target(r, show_options, show_logs);
      std::fflush(stdout);
      failed = failed || r.errors || r.spills || r.missing_matrix || r.warned || !r.refused.empty();
      out.push_back(to_json(r));
    }
    if (!json_file.empty()) std::ofstream(json_file) << out.dump(1) << "\n";
    if (own_dir && !keep) fs::remove_all(work_dir);
    else std::printf("\nwork directory: %s\n", work_dir.c_str());
    if (check) std::printf("\n%s\n", failed ? "kernel report: FAILED" : "kernel report: clean");
    return check && failed ? clattn::cli::kFailed : 0;
  });
}
