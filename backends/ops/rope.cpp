// apply_rope and rope_append_kv: host checks (RoPE config, positions, shapes, buffer sizes;
// rope_append_kv adds append_kv's own checks), then one launch of cl_kernels/rope.cl over
// (pair, row block, token).
#include <cmath>
#include <string>

#include "backends/dispatch/catalog.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "clattn/rope.hpp"
#include "runtime/log.hpp"

namespace clattn {

namespace {

struct RopeProgram {
  ops::Variant v;
  int rows = 4;    // head rows per work-item
  int tokens = 1;    // tokens per work-item
  int kv_heads = 8;  // KV heads per work-group of the int8 / int4 kernels
  std::string source;
};

// ROPE_WG as a power of two (the int4 kernel's quant groups, G/2 work-items each, tile it),
// lowered to the one that covers a row's D/2 pairs (no idle work-items), raised to min_wg (the
// int4 kernel's G/2).
// `kernel`: the entry point the call launches (checked against its own limit, shrinking
// ROPE_WG down to min_wg where the compiled kernel asks for it).
RopeProgram rope_program(const DeviceProfile& prof, int D, size_t min_wg = 1, const std::string& kernel = "apply_rope") {
  params::Entry pe = params::lookup(prof, "rope");
  RopeProgram r;
  r.source = pe.source;
  const size_t cap = std::max<size_t>(1, std::min<size_t>(size_t(pe.get("ROPE_WG")), prof.max_work_group_size));
  size_t wg = 1;
  while (wg * 2 <= cap) wg *= 2;
  while (wg > 1 && wg / 2 >= size_t(D / 2)) wg /= 2;
  while (wg < min_wg) wg *= 2;
  if (wg > prof.max_work_group_size)
    throw Error(Status::Unsupported, "rope_append_kv: int4 groups of " + std::to_string(2 * min_wg) + " need work-groups of " +
                                         std::to_string(min_wg) + " work-items; the device's limit is " +
                                         std::to_string(prof.max_work_group_size));
  r.rows = std::max(1, int(pe.get("ROPE_ROWS")));
  r.tokens = std::max(1, int(pe.get("ROPE_TOKENS")));
  r.kv_heads = std::max(1, int(pe.get("ROPE_KV_HEADS")));
  const std::string rows = std::to_string(r.rows), tokens = std::to_string(r.tokens);
  const std::string heads = std::to_string(r.kv_heads), hints = prof.is_cpu ? "0" : "1";  // PoCL: rolled loops
  r.v = ops::wg_variant("generic", "rope.cl", kernel, "ROPE_WG", int(wg), int(min_wg), [=](int w) {
    return rt::make_options({{"ROPE_WG", std::to_string(w)}, {"ROPE_ROWS", rows}, {"ROPE_TOKENS", tokens},
                             {"ROPE_KV_HEADS", heads}, {"UNROLL_HINTS", hints}});
  });
  return r;
}

// The launch: the D/2 pairs of a row in dimension 0 (whole groups), blocks of rp.rows head rows
// in dimension 1, blocks of rp.tokens tokens in dimension 2.
void rope_grid(const RopeProgram& rp, int D, size_t rows, int64_t T, size_t gws[3], size_t lws[3]) {
  const size_t wg = rp.v.wg;
  gws[0] = (size_t(D / 2) + wg - 1) / wg * wg, gws[1] = (rows + rp.rows - 1) / rp.rows;
  gws[2] = (size_t(T) + rp.tokens - 1) / rp.tokens;
  lws[0] = wg, lws[1] = lws[2] = 1;
}

// The rotary dim the config resolves to (checked), and the kernel's angle arguments.
struct RopeResolved {
  int R = 0;
  float log2_theta = 0.0f, inv_scale = 1.0f;
};

RopeResolved check_rope(const RopeConfig& r, int D, const std::string& f) {
  if (D < 2 || D % 2) rt::invalid(f + ": head_dim = " + std::to_string(D) + ", must be even and >= 2");
  if (r.style != RopeStyle::NeoX && r.style != RopeStyle::GptJ)
    rt::invalid(f + ": rope.style = " + std::to_string(int(r.style)) + ", must be NeoX (0) or GptJ (1)");
  RopeResolved o;
  o.R = r.rotary_dim ? r.rotary_dim : D;
  if (o.R < 2 || o.R % 2 || o.R > D)
    rt::invalid(f + ": rope.rotary_dim = " + std::to_string(r.rotary_dim) + ", must be even, >= 2 and <= head_dim " +
                std::to_string(D) + " (0 = head_dim)");
  if (r.cos_sin_cache) {
    if (r.cache_positions <= 0)
      rt::invalid(f + ": rope.cache_positions = " + std::to_string(r.cache_positions) + ", must be > 0 with a cos_sin_cache");
    namespace ck = rt::checked;
    ops::require_buffer(r.cos_sin_cache, ck::mul(ck::mul(r.cache_positions, int64_t(o.R), "cos_sin_cache"), 4, "cos_sin_cache"),
                        "rope.cos_sin_cache", {{r.cache_positions, o.R}, "f32"});
  } else {
    if (!(r.theta > 0.0f) || !std::isfinite(r.theta))
      rt::invalid(f + ": rope.theta = " + std::to_string(r.theta) + ", must be finite and > 0");
    if (!(r.scale > 0.0f) || !std::isfinite(r.scale))
      rt::invalid(f + ": rope.scale = " + std::to_string(r.scale) + ", must be finite and > 0");
    o.log2_theta = float(std::log2(double(r.theta)));
    o.inv_scale = float(1.0 / double(r.scale));
  }
  return o;
}

template <class T>
void check_positions_host(const T* p, int64_t n, int64_t limit, const std::string& f) {
  for (int64_t t = 0; t < n; ++t)
    if (p[t] < 0 || (limit > 0 && int64_t(p[t]) >= limit))
      rt::invalid(f + ": positions[" + std::to_string(t) + "] = " + std::to_string(int64_t(p[t])) +
                  (limit > 0 ? ", outside the cos_sin_cache's " + std::to_string(limit) + " rows" : ", must be >= 0"));
}

void check_positions(const RopePositions& p, const RopeConfig& r, int64_t n, const char* fn) {
  const std::string f(fn);
  if (p.dtype != DType::I32 && p.dtype != DType::I64)
    rt::invalid(f + ": positions dtype " + dtype_name(p.dtype) + ", must be i32 or i64");
  ops::require_buffer(p.positions, n * int64_t(dtype_size(p.dtype)), "positions", {{n}, dtype_name(p.dtype)});
  const int64_t limit = r.cos_sin_cache ? r.cache_positions : 0;
  if (p.positions_host) {
    if (p.dtype == DType::I32) check_positions_host(static_cast<const int32_t*>(p.positions_host), n, limit, f);
    else check_positions_host(static_cast<const int64_t*>(p.positions_host), n, limit, f);
  }
}

// Bytes of [T, H, D] rows at strides (st, sh) of dtype dt; 0 when T or H is 0.
int64_t rows_bytes(int64_t T, int H, int D, int64_t st, int64_t sh, DType dt, const char* what) {
  if (T == 0 || H == 0) return 0;
  namespace ck = rt::checked;
  return ck::mul(ck::add(ck::add(ck::mul(T - 1, st, what), ck::mul(int64_t(H) - 1, sh, what), what), D, what),
                 int64_t(dtype_size(dt)), what);
}

// int8 / int4 caches: rope_append_kv_i8 / _i4 over (ROPE_WG work-items, blocks of ROPE_KV_HEADS
// KV heads with their share of the q heads, blocks of ROPE_TOKENS tokens).
void launch_quantised(rt::Kernel& k, const RopeProgram& rp, const RopeAppendKVArgs& r, const ops::AppendChecked& ch,
                      const RopeResolved& rr, int64_t qst, int64_t qsh, cl_mem faults, cl_command_queue q,
                      const Enqueue& e) {
  const AppendKVArgs& a = r.append;
  const int D = a.cache.head_dim, Hkv = a.cache.num_kv_heads, Hq = r.num_qo_heads, G = a.cache.quant_group;
  const bool i4 = a.cache.dtype == DType::I4;
  size_t gws[3] = {rp.v.wg, (size_t(Hkv) + rp.kv_heads - 1) / rp.kv_heads,
                   (size_t(a.num_tokens) + rp.tokens - 1) / rp.tokens};
  size_t lws[3] = {rp.v.wg, 1, 1};
  const cl_mem none = nullptr;
  const cl_long num_slots = cl_long(int64_t(a.cache.num_pages) * a.cache.page_size);
  const cl_int gptj = r.rope.style == RopeStyle::GptJ, s_f16 = a.cache.scale_dtype == DType::F16;
  const cl_int pos_i64 = r.pos.dtype == DType::I64, has_cache = r.rope.cos_sin_cache != nullptr;
  const cl_mem cs = r.rope.cos_sin_cache ? r.rope.cos_sin_cache : none;
  // The arguments both kernels share up to the head dim; int4 adds its group after it, and a
  // local array of ROPE_KV_HEADS rotated k rows at the end.
  auto common = [&](auto&&... tail) {
    k.launch(q, 3, gws, lws, e.num_wait, e.wait, e.event, Hq ? r.q : none, Hq ? r.q_out : none, cl_long(qst),
             cl_long(qsh), cl_int(Hq), cl_int(r.q_out_dtype), a.k, a.v, cl_int(a.src_dtype), cl_long(ch.st),
             cl_long(ch.sh), a.slot_mapping, cl_int(a.slot_dtype == DType::I64), num_slots, a.k_cache, a.v_cache,
             cl_long(a.cache.page_stride()), cl_long(a.cache.token_stride()), cl_long(a.cache.head_stride()),
             cl_int(a.cache.page_size), cl_int(Hkv), a.k_scale_cache, a.v_scale_cache,
             cl_long(a.cache.scale_page_stride()), cl_long(a.cache.scale_token_stride()),
             cl_long(a.cache.scale_head_stride()), s_f16, cl_int(D), tail...);
  };
  if (i4)
    common(cl_int(G), cl_int(rr.R), gptj, r.pos.positions, pos_i64, has_cache, cs, cl_long(r.rope.cache_positions),
           rr.log2_theta, rr.inv_scale, cl_long(a.num_tokens), faults, rt::LocalMem{size_t(rp.kv_heads) * size_t(D) * sizeof(float)});
  else
    common(cl_int(rr.R), gptj, r.pos.positions, pos_i64, has_cache, cs, cl_long(r.rope.cache_positions), rr.log2_theta,
           rr.inv_scale, cl_long(a.num_tokens), faults);
}

}  // namespace

namespace ops {
void check_rope_config(const RopeConfig& r, int head_dim, const std::string& what) { check_rope(r, head_dim, what); }

void catalog_rope(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (int d : {64, 128, 256})
  for (const char* kernel : {"apply_rope", "rope_append_kv", "rope_append_kv_i8", "rope_append_kv_i4"})
    catalog_add(out, "rope", std::string(kernel) + " d" + std::to_string(d), [&] {
      RopeProgram a = rope_program(t.profile, d);
      a.v.kernel = kernel;
      return std::vector<Variant>{a.v};
    });
}
}  // namespace ops

void apply_rope(const Context& ctx, const RopeArgs& a, const Enqueue& e) {
  const char* fn = "apply_rope";
  ops::require_io_dtype(a.dtype, "apply_rope dtype");
  const int D = a.head_dim, Hq = a.num_qo_heads, Hk = a.num_kv_heads;
  if (a.num_tokens < 0) rt::invalid("apply_rope: num_tokens = " + std::to_string(a.num_tokens) + ", must be >= 0");
  if (Hq < 0 || Hk < 0 || Hq + Hk == 0)
    rt::invalid("apply_rope: num_qo_heads = " + std::to_string(Hq) + ", num_kv_heads = " + std::to_string(Hk) +
                ": both >= 0, at least one > 0");
  const RopeResolved rr = check_rope(a.rope, D, fn);
  const int64_t qst = a.q_stride_token ? a.q_stride_token : int64_t(Hq) * D, qsh = a.q_stride_head ? a.q_stride_head : D;
  const int64_t kst = a.k_stride_token ? a.k_stride_token : int64_t(Hk) * D, ksh = a.k_stride_head ? a.k_stride_head : D;
  if (qst < 0 || qsh < 0 || kst < 0 || ksh < 0) rt::invalid("apply_rope: negative stride");
  const int64_t T = a.num_tokens;
  const int64_t qb = rows_bytes(T, Hq, D, qst, qsh, a.dtype, "apply_rope q rows");
  const int64_t kb = rows_bytes(T, Hk, D, kst, ksh, a.dtype, "apply_rope k rows");
  if (qb) {
    ops::require_buffer(a.q, qb, "q", {{T, Hq, D}, dtype_name(a.dtype)});
    ops::require_buffer(a.q_out, qb, "q_out", {{T, Hq, D}, dtype_name(a.dtype)});
  }
  if (kb) {
    ops::require_buffer(a.k, kb, "k", {{T, Hk, D}, dtype_name(a.dtype)});
    ops::require_buffer(a.k_out, kb, "k_out", {{T, Hk, D}, dtype_name(a.dtype)});
  }
  cl_command_queue q = ops::queue_of(ctx, e);
  if (T == 0) {
    ops::marker_if_needed(q, e);
    return;
  }
  check_positions(a.pos, a.rope, T, fn);

  auto& c = rt::impl(ctx);
  RopeProgram rp = rope_program(c.profile, D);
  const ops::BuiltVariant built = ops::select_and_build(c, "rope", {rp.v});
  rp.v = built.variant;
  rt::Kernel& k = *built.kernel;
  const size_t rows = size_t(Hq + Hk);
  size_t gws[3], lws[3];
  rope_grid(rp, D, rows, T, gws, lws);
  const cl_mem none = nullptr;
  k.launch(q, 3, gws, lws, e.num_wait, e.wait, e.event, Hq ? a.q : none, Hq ? a.q_out : none, cl_long(qst),
           cl_long(qsh), cl_int(Hq), Hk ? a.k : none, Hk ? a.k_out : none, cl_long(kst), cl_long(ksh), cl_int(Hk),
           cl_int(a.dtype), cl_int(D), cl_int(rr.R), cl_int(a.rope.style == RopeStyle::GptJ), a.pos.positions,
           cl_int(a.pos.dtype == DType::I64), cl_int(a.rope.cos_sin_cache != nullptr),
           a.rope.cos_sin_cache ? a.rope.cos_sin_cache : none, cl_long(a.rope.cache_positions), rr.log2_theta,
           rr.inv_scale, cl_long(T), c.faults);
}

void rope_append_kv(const Context& ctx, const RopeAppendKVArgs& r, const Enqueue& e) {
  const char* fn = "rope_append_kv";
  const AppendKVArgs& a = r.append;
  const ops::AppendChecked ch = ops::check_append_kv(a);  // per-head scales included
  const int D = a.cache.head_dim, Hkv = a.cache.num_kv_heads, Hq = r.num_qo_heads;
  const RopeResolved rr = check_rope(r.rope, D, fn);
  ops::require_io_dtype(r.q_out_dtype, "rope_append_kv q_out_dtype");
  if (Hq < 0) rt::invalid("rope_append_kv: num_qo_heads = " + std::to_string(Hq) + ", must be >= 0");
  const int64_t qst = r.q_stride_token ? r.q_stride_token : int64_t(Hq) * D, qsh = r.q_stride_head ? r.q_stride_head : D;
  if (qst < 0 || qsh < 0) rt::invalid("rope_append_kv: negative q stride");
  const int64_t T = a.num_tokens;
  if (Hq) {
    const int64_t qb = rows_bytes(T, Hq, D, qst, qsh, a.src_dtype, "rope_append_kv q rows");
    const int64_t ob = rows_bytes(T, Hq, D, qst, qsh, r.q_out_dtype, "rope_append_kv q_out rows");
    if (qb) ops::require_buffer(r.q, qb, "q", {{T, Hq, D}, dtype_name(a.src_dtype)});
    if (ob) ops::require_buffer(r.q_out, ob, "q_out", {{T, Hq, D}, dtype_name(r.q_out_dtype)});
  }
  cl_command_queue q = ops::queue_of(ctx, e);
  if (T == 0) {
    ops::marker_if_needed(q, e);
    return;
  }
  check_positions(r.pos, r.rope, T, fn);
  // No pages: q_out is still written (the slots only decide the cache writes).
  auto& c = rt::impl(ctx);
  const bool i8 = a.cache.dtype == DType::I8 && !ch.empty, i4 = a.cache.dtype == DType::I4 && !ch.empty;
  // int4: a quant group's range is reduced over its G/2 work-items, within one work-group.
  RopeProgram rp = rope_program(c.profile, D, i4 ? size_t(a.cache.quant_group / 2) : 1,
                                i8 ? "rope_append_kv_i8" : i4 ? "rope_append_kv_i4" : "rope_append_kv");
  const ops::BuiltVariant built = ops::select_and_build(c, "rope", {rp.v});
  rp.v = built.variant;
  auto prog = built.program;
  const cl_mem none = nullptr;
  rt::log().debug("rope_append_kv: {} tokens, Hq {} Hkv {} D {} R {} {}, {} -> {} cache ({})", T, Hq, Hkv, D, rr.R,
                  r.rope.style == RopeStyle::GptJ ? "gptj" : "neox", dtype_name(a.src_dtype), dtype_name(a.cache.dtype),
                  rp.source);
  // int8 / int4 caches: one launch of rope_append_kv_i8 / _i4 for the q, k and v rows (a row's
  // max, a group's range sets its scales); no pages: the q rows through rope_append_kv.
  if (i8 || i4) {
    launch_quantised(prog->kernel(i8 ? "rope_append_kv_i8" : "rope_append_kv_i4"), rp, r, ch, rr, qst, qsh, c.faults, q,
                     e);
    return;
  }
  rt::Kernel& k = prog->kernel("rope_append_kv");
  const int kv_rows = ch.empty ? 0 : Hkv;
  // Per-KV-head scales: read by the k / v rows only (a valid buffer stands in without them).
  const bool has_hs = kv_rows && a.k_head_scales;
  const size_t rows = size_t(Hq + 2 * kv_rows);
  if (rows == 0) {
    ops::marker_if_needed(q, e);
    return;
  }
  size_t gws[3], lws[3];
  rope_grid(rp, D, rows, T, gws, lws);
  k.launch(q, 3, gws, lws, e.num_wait, e.wait, e.event, Hq ? r.q : none, Hq ? r.q_out : none, cl_long(qst), cl_long(qsh),
           cl_int(Hq), cl_int(r.q_out_dtype), kv_rows ? a.k : none, kv_rows ? a.v : none, cl_int(a.src_dtype),
           cl_long(ch.st), cl_long(ch.sh), a.slot_mapping, cl_int(a.slot_dtype == DType::I64),
           cl_long(kv_rows ? int64_t(a.cache.num_pages) * a.cache.page_size : 0), kv_rows ? a.k_cache : none,
           kv_rows ? a.v_cache : none, cl_int(a.cache.dtype), cl_long(a.cache.page_stride()),
           cl_long(a.cache.token_stride()), cl_long(a.cache.head_stride()), cl_int(a.cache.page_size), cl_int(kv_rows),
           a.k_scale, a.v_scale, has_hs ? a.k_head_scales : a.slot_mapping, has_hs ? a.v_head_scales : a.slot_mapping,
           cl_int(has_hs), cl_int(D), cl_int(rr.R), cl_int(r.rope.style == RopeStyle::GptJ), r.pos.positions,
           cl_int(r.pos.dtype == DType::I64), cl_int(r.rope.cos_sin_cache != nullptr),
           r.rope.cos_sin_cache ? r.rope.cos_sin_cache : none, cl_long(r.rope.cache_positions), rr.log2_theta,
           rr.inv_scale, cl_long(T), c.faults);
}

}  // namespace clattn
