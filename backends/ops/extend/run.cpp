// Extend runs: buffer-size checks, then enqueue only.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/ops/extend/extend_impl.hpp"

namespace clattn {

using namespace ops::extend;

void extend_run(const Context& ctx, const ExtendPlan& plan, const ExtendBuffers& b, const Enqueue& e) {
  const ExtendPlanState* st = plan.state_.get();
  if (!st) rt::invalid("extend_run: empty plan (make one with extend_plan or prefill_plan)");
  if (!(b.k_scale > 0.0f) || !std::isfinite(b.k_scale) || !(b.v_scale > 0.0f) || !std::isfinite(b.v_scale))
    rt::invalid("extend_run: k_scale/v_scale must be finite and > 0 (got " + to_string(b.k_scale) + ", " +
                to_string(b.v_scale) + ")");
  ops::check_kv_scales(st->scales_of, b.k_scale, b.v_scale, b.k_head_scales, b.v_head_scales, "extend_run");
  const int64_t T = st->T;
  const int Hq = st->Hq, D = st->D;
  const bool paged = st->source != ExtendPlan::Source::Ragged;
  cl_command_queue q = ops::queue_of(ctx, e);
  if (T > 0) {
    ops::require_buffer(b.q, st->q_bytes, "q", {{T, Hq, D}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.o, st->o_bytes, "o", {{T, Hq, D}, dtype_name(st->o_dtype)});
    if (b.lse) ops::require_buffer(b.lse, st->lse_bytes, "lse", {{T, Hq}, "f32"});
    if (b.sinks) ops::require_buffer(b.sinks, st->sinks_bytes, "sinks", {{Hq}, "f32"});
    if (st->kv_bytes > 0) {
      const ops::Shape kv = paged ? ops::Shape{{st->num_pages, st->Hkv, D}, dtype_name(st->kv_dtype), "paged cache "}
                                  : ops::Shape{{st->Hkv, D}, dtype_name(st->kv_dtype), "ragged K/V rows of "};
      ops::require_buffer(b.k, st->kv_bytes, "k", kv);
      ops::require_buffer(b.v, st->kv_bytes, "v", kv);
      if (paged) ops::require_scale_caches(st->scales_of, st->scale_bytes, b.k_scale_cache, b.v_scale_cache);
    }
    if (paged && st->page_id_bytes > 0)
      ops::require_buffer(b.page_ids, st->page_id_bytes, "page_ids",
                          {{st->page_id_bytes / 4}, "i32",
                           st->source == ExtendPlan::Source::PageTable ? "page_table " : "kv_indices "});
    if (st->has_mask)
      ops::require_buffer(b.custom_mask, st->mask_bytes, "custom_mask", {{st->mask_bytes}, "packed bytes (mask_indptr[B])"});
    if (st->workspace_bytes > 0)
      ops::require_buffer(b.workspace, st->workspace_bytes, "workspace",
                          {{st->workspace_bytes}, "bytes (ExtendPlan::workspace_bytes: nv_wgmma's TMA tensor maps "
                                                  "or a key split's partial states)"});
  }
  ops::WaitList wl(e, st->upload);
  if (st->num_tiles == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  auto& c = rt::impl(ctx);
  cl_mem dummy = st->table;  // unused optional buffers are bound to the plan's table
  cl_mem k = b.k ? b.k : dummy, v = b.v ? b.v : dummy;
  cl_mem page_ids = b.page_ids ? b.page_ids : dummy;
  cl_mem lse = b.lse ? b.lse : dummy, sinks = b.sinks ? b.sinks : dummy;
  cl_mem mask = st->has_mask ? b.custom_mask : dummy;
  cl_mem tmaps = st->workspace_bytes > 0 ? b.workspace : dummy;  // (a split plan's partial states)
  const bool quant = st->kv_dtype == DType::I8 || st->kv_dtype == DType::I4;
  cl_mem k_sc = quant && b.k_scale_cache ? b.k_scale_cache : dummy;
  cl_mem v_sc = quant && b.v_scale_cache ? b.v_scale_cache : dummy;
  cl_mem k_hs = b.k_head_scales ? b.k_head_scales : dummy, v_hs = b.v_head_scales ? b.v_head_scales : dummy;
  size_t gws[2] = {size_t(st->num_tiles) * st->wg, size_t(st->Hkv)};
  size_t lws[2] = {st->wg, 1};
  // TMA: the tensor-map kernel first (it writes the maps of this k and v into the workspace).
  cl_event maps_done = nullptr;
  if (st->maps_kernel) {
    const size_t one = 32;
    st->maps_kernel->launch(q, 1, &one, &one, wl.size(), wl.data(), &maps_done, k, v, tmaps, st->map_dims[0],
                            st->map_dims[1], st->map_dims[2], st->map_dims[3], st->map_strides[0],
                            st->map_strides[1], st->map_strides[2], st->map_box[0], st->map_box[1]);
  }
  // A key split: the merge pass after the kernel, ordered by its event.
  cl_event attn_done = nullptr;
  cl_event* attn_event = st->num_merges > 0 ? &attn_done : e.event;
  try {
    st->kernel->launch(q, 2, gws, lws, maps_done ? 1 : wl.size(), maps_done ? &maps_done : wl.data(), attn_event, b.q,
                       cl_int(st->q_dtype), k, v, page_ids, st->table, b.o, cl_int(st->o_dtype), lse,
                       cl_int(b.lse != nullptr), sinks, cl_int(b.sinks != nullptr), mask, cl_int(st->has_mask),
                       cl_int(Hq), cl_int(st->group), cl_int(st->paged), cl_int(st->page_size),
                       cl_long(st->stride_page), cl_long(st->stride_token), cl_long(st->stride_head),
                       cl_float(st->q_scale * b.k_scale), cl_float(st->cap_log2), cl_float(st->inv_cap),
                       cl_float(b.v_scale), cl_int(st->causal), cl_int(st->window_left), cl_int(st->num_pages),
                       c.faults, tmaps, k_sc, v_sc, cl_long(st->sc_page), cl_long(st->sc_token), cl_long(st->sc_head),
                       cl_int(st->sc_f16), k_hs, v_hs, cl_int(b.k_head_scales != nullptr), tmaps,
                       cl_ulong(st->lse_off_floats), cl_int(st->split_off));
  } catch (...) {
    if (maps_done) clReleaseEvent(maps_done);
    throw;
  }
  if (maps_done) clReleaseEvent(maps_done);
  if (st->num_merges == 0) return;
  const int cb = ops::merge_col_blocks(c.profile, st->num_merges, Hq, D);
  ops::enqueue_merge(q, {st->merge_k, st->merge_wg, st->num_merges, cb, Hq, D, st->table, tmaps, st->merge_off,
                         uint64_t(st->lse_off_floats)},
                     attn_done, e.event, b.o, st->o_dtype, lse, b.lse != nullptr, sinks, b.sinks != nullptr);
}

}  // namespace clattn
