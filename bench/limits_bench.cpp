// clattn-bench limits: the streaming-read and copy limits (clattn::measure_limits) over a
// range of buffer sizes, so an op's rate on a small working set can be put next to the
// rate a plain read of that many bytes reaches (a launch's ramp and tail weigh more there);
// then the compute ceilings (FP32 FMA-loop peak, CLBlast SGEMM: bench/ceilings.hpp) and the
// driver's launch floor (bench/launch_floor.hpp).
#include <cstdio>

#include "bench/bench.hpp"
#include "bench/ceilings.hpp"
#include "bench/launch_floor.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {

void register_limits(CLI::App& app, Harness& h) {
  auto* cmd = app.add_subcommand("limits",
                                 "stream-read and copy GB/s by buffer size (16 MiB .. 1 GiB), FP32 FMA peak, CLBlast SGEMM, launch floor");
  static std::vector<int> mib = {16, 32, 64, 128, 256, 512, 1024};
  static bool quick = false;
  auto* sizes = cmd->add_option("--mib", mib, "buffer sizes in MiB")->check(cli::at_least(1));
  cmd->add_flag("--quick", quick, "16 and 64 MiB only (PoCL / CI)");
  cmd->callback([&h, sizes] {
    if (check_args_only()) return;
    if (quick && sizes->count() == 0) mib = {16, 64};
    Context& ctx = h.ctx();
    for (int m : mib) {
      const Limits L = measure_limits(ctx, size_t(m) << 20);
      std::printf("limits     %5d MiB  stream-read %8.1f GB/s  copy %8.1f GB/s  (%.1f us per read)\n", m,
                  L.stream_read_gbps, L.copy_gbps, double(L.bytes) / (L.stream_read_gbps * 1e3));
    }
    const Ceilings& c = ceilings(h);
    std::printf("limits     FP32 FMA peak %8.3g TFLOP/s\n", c.fma.tflops);
    if (c.sgemm.available)
      std::printf("limits     CLBlast SGEMM %dx%dx%d %8.3g TFLOP/s\n", c.sgemm_n, c.sgemm_n, c.sgemm_n, c.sgemm.tflops);
    else
      std::printf("limits     CLBlast SGEMM not measured: %s\n", c.sgemm.method.c_str());
    print_launch_floor(ctx);
  });
}

}  // namespace clattn::bench
