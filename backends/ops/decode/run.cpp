// Paged decode runs: buffer-size checks, then enqueue only; the fixed plans' refresh.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backends/ops/decode/decode_impl.hpp"

namespace clattn {
using namespace ops::decode;



void decode_refresh(const Context& ctx, const DecodePlan& plan, cl_mem seq_lens, cl_mem positions, const Enqueue& e) {
  const DecodePlanState* st = plan.state_.get();
  if (!st || !st->fixed) rt::invalid("decode_refresh: the plan is not a fixed-capacity plan (decode_plan_fixed)");
  ops::require_buffer(seq_lens, int64_t(st->B) * 4, "seq_lens", {{st->B}, "i32"});
  if (positions) ops::require_buffer(positions, int64_t(st->B) * 4, "positions", {{st->B}, "i32"});
  cl_command_queue q = ops::queue_of(ctx, e);
  ops::WaitList wl(e, st->upload);
  const auto& f = st->fx;
  const size_t lws = 64, gws = (size_t(st->num_work) + lws - 1) / lws * lws;
  st->refresh_k->launch(q, 1, &gws, &lws, wl.size(), wl.data(), e.event, seq_lens, cl_int(st->B), cl_int(f.nmax),
                        cl_int(f.chunk), cl_int(f.align), cl_int(f.max_splits), cl_int(f.window_left),
                        cl_int(f.max_pages), cl_int(f.max_keys), st->table, cl_int(st->work_off), cl_int(st->merge_off),
                        positions ? positions : seq_lens, cl_int(positions != nullptr));
}

namespace {
const DecodePlanState& run_state(const DecodePlan& plan) {
  if (!plan.state_) rt::invalid("decode_run: empty plan (make one with decode_plan)");
  return *plan.state_;
}
}  // namespace

namespace ops {
// decode_run's checks (scales, buffer sizes), before anything is enqueued.
void decode_check(const DecodePlan& plan, const DecodeBuffers& b) {
  const DecodePlanState* st = &run_state(plan);
  if (!(b.k_scale > 0.0f) || !std::isfinite(b.k_scale) || !(b.v_scale > 0.0f) || !std::isfinite(b.v_scale))
    rt::invalid("decode_run: k_scale/v_scale must be finite and > 0 (got " + std::to_string(b.k_scale) + ", " +
                std::to_string(b.v_scale) + ")");
  ops::check_kv_scales(st->cache, b.k_scale, b.v_scale, b.k_head_scales, b.v_head_scales, "decode_run");
  const int B = st->B, Hq = st->Hq, D = st->D;
  if (B > 0) {
    ops::require_buffer(b.q, st->q_bytes, "q", {{B, Hq, D}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.o, st->o_bytes, "o", {{B, Hq, D}, dtype_name(st->o_dtype)});
    if (b.lse) ops::require_buffer(b.lse, st->lse_bytes, "lse", {{B, Hq}, "f32"});
    const ops::Shape cache{{st->cache.num_pages, st->cache.page_size, st->Hkv, D}, dtype_name(st->cache.dtype),
                           "paged cache "};
    if (st->cache.num_pages > 0) {
      ops::require_buffer(b.k_cache, st->kv_bytes, "k_cache", cache);
      ops::require_buffer(b.v_cache, st->kv_bytes, "v_cache", cache);
      ops::require_scale_caches(st->cache, st->scale_bytes, b.k_scale_cache, b.v_scale_cache);
    }
    if (st->page_id_bytes > 0)
      ops::require_buffer(b.page_ids, st->page_id_bytes, "page_ids",
                          {{st->page_id_bytes / 4}, "i32", st->page_table ? "page_table " : "kv_indices "});
    if (st->workspace_bytes > 0)
      ops::require_buffer(b.workspace, st->workspace_bytes, "workspace",
                          {{st->num_partials, Hq, D}, "f32 partial states and their lse"});
    if (b.sinks) ops::require_buffer(b.sinks, st->sinks_bytes, "sinks", {{Hq}, "f32"});
  }
}

// decode_run's enqueue, for buffers decode_check accepted.
void decode_enqueue(const Context& ctx, const DecodePlan& plan, const DecodeBuffers& b, const Enqueue& e) {
  const DecodePlanState* st = &run_state(plan);
  const int Hq = st->Hq, D = st->D;
  cl_command_queue q = ops::queue_of(ctx, e);
  ops::WaitList wl(e, st->upload);
  if (st->num_work == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  // Unused optional buffers are bound to the plan's table (never read or written).
  cl_mem dummy = st->table;
  cl_mem k_cache = b.k_cache ? b.k_cache : dummy, v_cache = b.v_cache ? b.v_cache : dummy;
  cl_mem page_ids = b.page_ids ? b.page_ids : dummy;
  cl_mem lse = b.lse ? b.lse : dummy, sinks = b.sinks ? b.sinks : dummy;
  const bool i8 = st->cache.dtype == DType::I8 || st->cache.dtype == DType::I4;  // scale caches
  cl_mem k_sc = i8 && b.k_scale_cache ? b.k_scale_cache : dummy, v_sc = i8 && b.v_scale_cache ? b.v_scale_cache : dummy;
  cl_mem ws = st->workspace_bytes > 0 ? b.workspace : dummy;
  const bool merge = st->num_merges > 0;
  auto& c = rt::impl(ctx);
  // The CPU variant's grid puts the head blocks first: a CPU driver walks work-groups in
  // order, so the KV heads of one work item run back to back and share its pages' cache
  // lines, TLB entries and DRAM rows.
  size_t gws[2] = {size_t(st->num_work) * st->wg, size_t(st->Hkv) * size_t(st->n_hblk)};
  if (st->cpu) std::swap(gws[0], gws[1]);
  size_t lws[2] = {st->wg, 1};
  auto launch = [&](int counter_off, cl_uint nwait, const cl_event* wait, cl_event* ev) {
    st->decode_k->launch(q, 2, gws, lws, nwait, wait, ev, b.q, cl_int(st->q_dtype), k_cache, v_cache, page_ids,
                         st->table, cl_int(st->work_off), b.o, cl_int(st->o_dtype), lse, cl_int(b.lse != nullptr), ws,
                         cl_ulong(st->lse_off_floats), sinks, cl_int(b.sinks != nullptr), cl_int(Hq),
                         cl_int(st->group), cl_int(st->n_hblk), cl_long(st->cache.page_stride()),
                         cl_long(st->cache.token_stride()), cl_long(st->cache.head_stride()), cl_int(st->log2_page),
                         cl_int(st->cache.num_pages), cl_float(st->q_scale * b.k_scale), cl_float(st->cap_log2),
                         cl_float(st->inv_cap), cl_float(b.v_scale), st->table, cl_int(st->merge_off),
                         cl_int(counter_off), c.faults, k_sc, v_sc, cl_long(i8 ? st->cache.scale_page_stride() : 0),
                         cl_long(i8 ? st->cache.scale_token_stride() : 0), cl_long(i8 ? st->cache.scale_head_stride() : 0),
                         cl_int(i8 && st->cache.scale_dtype == DType::F16), b.k_head_scales ? b.k_head_scales : dummy,
                         b.v_head_scales ? b.v_head_scales : dummy, cl_int(b.k_head_scales != nullptr));
  };
  cl_event ev1 = nullptr;
  if (st->sets.per_set > 0) {
    st->sets.run(q, wl, e.event, launch);
    return;
  }
  launch(0, wl.size(), wl.data(), ((merge && !st->fuse) || e.event) ? &ev1 : nullptr);
  if (!merge || st->fuse) {
    if (e.event) *e.event = ev1;
    return;
  }
  // (Deterministic plans: the column split, and with it the order the parts add in, from the
  // shape alone, never from the batch.)
  const int cb = ops::merge_col_blocks(rt::impl(ctx).profile, st->deterministic ? 1 : st->num_merges, Hq, D);
  ops::enqueue_merge(q, {st->merge_k, st->merge_wg, st->num_merges, cb, Hq, D, st->table, ws, st->merge_off,
                         uint64_t(st->lse_off_floats)},
                     ev1, e.event, b.o, st->o_dtype, lse, b.lse != nullptr, sinks, b.sinks != nullptr);
}

}  // namespace ops

void decode_run(const Context& ctx, const DecodePlan& plan, const DecodeBuffers& b, const Enqueue& e) {
  ops::decode_check(plan, b);
  ops::decode_enqueue(ctx, plan, b, e);
}
}  // namespace clattn
