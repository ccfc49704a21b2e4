// clattn-bench mla: MLA paged decode (issue 6's cases): latent bf16, page 64, q/o bf16,
// B=64, S=4096 at H=16 and H=128 (tensor-parallel slices of DeepSeek's 128 heads), plus an
// fp8 latent row, an int8 latent row and a long single request (split-K). --quick: small
// shapes for PoCL.
//
// Bytes = the latent read once per request (S x 576 x dtype, + S x 8 for int8's f32 (ckv,
// kpe) scale pairs) + q + o; the % column divides
// that rate by the same-process stream-read limit (clattn::measure_limits, a streaming-read
// kernel over a large buffer). FLOPs = 2 x H x S x (576 + 512) per request (QK^T over 576
// dims, PV over 512), reported as TFLOP/s and, on the "ceilings" line under each row, as a
// percentage of the same-process FP32 FMA-loop peak and CLBlast SGEMM (bench/ceilings.hpp):
// without tensor cores both MLA shapes are compute-bound.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "bench/ceilings.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct MlaCase {
  int B, S, H;
  DType kv;
  int P = 64;
};

void run_case(Harness& h, const MlaCase& c, const std::map<std::string, int>& params, bool verbose_build) {
  Context& ctx = h.ctx();
  const int P = c.P, B = c.B, H = c.H;
  const int pages_per = (c.S + P - 1) / P;
  MlaCache cache;
  cache.num_pages = B * pages_per, cache.page_size = P, cache.dtype = c.kv;
  PagedCsr csr;
  csr.page_size = P;
  csr.kv_indptr = {0};
  for (int i = 0; i < B; ++i) {
    for (int p = 0; p < pages_per; ++p) csr.kv_indices.push_back(i * pages_per + p);
    csr.kv_indptr.push_back(int32_t(csr.kv_indices.size()));
    csr.kv_last_page_len.push_back(c.S - (pages_per - 1) * P);
  }
  const size_t es = dtype_size(c.kv), rows = size_t(B) * H;
  // Back-to-back samples rotate through copies of the latent cache (past the last-level cache).
  const size_t scale_bytes = size_t(cache.scale_required_bytes());  // int8: f32 (ckv, kpe) pairs
  const int copies =
      h.rotation_copies(double(cache.ckv_required_bytes() + cache.kpe_required_bytes()) + double(scale_bytes));
  std::vector<DeviceBuffer> ckvs, kpes, scs;
  for (int i = 0; i < copies; ++i) {
    ckvs.emplace_back(ctx, size_t(cache.ckv_required_bytes())), kpes.emplace_back(ctx, size_t(cache.kpe_required_bytes()));
    // Small finite values (bf16 0x2c2c ~ 2.4e-12, fp8 0x2c ~ 0.2, int8 44, f32 scales ~ 2.4e-12);
    // work does not depend on them.
    ckvs.back().fill_bytes(ctx, 0x2c), kpes.back().fill_bytes(ctx, 0x2c);
    if (scale_bytes) scs.emplace_back(ctx, scale_bytes), scs.back().fill_bytes(ctx, 0x2c);
  }
  DeviceBuffer qn(ctx, rows * 512 * 2), qp(ctx, rows * 64 * 2), o(ctx, rows * 512 * 2), lse(ctx, rows * 4);
  for (DeviceBuffer* b : {&qn, &qp}) b->fill_bytes(ctx, 0x2c);
  DeviceBuffer ids(ctx, csr.kv_indices.size() * 4);
  ids.write(ctx, csr.kv_indices.data(), csr.kv_indices.size() * 4);
  MlaOptions opt;
  opt.num_heads = H, opt.q_dtype = opt.o_dtype = DType::BF16, opt.sm_scale = 0.0721688f, opt.validate = false;
  opt.params = params;
  MlaPlan plan = mla_decode_plan(ctx, csr, cache, opt);
  DeviceBuffer ws(ctx, size_t(std::max<int64_t>(4, plan.workspace_bytes)));
  MlaBuffers mb;
  mb.q_nope = qn.get(), mb.q_pe = qp.get(), mb.page_ids = ids.get();
  mb.o = o.get(), mb.lse = lse.get(), mb.workspace = ws.get();
  int call = 0;
  const double ms = h.time_ms([&] {
    const size_t i = size_t(call++ % copies);
    mb.ckv = ckvs[i].get(), mb.kpe = kpes[i].get();
    if (scale_bytes) mb.scale_cache = scs[i].get();
    mla_run(ctx, plan, mb);
  });
  // The last command (the attention kernel, or the merge pass) within one call on an idle
  // device, both profiled in that call.
  const auto t = h.last_command([&](const Enqueue& e) { mla_run(ctx, plan, mb, e); });
  std::printf("#   last kernel (%s): %.1f us of a %.1f us call (one call on an idle device)\n",
              plan.num_merges ? "merge" : "attention", t.last_us, t.call_us);
  if (verbose_build)
    h.print_build_log(plan.variant == "nv_mma_sync" ? "mla_mma_nv.cl"
                      : plan.variant == "tiled"     ? "mla_tiled.cl"
                      : plan.variant == "cpu"       ? "mla_cpu.cl"
                                                    : "mla.cl",
                      plan.kernel_options);
  const double tokens = double(B) * c.S;
  const double bytes = tokens * (576 * es + (scale_bytes ? 8 : 0)) + double(rows) * (576 + 512) * 2;
  const double flops = 2.0 * H * tokens * (576 + 512);
  char shape[200];
  std::snprintf(shape, sizeof shape, "B=%d S=%d H=%d P=%d %s %s QB%d L%d x%d%s", B, c.S, H, P, dtype_name(c.kv),
                plan.variant.c_str(), plan.tile.qb, plan.tile.lanes, plan.num_work,
                plan.num_merges ? (" split" + std::to_string(plan.chunk_tokens)).c_str() : "");
  h.report("mla_decode", shape + param_suffix(params), ms, bytes, flops);
  report_ceilings(h, "mla_decode", shape + param_suffix(params), flops / (ms * 1e9));
}

}  // namespace

void register_mla(CLI::App& app, Harness& h) {
  auto* cmd = app.add_subcommand("mla", "MLA paged decode (latent GB/s and TFLOP/s vs same-process stream-read)");
  struct Opts {
    bool quick = false, verbose_build = false;
    int B = 0, S = 4096, H = 16, P = 64;
    std::string kv = "bf16", grid, variant;
    std::vector<std::string> params;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_flag("--quick", o->quick, "small shapes (PoCL / CI)");
  auto* one = cmd->add_option("-B", o->B, "one case: batch (with -S -H --page --kv)")->check(cli::at_least(1));
  cmd->add_option("-S", o->S, "one case: tokens per request")->check(cli::at_least(1))->needs(one);
  cmd->add_option("-H", o->H, "one case: query heads")->check(cli::at_least(1))->needs(one);
  cmd->add_option("--page", o->P, "one case: page size")->check(cli::at_least(1))->needs(one);
  cmd->add_option("--kv", o->kv, "one case: latent dtype")
      ->check(cli::one_of({"bf16", "f16", "e4m3", "fp8", "int8"}))
      ->needs(one);
  cmd->add_option("--param", o->params, "parameter override NAME=VALUE (repeatable)");
  cmd->add_option("--variant", o->variant,
                  "portable kernel: cpu | tiled | generic (CPU_KERNEL=1, or CPU_KERNEL=0 and TILED=1 / 0; tensor "
                  "cores win where on)")
      ->check(cli::one_of({"cpu", "tiled", "generic"}));
  cmd->add_flag("--verbose-build", o->verbose_build, "print the kernel's build log (NVIDIA: -cl-nv-verbose)");
  cmd->add_option("--grid", o->grid, "parameter grid 'A=1,2;B=3,4': every combination per case");
  cmd->callback([&h, o] {
    std::map<std::string, int> base = op_params(o->params, {"mla_decode"});
    const std::vector<std::map<std::string, int>> sets =
        o->grid.empty() ? std::vector<std::map<std::string, int>>{{}} : op_grid(o->grid, {"mla_decode"});
    if (check_args_only()) return;
    std::vector<MlaCase> cases;
    if (o->B > 0) {
      const DType kv = o->kv == "e4m3" || o->kv == "fp8" ? DType::FP8_E4M3
                       : o->kv == "f16"                   ? DType::F16
                       : o->kv == "int8"                  ? DType::I8
                                                          : DType::BF16;
      cases = {{o->B, o->S, o->H, kv, o->P}};
    } else if (o->quick) {
      cases = {{4, 1024, 16, DType::BF16}, {2, 512, 128, DType::BF16}, {4, 1024, 16, DType::FP8_E4M3},
               {4, 1024, 16, DType::I8}, {1, 4096, 16, DType::BF16}};
    } else {
      cases = {{64, 4096, 16, DType::BF16}, {64, 4096, 128, DType::BF16}, {64, 4096, 16, DType::FP8_E4M3},
               {64, 4096, 16, DType::I8}, {1, 32768, 16, DType::BF16}, {1, 32768, 128, DType::BF16}};
    }
    if (!o->variant.empty()) {
      base["CPU_KERNEL"] = o->variant == "cpu";
      if (o->variant != "cpu") base["TILED"] = o->variant == "tiled";
    }
    note_variant_mode(h);
    const Limits& L = h.get_limits();
    std::printf("# limit: stream-read %.0f GB/s (%s); bytes = latent once per request + q + o\n", L.stream_read_gbps,
                L.method.c_str());
    ceilings(h);
    for (const auto& c : cases)
      for (auto set : sets) {
        for (auto& kv : base) set.insert(kv);
        run_case(h, c, set, o->verbose_build);
      }
  });
}

}  // namespace clattn::bench
