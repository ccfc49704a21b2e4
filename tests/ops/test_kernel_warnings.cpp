// Every program the ops would build on this device (ops::catalog over its representative
// shapes, chosen kernels and fallbacks) compiles through this device's own compiler without a
// warning: each is built from source with the runtime's exact options plus -Werror (an
// OpenCL build option every compiler takes), and its build log is checked for "warning:".
// On PoCL in CI; on NVIDIA through the GPU machine's ctest; ocloc and clang amdgcn in the
// offline gate (clattn-kernel-report --check).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <clattn/clattn.hpp>

#include "backends/dispatch/catalog.hpp"
#include "backends/ops/op_util.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/program_cache.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

TEST(KernelWarnings, EveryCatalogProgramBuildsWithoutWarnings) {
  auto& c = rt::impl(ctx());
  ops::CatalogTarget t;
  t.profile = c.profile;
  t.preferred_float_width = ops::preferred_float_width(c);
  t.fp32_denorms = ops::fp32_denorms(c);

  std::map<std::string, std::pair<std::string, std::string>> programs;  // by file + options
  for (const ops::CatalogEntry& e : ops::catalog(t))
    for (const ops::Variant& v : e.variants)
      if (v.why_not.empty()) programs.emplace(v.file + " [" + v.options + "]", std::make_pair(v.file, v.options));
  ASSERT_FALSE(programs.empty());

  std::vector<std::pair<std::string, std::string>> work;
  for (auto& [id, p] : programs) work.push_back(p);
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < work.size();) {
      const auto& [file, options] = work[i];
      const std::string source = rt::kernel_source(file);
      const std::string opts = options + " -Werror";
      const char* src = source.c_str();
      const size_t len = source.size();
      cl_int err = CL_SUCCESS;
      cl_program p = clCreateProgramWithSource(c.ctx, 1, &src, &len, &err);
      if (err != CL_SUCCESS) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(file + ": clCreateProgramWithSource " + std::to_string(err));
        continue;
      }
      err = clBuildProgram(p, 1, &c.device, opts.c_str(), nullptr, nullptr);
      const std::string log = rt::build_log(p, c.device);
      clReleaseProgram(p);
      if (err != CL_SUCCESS || log.find("warning:") != std::string::npos) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(file + " [" + opts + "]: " + (err != CL_SUCCESS ? "build failed" : "warnings") + "\n" + log);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < 2; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  std::printf("%zu programs built with -Werror on %s\n", work.size(), c.profile.device_name.c_str());
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace clattn
