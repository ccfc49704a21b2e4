// clattn-bench extend: paged extend / prefill throughput in TFLOP/s (issue 5's cases):
// fp16, H=32 (MHA), D=128, causal, page size 16 (NHD): one sequence of 4096, one of 16384,
// and a batch of 8 x 2048 with 50% cached prefix. --quick: small shapes for PoCL.
// Pages are numbered in order (one run of consecutive ids per request), as an allocator hands
// them to a fresh cache; --scatter-pages shuffles each request's page ids (a fragmented cache).
//
// FLOPs = 4 * D * H * (visible (query, key) pairs); with the causal mask a request of qo
// rows over kv keys has qo*kv - qo*(qo-1)/2 pairs, so a plain causal prefill counts about
// half of the dense work (the usual FlashAttention convention).
//
// Limits (same process):
// - generic kernel: the FP32 peak, compute units x FP32 lanes per unit x 2 (FMA) x
//   CL_DEVICE_MAX_CLOCK_FREQUENCY; lanes per unit by vendor/architecture (printed).
// - every row: the measured FP32 FMA-loop peak and CLBlast SGEMM (bench/ceilings.hpp), on the
//   "ceilings" line under it.
// - nv_mma_sync: a measured mma.sync peak: a loop of mma.sync.m16n8k16 f16 -> f32 over
//   independent accumulators on every SM (../shared/device/examples/ptxmma.cpp idea).
// - nv_wgmma: the same mma.sync figure, labelled as such (warpgroup MMA issues faster; its
//   own peak is not measured here). torch's SDPA in the same job is its peer
//   (bench/h100/torch_sdpa.py, run by bench/h100/h100-pass.sh).
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "bench/ceilings.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct ExtCase {
  int B, qo, kv, H, D;
};

double visible_pairs(const ExtCase& c) {
  return double(c.B) * (double(c.qo) * c.kv - double(c.qo) * (c.qo - 1) / 2.0);
}

// FP32 peak from the profile and the device clock; `desc` says how it was derived.
double fp32_peak_tflops(const Context& ctx, std::string* desc) {
  const DeviceProfile& p = ctx.profile();
  cl_uint mhz = 0;
  clGetDeviceInfo(ctx.cl_device(), CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof mhz, &mhz, nullptr);
  int lanes = 64;
  std::string why = "64 lanes/CU default";
  if (p.vendor == "nvidia") {
    const int cc = p.nv_compute_capability;
    lanes = (cc >= 86 || cc == 0) ? 128 : 64;  // GA10x/Ada/Hopper: 128 FP32 lanes per SM; GV100/GA100: 64
    why = std::to_string(lanes) + " FP32 lanes/SM (CUDA programming guide, arithmetic throughput, cc " +
          std::to_string(cc) + ")";
  } else if (p.vendor == "amd") {
    lanes = 64, why = "64 FP32 lanes/CU (4 x SIMD16; dual-issue/packed FP32 not counted)";
  } else if (p.vendor == "intel") {
    lanes = 8, why = "8 FP32 lanes/EU";
  } else if (p.is_cpu) {
    lanes = 16, why = "16 FP32 lanes/core (one AVX-512 FMA pipe; approximate)";
  }
  const double peak = double(p.compute_units) * lanes * 2.0 * double(mhz) * 1e6 / 1e12;
  *desc = "FP32 peak " + std::to_string(p.compute_units) + " CU x " + why + " x 2 x " + std::to_string(mhz) + " MHz";
  return peak;
}

const char* kMmaSrc = R"CL(
__kernel void mma_peak(__global float* out, int iters) {
  uint a = 0x3C003C00u, b = 0x3C003C00u;
  float d[4][4];
  for (int j = 0; j < 4; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
          : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
          : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b), "r"(b));
  }
  float s = 0.f;
  for (int j = 0; j < 4; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  out[get_global_id(0)] = s;
}
)CL";

// Measured mma.sync f16 peak (TFLOP/s) on NVIDIA, 0 when it cannot run.
double mma_peak_tflops(Harness& h, bool quick) {
  Context& ctx = h.ctx();
  if (!ctx.profile().nv_inline_ptx) return 0.0;
  cl_int err = CL_SUCCESS;
  cl_device_id dev = ctx.cl_device();
  cl_program pr = clCreateProgramWithSource(ctx.cl_ctx(), 1, &kMmaSrc, nullptr, &err);
  if (err != CL_SUCCESS) return 0.0;
  if (clBuildProgram(pr, 1, &dev, "", nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(pr);
    return 0.0;
  }
  cl_kernel k = clCreateKernel(pr, "mma_peak", &err);
  const size_t lws = 128, gws = size_t(ctx.profile().compute_units) * 16 * lws;
  DeviceBuffer out(ctx, gws * 4);
  cl_mem om = out.get();
  const int iters = quick ? 1000 : 10000;
  clSetKernelArg(k, 0, sizeof om, &om);
  clSetKernelArg(k, 1, sizeof iters, &iters);
  double ms = h.time_ms([&] { clEnqueueNDRangeKernel(ctx.cl_queue(), k, 1, nullptr, &gws, &lws, 0, nullptr, nullptr); });
  clReleaseKernel(k);
  clReleaseProgram(pr);
  const double flops = 2.0 * 16 * 8 * 16 * 4 * double(gws / 32) * iters;
  return flops / (ms * 1e9);
}

void run_case(Harness& h, const ExtCase& c, const std::string& variant, const std::map<std::string, int>& params,
              bool verbose_build, bool scatter, double peak, const std::string& peak_desc) {
  Context& ctx = h.ctx();
  const int P = 16, B = c.B, H = c.H, D = c.D;
  const int pages_per = (c.kv + P - 1) / P;
  PagedKV cache;
  cache.num_pages = B * pages_per, cache.page_size = P, cache.num_kv_heads = H, cache.head_dim = D;
  cache.dtype = DType::F16;
  PagedCsr csr;
  csr.page_size = P;
  csr.kv_indptr = {0};
  csr.qo_indptr = {0};
  for (int i = 0; i < B; ++i) {
    for (int p = 0; p < pages_per; ++p) csr.kv_indices.push_back(i * pages_per + p);
    if (scatter) std::shuffle(csr.kv_indices.end() - pages_per, csr.kv_indices.end(), std::mt19937(1234u + i));
    csr.kv_indptr.push_back(int32_t(csr.kv_indices.size()));
    csr.kv_last_page_len.push_back(c.kv - (pages_per - 1) * P);
    csr.qo_indptr.push_back(csr.qo_indptr.back() + c.qo);
  }
  const size_t T = size_t(B) * c.qo;
  DeviceBuffer q(ctx, T * H * D * 2), o(ctx, T * H * D * 2), lse(ctx, T * H * 4);
  DeviceBuffer kc(ctx, size_t(cache.required_bytes())), vc(ctx, size_t(cache.required_bytes()));
  // Small finite halves (0x2c2c ~ 0.065); the kernel's work does not depend on values.
  for (DeviceBuffer* b : {&q, &kc, &vc}) b->fill_bytes(ctx, 0x2c);
  DeviceBuffer ids(ctx, csr.kv_indices.size() * 4);
  ids.write(ctx, csr.kv_indices.data(), csr.kv_indices.size() * 4);
  ExtendOptions opt;
  opt.num_qo_heads = H;
  opt.q_dtype = opt.o_dtype = DType::F16;
  opt.causal = true;
  opt.validate = false;
  opt.variant = variant;
  opt.params = params;
  ExtendPlan plan = extend_plan(ctx, csr, cache, opt);
  DeviceBuffer ws(ctx, size_t(std::max<int64_t>(16, plan.workspace_bytes)));
  ExtendBuffers eb;
  eb.q = q.get(), eb.k = kc.get(), eb.v = vc.get(), eb.page_ids = ids.get(), eb.o = o.get(), eb.lse = lse.get();
  eb.workspace = ws.get();
  if (verbose_build)
    h.print_build_log(plan.variant == "nv_wgmma"      ? "extend_wgmma_nv.cl"
                      : plan.variant == "nv_mma_sync" ? "extend_mma_nv.cl"
                      : plan.variant == "cpu"         ? "extend_cpu.cl"
                                                      : "extend.cl",
                      plan.kernel_options);
  double ms = h.time_ms([&] { extend_run(ctx, plan, eb); });
  const double flops = 4.0 * D * H * visible_pairs(c);
  char shape[160];
  const std::string ps = param_suffix(params);
  std::snprintf(shape, sizeof shape, "%dx(q%d,kv%d) H=%d D=%d f16 causal%s %s%s", B, c.qo, c.kv, H, D,
                scatter ? " scattered-pages" : "", plan.variant.c_str(), ps.c_str());
  h.report_compute("extend", shape, ms, flops, peak, peak_desc);
  report_ceilings(h, "extend", shape, flops / (ms * 1e9));
}

}  // namespace

void register_extend(CLI::App& app, Harness& h) {
  auto* cmd = app.add_subcommand("extend", "paged extend / prefill attention (TFLOP/s vs FP32 / mma.sync peak)");
  static bool quick = false;
  static std::string only;
  static std::vector<std::string> param_args;
  static bool verbose_build = false, scatter = false;
  cmd->add_flag("--scatter-pages", scatter, "shuffle each request's page ids (a fragmented cache)");
  cmd->add_flag("--verbose-build", verbose_build, "print the kernel's build log (NVIDIA: -cl-nv-verbose)");
  cmd->add_flag("--quick", quick, "small shapes (PoCL / CI)");
  cmd->add_option("--param", param_args, "parameter override NAME=VALUE (repeatable)");
  cmd->add_option("--variant", only, "only this variant")
      ->check(cli::one_of({"generic", "cpu", "nv_mma_sync", "nv_wgmma"}));
  static int one_b = 0, one_qo = 0, one_kv = 0, one_h = 32;
  auto* one =
      cmd->add_option("-B", one_b, "one case: batch (with --qo --kv -H; head dim 128)")->check(cli::at_least(1));
  auto* qo = cmd->add_option("--qo", one_qo, "one case: query tokens per request")->check(cli::at_least(1))->needs(one);
  one->needs(qo);
  cmd->add_option("--kv", one_kv, "one case: KV tokens per request (>= --qo; the rest is cached prefix)")
      ->check(cli::at_least(1))
      ->needs(one);
  cmd->add_option("-H", one_h, "one case: heads (query = KV heads)")->check(cli::at_least(1))->needs(one);
  cmd->callback([&h] {
    if (one_kv > 0 && one_kv < one_qo)
      cli::bad_argument("--kv", std::to_string(one_kv) + " is below --qo " + std::to_string(one_qo) +
                                    " (a request's KV holds its query tokens)");
    const std::map<std::string, int> params = op_params(param_args, {"extend"});
    if (check_args_only()) return;
    std::vector<ExtCase> cases;
    if (one_b > 0)
      cases = {{one_b, one_qo, std::max(one_kv, one_qo), one_h, 128}};
    else if (quick)
      cases = {{1, 256, 256, 4, 128}, {2, 128, 256, 4, 128}};
    else
      cases = {{1, 4096, 4096, 32, 128}, {1, 16384, 16384, 32, 128}, {8, 1024, 2048, 32, 128}};
    Context& ctx = h.ctx();
    note_variant_mode(h);
    std::string fp32_desc;
    const double fp32 = fp32_peak_tflops(ctx, &fp32_desc);
    std::vector<std::string> variants;
    const std::vector<VariantInfo> vs = clattn::variants(ctx.profile());
    for (const char* tc : {"nv_wgmma", "nv_mma_sync"})
      for (auto& v : vs)
        if ((only.empty() || only == tc) && v.name == tc) {
          if (v.available) variants.push_back(tc);
          else if (only == tc) std::printf("# variant %s not run: %s\n", tc, v.reason.c_str());
        }
    // The CPU kernel on CPU devices (or when asked for), before the portable one.
    if ((only.empty() && ctx.profile().is_cpu) || only == "cpu") variants.push_back("cpu");
    if (only.empty() || only == "generic") variants.push_back("generic");
    double mma = 0.0;
    std::string mma_desc;
    if (!variants.empty() && variants[0] != "generic" && variants[0] != "cpu") {
      mma = mma_peak_tflops(h, quick);
      mma_desc = "mma.sync m16n8k16 f16->f32 loop, measured in this process";
      std::printf("# limit: %.1f TFLOP/s %s\n", mma, mma_desc.c_str());
    }
    std::printf("# limit: %.1f TFLOP/s %s\n", fp32, fp32_desc.c_str());
    ceilings(h);
    for (auto& v : variants)
      for (auto& c : cases) {
        if (v == "generic" && !quick && c.qo * c.B > 8192 && ctx.profile().is_cpu) continue;
        const bool f32_math = v == "generic" || v == "cpu";
        run_case(h, c, v, params, verbose_build, scatter, f32_math ? fp32 : mma,
                 f32_math ? "FP32 peak" : v == "nv_wgmma" ? "mma.sync peak; wgmma's is higher" : "mma.sync peak");
      }
  });
}

}  // namespace clattn::bench
