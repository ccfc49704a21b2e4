// The FP32 FMA-loop peak (clattn::measure_fma_peak): cl_kernels/fma_peak.cl launched over
// every compute unit, its loop count calibrated so a launch runs about target_ms, the best of
// `samples` profiled launches.
#include <algorithm>
#include <cmath>

#include "clattn/diagnostics.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/timer.hpp"

namespace clattn {

namespace {

// Defaults per device class. GPUs: float4 chains (4 independent FMAs per instruction slot on
// scalar-FP32 machines, one vector FMA where the lanes are vectors), 8 chains of 8 steps, 256
// work-items per group and 8 groups per compute unit to hide the FMA latency. CPUs: float16
// chains (PoCL does not widen this loop across work-items: on the 2-core AVX-512 CI host
// float16 x 8 chains reach 250 GFLOP/s, scalar chains 16), 64 work-items, 4 groups per core.
FmaPeakOptions with_defaults(FmaPeakOptions o, const DeviceProfile& p) {
  const bool cpu = p.is_cpu;
  if (!o.vec) o.vec = cpu ? 16 : 4;
  if (!o.chains) o.chains = 8;
  if (!o.unroll) o.unroll = 8;
  if (!o.wg) o.wg = cpu ? 64 : 256;
  if (!o.groups_per_cu) o.groups_per_cu = cpu ? 4 : 8;
  return o;
}

void check(const FmaPeakOptions& o) {
  auto bad = [](const std::string& what) { rt::invalid("measure_fma_peak: " + what); };
  if (o.vec != 1 && o.vec != 2 && o.vec != 4 && o.vec != 8 && o.vec != 16)
    bad("vec = " + std::to_string(o.vec) + ", must be 1, 2, 4, 8 or 16");
  if (o.chains < 1 || o.chains > 64) bad("chains = " + std::to_string(o.chains) + ", must be 1..64");
  if (o.unroll < 1 || o.unroll > 64) bad("unroll = " + std::to_string(o.unroll) + ", must be 1..64");
  if (o.wg < 1) bad("wg = " + std::to_string(o.wg) + ", must be >= 1");
  if (o.groups_per_cu < 1) bad("groups_per_cu = " + std::to_string(o.groups_per_cu) + ", must be >= 1");
  if (!(o.target_ms > 0) || !std::isfinite(o.target_ms)) bad("target_ms must be > 0");
  if (o.samples < 1) bad("samples = " + std::to_string(o.samples) + ", must be >= 1");
}

}  // namespace

ComputeCeiling measure_fma_peak(const Context& ctx, const FmaPeakOptions& options) {
  auto& c = rt::impl(ctx);
  if (!c.profiling) throw Error(Status::Unsupported, "measure_fma_peak needs a queue with CL_QUEUE_PROFILING_ENABLE");
  const FmaPeakOptions o = with_defaults(options, c.profile);
  check(o);
  auto prog = c.programs.get("fma_peak.cl", rt::make_options({{"VEC", std::to_string(o.vec)},
                                                               {"CHAINS", std::to_string(o.chains)},
                                                               {"UNROLL", std::to_string(o.unroll)}}));
  auto& k = prog->kernel("fma_peak");
  size_t wg = std::min({size_t(o.wg), c.profile.max_work_group_size ? c.profile.max_work_group_size : size_t(o.wg),
                        k.max_work_group_size(c.device)});
  const size_t groups = size_t(std::max(1u, c.profile.compute_units)) * size_t(o.groups_per_cu);
  const size_t gws = groups * wg;
  DeviceBuffer out(ctx, gws * sizeof(float));
  const cl_mem om = out.get();
  const float m = 0.999f, a = 1e-3f;  // x -> 0.999 x + 0.001 stays near 1
  const double flops_per_iter = 2.0 * o.vec * o.chains * o.unroll * double(gws);

  auto launch_ms = [&](cl_int iters) {
    cl_event ev = nullptr;
    k.launch(c.queue, 1, &gws, &wg, 0, nullptr, &ev, om, m, a, iters);
    const double ms = rt::event_ms(ev);
    clReleaseEvent(ev);
    return ms;
  };
  // Calibration: grow the loop count until a launch takes at least half the target.
  double iters = 16, ms = launch_ms(cl_int(iters));
  while (ms < 0.5 * o.target_ms && iters < double(1 << 24)) {
    iters = std::min(double(1 << 24), iters * std::clamp(o.target_ms / std::max(ms, 1e-3), 2.0, 64.0));
    ms = launch_ms(cl_int(iters));
  }
  ComputeCeiling r;
  for (int s = 0; s < o.samples; ++s)
    r.tflops = std::max(r.tflops, flops_per_iter * iters / (launch_ms(cl_int(iters)) * 1e9));
  r.available = true;
  r.method = "best of " + std::to_string(o.samples) + ": fma_peak.cl, " + std::to_string(groups) + " x " +
             std::to_string(wg) + " work-items, each " + std::to_string(o.chains) + " chains of " +
             (o.vec == 1 ? std::string("float") : "float" + std::to_string(o.vec)) + " x " +
             std::to_string(long(iters) * o.unroll) + " fma, OpenCL profiling events";
  return r;
}

}  // namespace clattn
