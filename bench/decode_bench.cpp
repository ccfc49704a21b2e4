// clattn-bench decode: paged decode throughput against the same-process streaming-read
// limit. Bytes counted = the K and V bytes of every visible key (each read once) + q + o;
// page ids and the split-K partials are not counted (they are the kernel's overhead); int8 /
// int4 caches count their scale caches' bytes too (f32 row scales, f32 [scale, zero] pairs).
// Time = the harness's median of marker-to-marker device time (an idle device at each
// start, so the host's enqueue latency of the first kernel is included). Each case runs
// twice: decode_run per call, then the same call captured and replayed (clattn::Capture; the
// row's "host" figure is the replay's enqueue cost).
//
//   clattn-bench decode                      the sweep (H100 targets)
//   clattn-bench decode --quick              a small sweep for CPU devices (PoCL)
//   clattn-bench decode -B 64 -S 4096 --kv e4m3 --page 16 --layout hnd
//   clattn-bench decode -B 8 -S 1024 --kv int4 --quant-group 128
//   clattn-bench decode --param TPT=16 --param UNROLL=2      parameter overrides
//   clattn-bench decode --grid "UNROLL=2,4;QREGS=64,128"     every combination, per case
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "bench/bench.hpp"
#include "clattn/capture.hpp"
#include "clattn/decode.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct DecodeCase {
  int B = 64, S = 4096, Hq = 32, Hkv = 8, D = 128, P = 16;
  DType kv = DType::BF16, q = DType::BF16;
  int group = 64;  // int4: quant_group
  KVLayout layout = KVLayout::NHD;
  bool page_table = false, deterministic = false;
  int max_splits = 0;
};

// The names the --kv and --q validators admit.
DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == "e4m3" || s == "fp8" || s == "fp8_e4m3") return DType::FP8_E4M3;
  if (s == "int8") return DType::I8;
  if (s == "int4") return DType::I4;
  return DType::FP8_E5M2;
}

std::string shape_of(const DecodeCase& c) {
  char buf[200];
  const std::string kv = c.kv == DType::I4 ? "int4 g" + std::to_string(c.group) : dtype_name(c.kv);
  std::snprintf(buf, sizeof buf, "B=%d S=%d Hq=%d Hkv=%d D=%d P=%d %s %s%s%s", c.B, c.S, c.Hq, c.Hkv, c.D, c.P,
                kv.c_str(), c.layout == KVLayout::NHD ? "NHD" : "HND", c.page_table ? " table" : "",
                c.deterministic ? " det" : "");
  return buf;
}

void run_case(Harness& h, const DecodeCase& c, const std::map<std::string, int>& params, bool verbose_build) {
  Context& ctx = h.ctx();
  PagedKV cache;
  cache.page_size = c.P, cache.num_kv_heads = c.Hkv, cache.head_dim = c.D, cache.layout = c.layout,
  cache.dtype = c.kv;
  if (c.kv == DType::I4) cache.quant_group = c.group;
  const int pages_per = (c.S + c.P - 1) / c.P;
  const PagedCsr csr = shuffled_csr(c.B, c.S, c.P, 7);
  const std::vector<int32_t>& ids = csr.kv_indices;
  cache.num_pages = int(ids.size());

  DecodeOptions opt;
  opt.num_qo_heads = c.Hq, opt.q_dtype = c.q, opt.o_dtype = c.q;
  opt.deterministic = c.deterministic, opt.max_splits = c.max_splits;
  opt.validate = false;
  opt.params = params;
  // The page table's rows are the CSR's page lists (every request has pages_per pages).
  DecodePlan plan;
  if (c.page_table) {
    PageTable t;
    t.page_size = c.P, t.max_pages = pages_per, t.page_table = ids, t.seq_lens.assign(size_t(c.B), c.S);
    plan = decode_plan(ctx, t, cache, opt);
  } else {
    plan = decode_plan(ctx, csr, cache, opt);
  }
  const std::vector<int32_t>& page_ids = ids;
  const size_t cache_bytes = size_t(cache.required_bytes());
  const size_t scale_bytes = size_t(cache.scale_required_bytes());  // int8 / int4: f32 scales
  const size_t qo_bytes = size_t(c.B) * c.Hq * c.D * dtype_size(c.q);
  // Back-to-back samples rotate through copies of the cache so no call reads K/V from L2.
  const int copies = h.rotation_copies(2.0 * double(cache_bytes));
  std::vector<DeviceBuffer> ks, vs, kss, vss;
  for (int i = 0; i < copies; ++i) {
    ks.emplace_back(ctx, cache_bytes), vs.emplace_back(ctx, cache_bytes);
    fill_pattern(ctx, ks.back().get(), cache_bytes, 1);
    fill_pattern(ctx, vs.back().get(), cache_bytes, 2);
    if (scale_bytes) {
      kss.emplace_back(ctx, scale_bytes), vss.emplace_back(ctx, scale_bytes);
      fill_pattern(ctx, kss.back().get(), scale_bytes, 4);
      fill_pattern(ctx, vss.back().get(), scale_bytes, 5);
    }
  }
  DeviceBuffer q(ctx, qo_bytes), o(ctx, qo_bytes);
  DeviceBuffer lse(ctx, size_t(c.B) * c.Hq * 4), pid(ctx, page_ids.size() * 4);
  DeviceBuffer ws(ctx, std::max<size_t>(16, size_t(plan.workspace_bytes)));
  pid.write(ctx, page_ids.data(), page_ids.size() * 4);
  fill_pattern(ctx, q.get(), qo_bytes, 3);
  ctx.finish();

  DecodeBuffers b;
  b.q = q.get(), b.k_cache = ks[0].get(), b.v_cache = vs[0].get(), b.page_ids = pid.get(), b.o = o.get();
  b.lse = lse.get(), b.workspace = plan.workspace_bytes ? ws.get() : nullptr;
  int call = 0;
  auto next_copy = [&] {
    const int i = call++ % copies;
    b.k_cache = ks[size_t(i)].get(), b.v_cache = vs[size_t(i)].get();
    if (scale_bytes) b.k_scale_cache = kss[size_t(i)].get(), b.v_scale_cache = vss[size_t(i)].get();
  };
  next_copy();
  call = 0;
  const double ms = h.time_ms([&] {
    next_copy();
    decode_run(ctx, plan, b);
  });
  {
    // The last command (the decode kernel, or the merge pass of a split plan) within one
    // call on an idle device, both profiled in that call: the rest is launch overhead and
    // any earlier pass.
    const auto t = h.last_command([&](const Enqueue& e) { decode_run(ctx, plan, b, e); });
    std::printf("#   last kernel (%s): %.1f us of a %.1f us call (one call on an idle device)\n",
                !plan.num_merges ? "decode" : plan.kernel_options.find("FUSE_MERGE=1") != std::string::npos
                                                  ? "decode + fused merge"
                                                  : "merge",
                t.last_us, t.call_us);
  }
  if (verbose_build)
    h.print_build_log(plan.variant == "nv_mma_sync" ? (cache.dtype == DType::I4 ? "decode_mma_i4_nv.cl" : "decode_mma_nv.cl")
                      : plan.variant == "cpu"       ? "decode_cpu.cl"
                                                    : "decode.cl",
                      plan.kernel_options);
  // int8 / int4: the scales are read too (per token and head, K and V: one f32, or an f32
  // [scale, zero] pair per group).
  const bool i4 = c.kv == DType::I4;
  const double row = i4 ? c.D / 2.0 : c.D * double(dtype_size(c.kv));
  const double scales = !scale_bytes ? 0.0 : i4 ? 8.0 * (c.D / c.group) : 4.0;
  const double kv_bytes = 2.0 * c.B * double(c.S) * c.Hkv * (row + scales);
  const double bytes = kv_bytes + 2.0 * double(qo_bytes);
  const double flops = 4.0 * c.B * double(c.S) * c.Hq * c.D;
  h.report("decode", shape_of(c) + " " + plan.variant + param_suffix(params), ms, bytes, flops);
  // The same calls captured (one Capture per cache copy) and replayed: the host cost of a
  // replay is one clEnqueueCommandBufferKHR, or one clEnqueueNDRangeKernel per kernel.
  std::vector<Capture> caps;
  for (int i = 0; i < copies; ++i) {
    next_copy();
    caps.emplace_back(ctx);
    caps.back().begin();
    decode_run(ctx, plan, b);
    caps.back().end();
  }
  call = 0;
  const double replay_ms = h.time_ms([&] { caps[size_t(call++ % copies)].replay(); });
  h.report("decode", shape_of(c) + " " + plan.variant + param_suffix(params) +
                         (caps[0].uses_command_buffer() ? " replay(command buffer)" : " replay(launches)"),
           replay_ms, bytes, flops);
  std::printf("#   plan: %s WG=%d TPT=%d GMAX=%dx%d UNROLL=%d LOAD=%d; %d work items, chunk %d, %d partials\n",
              plan.variant.c_str(), plan.tile.wg, plan.tile.tpt, plan.tile.gmax, plan.tile.head_blocks,
              plan.tile.unroll, plan.tile.load_bytes, plan.num_work, plan.chunk_tokens,
              plan.num_partials);
  std::fflush(stdout);
}

}  // namespace

void register_decode(CLI::App& app, Harness& h) {
  auto* cmd = app.add_subcommand("decode", "paged decode (GB/s of K+V+q+o vs stream-read)");
  struct Opts {
    DecodeCase c;
    std::string kv = "bf16", q = "bf16", layout = "nhd", meta = "csr", grid;
    std::vector<std::string> params;
    bool quick = false, custom = false, verbose_build = false;
  };
  auto o = std::make_shared<Opts>();
  using cli::at_least;
  using cli::one_of;
  auto shape_opt = [&](const char* name, int& dst, const char* help) {
    cmd->add_option(name, dst, help)->check(at_least(1))->each([o](const std::string&) { o->custom = true; });
  };
  shape_opt("-B,--batch", o->c.B, "one case: requests (the other shape options default to the first sweep case)");
  shape_opt("-S,--seq", o->c.S, "one case: KV length of every request");
  shape_opt("-H,--hq", o->c.Hq, "one case: query heads");
  shape_opt("--hkv", o->c.Hkv, "one case: KV heads (divides the query heads)");
  shape_opt("-D,--dim", o->c.D, "one case: head dim");
  shape_opt("--page", o->c.P, "one case: page size");
  cmd->add_option("--kv", o->kv, "KV dtype")
      ->check(one_of({"f32", "f16", "bf16", "e4m3", "e5m2", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4"}));
  cmd->add_option("--quant-group", o->c.group, "int4: head-dim elements per scale/zero pair (32, 64, 128)")
      ->check(one_of({"32", "64", "128"}));
  cmd->add_option("--q", o->q, "q/o dtype")->check(one_of({"f32", "f16", "bf16"}));
  cmd->add_option("--layout", o->layout, "KV layout")->check(one_of({"nhd", "hnd"}));
  cmd->add_option("--meta", o->meta, "metadata form")->check(one_of({"csr", "table"}));
  cmd->add_flag("--deterministic", o->c.deterministic, "fixed split tile");
  cmd->add_option("--max-splits", o->c.max_splits, "per request (1 = never split, 0 = the planner's choice)")
      ->check(at_least(0));
  cmd->add_option("--param", o->params, "parameter override NAME=VALUE (repeatable)");
  cmd->add_option("--grid", o->grid, "parameter grid 'A=1,2;B=3,4': every combination per case");
  cmd->add_flag("--quick", o->quick, "small sweep for CPU devices");
  cmd->add_flag("--verbose-build", o->verbose_build, "print the kernel's build log (NVIDIA: -cl-nv-verbose)");
  cmd->callback([o, &h] {
    DecodeCase base = o->c;
    base.kv = parse_dtype(o->kv);
    base.q = parse_dtype(o->q);
    base.layout = o->layout == "hnd" ? KVLayout::HND : KVLayout::NHD;
    base.page_table = o->meta == "table";
    if (base.Hq % base.Hkv != 0)
      cli::bad_argument("--hkv", std::to_string(base.Hkv) + " does not divide the query heads (" +
                                     std::to_string(base.Hq) + ")");
    const std::map<std::string, int> fixed = op_params(o->params, {"decode"});
    const auto grid = op_grid(o->grid, {"decode"});
    if (base.kv == DType::I4 && base.D % base.group != 0)
      cli::bad_argument("--quant-group", std::to_string(base.group) + " does not divide the head dim (" +
                                             std::to_string(base.D) + ")");
    if (check_args_only()) return;
    std::vector<DecodeCase> cases;
    auto with = [&](int B, int S, int P, DType kv) {
      DecodeCase c = base;
      c.B = B, c.S = S, c.P = P, c.kv = kv;
      cases.push_back(c);
    };
    if (o->custom) {
      cases.push_back(base);
    } else if (o->quick) {
      with(8, 1024, 16, DType::BF16);
      with(1, 8192, 16, DType::BF16);
      with(32, 256, 1, DType::BF16);
      with(8, 1024, 16, DType::FP8_E4M3);
      with(8, 1024, 16, DType::I8);
      with(8, 1024, 16, DType::I4);
    } else {
      with(64, 4096, 16, DType::BF16);
      with(1, 32768, 16, DType::BF16);
      with(256, 1024, 1, DType::BF16);
      with(64, 4096, 16, DType::FP8_E4M3);
      with(1, 32768, 16, DType::FP8_E4M3);
      with(256, 1024, 1, DType::FP8_E4M3);
      with(64, 4096, 16, DType::I8);
      with(1, 32768, 16, DType::I8);
      with(64, 4096, 16, DType::I4);
      with(1, 32768, 16, DType::I4);
    }
    note_variant_mode(h);
    h.get_limits();
    for (auto& c : cases)
      for (auto& g : grid) {
        auto params = fixed;
        for (auto& kv : g) params[kv.first] = kv.second;
        run_case(h, c, params, o->verbose_build);
      }
  });
}

}  // namespace clattn::bench
