// Same-process compute ceilings for clattn-bench (ceilings.hpp).
#include "bench/ceilings.hpp"

#include <cstdio>
#include <fstream>

namespace clattn::bench {

int& sgemm_size() {
  static int n = 0;
  return n;
}

const Ceilings& ceilings(Harness& h) {
  static Ceilings c;
  static bool measured = false;
  if (!measured) {
    Context& ctx = h.ctx();
    c.sgemm_n = sgemm_size() > 0 ? sgemm_size() : ctx.profile().is_cpu ? 1024 : 4096;
    c.fma = measure_fma_peak(ctx);
    std::printf("# limit: FP32 FMA peak %.3g TFLOP/s (%s)\n", c.fma.tflops, c.fma.method.c_str());
    c.sgemm = measure_sgemm(ctx, c.sgemm_n);
    if (c.sgemm.available)
      std::printf("# limit: CLBlast SGEMM %.3g TFLOP/s (%s)\n", c.sgemm.tflops, c.sgemm.method.c_str());
    else
      std::printf("# limit: CLBlast SGEMM not measured: %s\n", c.sgemm.method.c_str());
    std::fflush(stdout);
    measured = true;
  }
  return c;
}

void report_ceilings(Harness& h, const std::string& op, const std::string& shape, double tflops) {
  const Ceilings& c = ceilings(h);
  const double pct_fma = c.fma.tflops > 0 ? 100.0 * tflops / c.fma.tflops : 0.0;
  const double pct_sgemm = c.sgemm.available && c.sgemm.tflops > 0 ? 100.0 * tflops / c.sgemm.tflops : 0.0;
  char sgemm[96] = "CLBlast SGEMM not measured";
  if (c.sgemm.available)
    std::snprintf(sgemm, sizeof sgemm, "%.1f%% of CLBlast SGEMM %.3g TFLOP/s", pct_sgemm, c.sgemm.tflops);
  std::printf("%-10s ceilings %.3g TFLOP/s: %.1f%% of FP32 FMA peak %.3g TFLOP/s, %s\n", "", tflops, pct_fma,
              c.fma.tflops, sgemm);
  std::fflush(stdout);
  if (!h.json_out.empty()) {
    std::ofstream out(h.json_out, std::ios::app);
    out << "{\"op\":\"" << op << "\",\"shape\":\"" << shape << "\",\"kind\":\"ceilings\",\"tflops\":" << tflops
        << ",\"fma_peak_tflops\":" << c.fma.tflops << ",\"pct_of_fma_peak\":" << pct_fma
        << ",\"sgemm_tflops\":" << (c.sgemm.available ? c.sgemm.tflops : 0.0) << ",\"sgemm_n\":" << c.sgemm_n
        << ",\"pct_of_sgemm\":" << pct_sgemm << ",\"device\":\"" << h.ctx().profile().device_name << "\"}\n";
  }
}

}  // namespace clattn::bench
