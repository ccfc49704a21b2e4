// clattn-bench rope: RoPE fused into the KV append (rope_append_kv) against the same job as two
// kernels (apply_rope on q and k, then append_kv), memory-bound: % of the streaming read.
//
// Bytes (both rows, the job's own traffic): q read + q_out written, k and v read, k and v
// written into the cache (its dtype; int8 / int4 with their f32 scales or [scale, zero] pairs),
// positions and slots; the cos/sin cache form adds a row per token. The two-kernel row moves the rotated k once more (written by apply_rope, read by
// append_kv), which is the cost the fusion removes; it is reported against the same bytes.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "clattn/rope.hpp"
#include "tools/cli.hpp"

namespace clattn::bench {
namespace {

struct RopeBenchCase {
  int T, Hq, Hkv, D, R, P;
  DType kv;
  bool gptj, cache;
  int group = 64;  // int4: quant_group
};

void run_case(Harness& h, const RopeBenchCase& c) {
  Context& ctx = h.ctx();
  const DType io = DType::BF16;
  const size_t es = dtype_size(io);
  const size_t nq = size_t(c.T) * c.Hq * c.D, nk = size_t(c.T) * c.Hkv * c.D;
  PagedKV cache;
  cache.num_pages = (c.T + c.P - 1) / c.P, cache.page_size = c.P, cache.num_kv_heads = c.Hkv, cache.head_dim = c.D;
  cache.dtype = c.kv;
  if (c.kv == DType::I4) cache.quant_group = c.group;
  // Bytes a token's K (or V) rows take in the cache, scales included (f32).
  const double row_bytes = c.kv == DType::I4   ? c.Hkv * (c.D / 2.0 + (c.D / c.group) * 8.0)
                           : c.kv == DType::I8 ? c.Hkv * (c.D + 4.0)
                                               : double(c.Hkv) * c.D * dtype_size(c.kv);
  DeviceBuffer q(ctx, nq * es), qo(ctx, nq * es), k(ctx, nk * es), kr(ctx, nk * es), v(ctx, nk * es);
  DeviceBuffer kc(ctx, size_t(cache.required_bytes())), vc(ctx, size_t(cache.required_bytes()));
  const size_t sb = size_t(std::max<int64_t>(cache.scale_required_bytes(), 4));
  DeviceBuffer ksc(ctx, sb), vsc(ctx, sb);
  for (DeviceBuffer* b : {&q, &k, &v}) fill_pattern(ctx, b->get(), b->bytes(), 7);
  std::vector<int64_t> pos(size_t(c.T)), slots(size_t(c.T));
  for (int t = 0; t < c.T; ++t) pos[size_t(t)] = 1000 + t, slots[size_t(t)] = t;
  DeviceBuffer dpos(ctx, pos.size() * 8), dslots(ctx, slots.size() * 8);
  dpos.write(ctx, pos.data(), pos.size() * 8);
  dslots.write(ctx, slots.data(), slots.size() * 8);
  RopeConfig rc;
  rc.style = c.gptj ? RopeStyle::GptJ : RopeStyle::NeoX;
  rc.rotary_dim = c.R;
  const int R = c.R ? c.R : c.D;  // the cos/sin cache's row length
  DeviceBuffer cs;
  const int64_t rows = 1000 + c.T;
  if (c.cache) {
    std::vector<float> host(size_t(rows) * R, 0.5f);
    cs = DeviceBuffer(ctx, host.size() * 4);
    cs.write(ctx, host.data(), host.size() * 4);
    rc.cos_sin_cache = cs.get(), rc.cache_positions = rows;
  }
  RopePositions rp{dpos.get(), DType::I64, nullptr};

  AppendKVArgs ap;
  ap.k = kr.get(), ap.v = v.get(), ap.src_dtype = io, ap.slot_mapping = dslots.get(), ap.slot_dtype = DType::I64;
  ap.num_tokens = c.T, ap.k_cache = kc.get(), ap.v_cache = vc.get(), ap.cache = cache;
  if (cache.scale_required_bytes() > 0) ap.k_scale_cache = ksc.get(), ap.v_scale_cache = vsc.get();
  RopeArgs ra;
  ra.q = q.get(), ra.q_out = qo.get(), ra.k = k.get(), ra.k_out = kr.get(), ra.dtype = io, ra.num_tokens = c.T;
  ra.num_qo_heads = c.Hq, ra.num_kv_heads = c.Hkv, ra.head_dim = c.D, ra.pos = rp, ra.rope = rc;
  RopeAppendKVArgs fa;
  fa.append = ap, fa.append.k = k.get(), fa.q = q.get(), fa.q_out = qo.get(), fa.num_qo_heads = c.Hq;
  fa.q_out_dtype = io, fa.pos = rp, fa.rope = rc;

  const double bytes = double(2 * nq + 2 * nk) * es + 2.0 * c.T * row_bytes + c.T * 16.0 +
                       (c.cache ? double(c.T) * R * 4 : 0.0);
  char shape[200];
  const std::string group = c.kv == DType::I4 ? " g" + std::to_string(c.group) : "";
  std::snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d D=%d R=%d %s P=%d bf16->%s%s%s", c.T, c.Hq, c.Hkv, c.D,
                R, c.gptj ? "gptj" : "neox", c.P, dtype_name(c.kv), group.c_str(),
                c.cache ? " cos_sin_cache" : "");
  const double fused = h.time_ms([&] { rope_append_kv(ctx, fa); });
  h.report("rope_append_kv", std::string(shape) + " fused", fused, bytes, 0);
  const double two = h.time_ms([&] {
    apply_rope(ctx, ra);
    append_kv(ctx, ap);
  });
  h.report("rope+append", std::string(shape) + " two kernels", two, bytes, 0);
  std::printf("#   fused = %.1f %% of the two-kernel time (%.3f vs %.3f ms)\n", 100.0 * fused / two, fused, two);
}

}  // namespace

void register_rope(CLI::App& app, Harness& h) {
  auto* sub = app.add_subcommand("rope", "RoPE fused into the KV append vs apply_rope + append_kv (GB/s vs stream-read)");
  static bool quick = false;
  sub->add_flag("--quick", quick, "small shapes (PoCL / CI)");
  static int one_t = 0, hq = 32, hkv = 8, d = 128, r = 0, p = 16, group = 64;
  static std::string kv = "bf16";
  static bool gptj = false, with_cache = false;
  auto* one = sub->add_option("-T", one_t, "one case: tokens")->check(cli::at_least(1));
  sub->add_option("--hq", hq, "one case: query heads")->check(cli::at_least(0))->needs(one);
  sub->add_option("--hkv", hkv, "one case: KV heads")->check(cli::at_least(1))->needs(one);
  sub->add_option("-D,--dim", d, "one case: head dim (even)")->check(cli::at_least(2))->needs(one);
  sub->add_option("--rotary-dim", r, "one case: rotary dims (0 = head dim)")->check(cli::at_least(0))->needs(one);
  sub->add_option("--page", p, "one case: page size")->check(cli::at_least(1))->needs(one);
  sub->add_option("--kv", kv, "cache dtype")->check(cli::one_of({"f32", "f16", "bf16", "e4m3", "int8", "int4"}));
  sub->add_option("--quant-group", group, "int4: head-dim elements per scale/zero pair (32, 64, 128)")
      ->check(cli::one_of({"32", "64", "128"}));
  sub->add_flag("--gptj", gptj, "one case: GPT-J (interleaved) pairs");
  sub->add_flag("--cos-sin-cache", with_cache, "one case: angles from a cos/sin cache");
  sub->callback([&h] {
    if (one_t > 0 && (d % 2 || r % 2 || r > d))
      throw Error(Status::InvalidArgument, "--dim must be even and --rotary-dim even and <= --dim");
    if (kv == "int4" && (one_t > 0 ? d : 64) % group)  // the sweep's smallest head dim is 64
      cli::bad_argument("--quant-group", std::to_string(group) + " does not divide the head dim (" +
                                             std::to_string(one_t > 0 ? d : 64) + ")");
    if (check_args_only()) return;
    note_variant_mode(h);
    const DType kvd = kv == "f32"    ? DType::F32
                      : kv == "f16"  ? DType::F16
                      : kv == "e4m3" ? DType::FP8_E4M3
                      : kv == "int8" ? DType::I8
                      : kv == "int4" ? DType::I4
                                     : DType::BF16;
    std::vector<RopeBenchCase> cases;
    if (one_t > 0) cases.push_back({one_t, hq, hkv, d, r, p, kvd, gptj, with_cache});
    else if (quick) cases = {{256, 8, 2, 64, 0, 16, kvd, false, false}, {64, 8, 2, 64, 32, 16, kvd, true, true}};
    else
      cases = {{8192, 32, 8, 128, 0, 16, kvd, false, false}, {64, 32, 8, 128, 0, 16, kvd, false, false},
               {8192, 32, 8, 128, 64, 16, DType::FP8_E4M3, true, true}};
    for (auto& c : cases) {
      c.group = group;
      run_case(h, c);
    }
  });
}

}  // namespace clattn::bench
