// clattn-bench linear: GDN / simple-GLA decode (state-bandwidth bound: % of streaming
// read) and chunked prefill (TFLOP/s). Default sweep = issue 7's cases; --quick is a
// small sweep for PoCL.
//
// Bytes: decode = state read + write (each once per token) + q, k, v, o (+ g, beta);
// prefill = q, k, v, o, g, beta + state read + write once per request.
// Limits: every row prints % of the streaming read; prefill rows add a "ceilings" line, the
// same-process FP32 FMA-loop peak and CLBlast SGEMM (bench/ceilings.hpp), as extend does.
// -B/-L/-H/--dk/--dv give one shape (L 0 = decode), --param NAME=V overrides parameters
// (LinearConfig::params: e.g. CPU_KERNEL=0 for the portable kernels on a CPU device).
// FLOPs (prefill), per token and v-head, of the chunked form with chunk C (C = 64, FLA's
// default, whatever the database picked): state products K S0, Q S0, K^T D = 3 x 2 Dk Dv;
// intra-chunk Q K^T and (GDN) K K^T, C/2 x 2 Dk each on average; the P D product and
// (GDN) the triangular solve, C/2 x 2 Dv each. Redundant recomputation across Dv slices
// is not counted (it is overhead, not work).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backends/dispatch/variant.hpp"
#include "bench/bench.hpp"
#include "bench/ceilings.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct LinCase {
  bool gdn;
  bool decode;
  int B, L, H, Dk, Dv;
};

// The variant one call of `op` ran: the linear ops keep no plan, and each call chooses its
// kernel through ops::select_and_build, which records it.
template <class F>
std::string variant_ran(Context& ctx, const std::string& op, F&& call) {
  call();
  ctx.finish();
  const auto recs = ops::recent_builds();
  return !recs.empty() && recs.back().op == op ? recs.back().variant : "generic";
}

void run_case(Harness& h, const LinCase& c, DType io, const std::map<std::string, int>& params) {
  Context& ctx = h.ctx();
  const int T = c.decode ? c.B : c.B * c.L;
  const size_t es = dtype_size(io);
  LinearConfig cfg;
  cfg.num_qk_heads = c.H;
  cfg.num_v_heads = c.H;
  cfg.head_dim_k = c.Dk;
  cfg.head_dim_v = c.Dv;
  cfg.dtype = io;
  cfg.l2norm_qk = c.gdn;
  cfg.beta_is_logits = false;
  cfg.params = params;
  const size_t nqk = size_t(T) * c.H * c.Dk, nv = size_t(T) * c.H * c.Dv, ng = size_t(T) * c.H;
  const size_t slot = size_t(c.H) * c.Dk * c.Dv;
  DeviceBuffer q(ctx, nqk * es), k(ctx, nqk * es), v(ctx, nv * es), o(ctx, nv * es);
  DeviceBuffer g(ctx, ng * 4), beta(ctx, ng * 4), state(ctx, size_t(c.B) * slot * 4);
  // Small finite values: 0x3c bytes are 0.0116 in bf16/f16-ish and ~0.0115 in f32 words.
  for (DeviceBuffer* b : {&q, &k, &v, &state}) b->fill_bytes(ctx, 0x3c);
  std::vector<float> gv(ng, -0.05f), bv(ng, 0.5f);
  g.write(ctx, gv.data(), ng * 4);
  beta.write(ctx, bv.data(), ng * 4);
  std::vector<int32_t> idx(size_t(c.B)), cu(size_t(c.B) + 1);
  for (int i = 0; i < c.B; ++i) idx[size_t(i)] = i;
  for (int i = 0; i <= c.B; ++i) cu[size_t(i)] = i * (c.decode ? 1 : c.L);
  DeviceBuffer idx_d(ctx, idx.size() * 4), cu_d(ctx, cu.size() * 4);
  idx_d.write(ctx, idx.data(), idx.size() * 4);
  cu_d.write(ctx, cu.data(), cu.size() * 4);
  LinearTensors t{q.get(), k.get(), v.get(), g.get(), beta.get(), o.get()};
  LinearStatePool pool{state.get(), c.B, DType::F32};
  LinearBatch b;
  b.batch_size = c.B;
  b.state_indices = idx.data();
  b.state_indices_dev = idx_d.get();
  b.cu_seqlens = cu.data();
  b.cu_seqlens_dev = cu_d.get();
  b.num_tokens = T;
  auto fn = c.decode ? (c.gdn ? gdn_decode : gla_decode) : (c.gdn ? gdn_prefill : gla_prefill);
  double ms = h.time_ms([&] { fn(ctx, cfg, t, pool, b, nullptr); });
  double bytes = double(2 * nqk + 2 * nv) * es + double(ng) * (c.gdn ? 8 : 4) + 2.0 * c.B * slot * 4;
  const double C = 64;
  double per_tok = 3 * 2.0 * c.Dk * c.Dv + (c.gdn ? 2 : 1) * C * c.Dk + (c.gdn ? 2 : 1) * C * c.Dv;
  double flops = c.decode ? double(T) * c.H * (c.gdn ? 6.0 : 4.0) * c.Dk * c.Dv : double(T) * c.H * per_tok;
  char shape[160];
  if (c.decode)
    std::snprintf(shape, sizeof shape, "B=%d H=%d Dk=%d Dv=%d %s/f32state", c.B, c.H, c.Dk, c.Dv, dtype_name(io));
  else
    std::snprintf(shape, sizeof shape, "B=%dx%d H=%d Dk=%d Dv=%d %s/f32state", c.B, c.L, c.H, c.Dk, c.Dv,
                  dtype_name(io));
  std::string op = std::string(c.gdn ? "gdn" : "gla") + (c.decode ? "_decode" : "_prefill");
  const std::string row = std::string(shape) + " " +
                          variant_ran(ctx, op, [&] { fn(ctx, cfg, t, pool, b, nullptr); }) + param_suffix(params);
  h.report(op, row, ms, bytes, flops);
  std::printf("%-10s   %.3g tokens/s\n", "", double(T) / (ms * 1e-3));
  if (!c.decode) report_ceilings(h, op, row, flops / (ms * 1e9));
}

}  // namespace

void register_linear(CLI::App& app, Harness& h) {
  auto* sub = app.add_subcommand("linear", "Gated DeltaNet / simple GLA decode and chunked prefill with a state pool");
  static bool quick = false;
  static std::string dtype = "bf16";
  static std::string only;
  sub->add_flag("--quick", quick, "small shapes (PoCL / CI)");
  sub->add_option("--dtype", dtype, "q/k/v/o dtype")->check(cli::one_of({"f32", "f16", "bf16"}));
  sub->add_option("--only", only, "run only the decode or only the prefill cases")
      ->check(cli::one_of({"decode", "prefill"}));
  static std::vector<std::string> param_args;
  sub->add_option("--param", param_args, "parameter override NAME=VALUE (repeatable)");
  static int one_b = 0, one_l = 0, one_h = 16, one_dk = 128, one_dv = 128;
  auto* one =
      sub->add_option("-B", one_b, "one shape: batch (with -L -H --dk --dv; GDN and GLA)")->check(cli::at_least(1));
  sub->add_option("-L", one_l, "one shape: tokens per request (0 = decode)")->check(cli::at_least(0))->needs(one);
  sub->add_option("-H", one_h, "one shape: heads (q/k = v heads)")->check(cli::at_least(1))->needs(one);
  sub->add_option("--dk", one_dk, "one shape: key head dim")->check(cli::at_least(1))->needs(one);
  sub->add_option("--dv", one_dv, "one shape: value head dim")->check(cli::at_least(1))->needs(one);
  sub->callback([&h] {
    DType io = dtype == "f32" ? DType::F32 : dtype == "f16" ? DType::F16 : DType::BF16;
    // LinearConfig::params routes PF_* names to the prefill kernel, the rest to decode.
    const std::map<std::string, int> params = op_params(param_args, {"linear_decode", "linear_prefill"});
    if (check_args_only()) return;
    std::vector<LinCase> cases;
    for (bool gdn : {true, false}) {
      if (one_b > 0) {
        cases.push_back({gdn, one_l == 0, one_b, std::max(1, one_l), one_h, one_dk, one_dv});
      } else if (quick) {
        cases.push_back({gdn, true, 8, 1, 4, 64, 64});
        cases.push_back({gdn, false, 2, 256, 4, 64, 64});
      } else {
        cases.push_back({gdn, true, 256, 1, 16, 128, 128});
        cases.push_back({gdn, false, 8, 4096, 16, 128, 128});
      }
    }
    note_variant_mode(h);
    std::printf("# linear: bytes = state read+write + q,k,v,o,g,beta; prefill FLOPs = chunked form at C=64 "
                "(bench/linear_bench.cpp)\n");
    bool any_prefill = false;
    for (auto& c : cases) any_prefill |= !c.decode && (only.empty() || only == "prefill");
    if (any_prefill) ceilings(h);
    for (auto& c : cases)
      if (only.empty() || c.decode == (only == "decode")) run_case(h, c, io, params);
  });
}

}  // namespace clattn::bench
