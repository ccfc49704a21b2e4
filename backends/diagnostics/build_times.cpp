// Cold vs warm program build time, for clattn-probe --bench.
#include <chrono>
#include <cstdio>
#include <random>

#include "clattn/diagnostics.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/kernel_sources.hpp"

namespace clattn {

BuildTimes measure_build_times(const Context& ctx, const std::string& file) {
  auto& c = rt::impl(ctx);
  // A fresh define makes a key nobody has built: a true cold build that is then stored.
  std::random_device rd;
  std::string opts = rt::make_options({{"CLATTN_BUILD_NONCE", std::to_string(rd())}});
  BuildTimes t;
  t.file = file;
  using clk = std::chrono::steady_clock;
  {
    rt::ProgramCache cold(c.ctx, c.device);
    cold.set_profile(c.profile);
    auto t0 = clk::now();
    cold.get(file, opts);
    t.cold_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  }
  rt::ProgramCache warm(c.ctx, c.device);
  warm.set_profile(c.profile);
  auto t0 = clk::now();
  warm.get(file, opts);
  t.warm_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  t.warm_was_disk_hit = warm.stats().disk_hits == 1;
  std::remove(warm.disk().path_for(warm.key(rt::kernel_source(file), opts)).c_str());  // don't litter the cache
  return t;
}

}  // namespace clattn
