// Cascade: a prefix shared by every request of a batch is attended once by all query rows
// (non-causal: every row lies after the prefix), each request's own suffix causally, and
// merge_state combines the two states in place in the caller's output. See docs/extend.md.
#include <algorithm>

#include "backends/ops/op_util.hpp"
#include "backends/ops/extend/check.hpp"
#include "clattn/merge_state.hpp"

namespace clattn {

CascadePlan cascade_plan(const Context& ctx, const PagedCsr& shared, const PagedCsr& unique, const PagedKV& cache,
                         const ExtendOptions& opt, cl_command_queue queue) {
  if (opt.window_left >= 0)
    rt::invalid("cascade: window_left = " + std::to_string(opt.window_left) +
                " unsupported (a window would cut into the shared prefix; use extend_plan)");
  if (!opt.mask_indptr.empty()) rt::invalid("cascade: custom masks unsupported (mask_indptr given; use extend_plan)");
  if (shared.batch_size() != 1 || shared.kv_indptr.size() != 2)
    rt::invalid("cascade: shared prefix CSR has batch_size " + std::to_string(shared.batch_size()) +
                ", needs exactly 1 (the common prefix)");
  if (unique.qo_indptr.size() != size_t(unique.batch_size()) + 1)
    rt::invalid("cascade: unique.qo_indptr has " + std::to_string(unique.qo_indptr.size()) +
                " entries, needs batch_size + 1 = " + std::to_string(unique.batch_size() + 1));
  if (!shared.kv_start_offset.empty() && shared.kv_start_offset[0] != 0)
    rt::invalid("cascade: shared prefix kv_start_offset[0] = " + std::to_string(shared.kv_start_offset[0]) +
                ", must be 0");
  CascadePlan p;
  // The unique level checks qo_len <= kv_len per request, which is exactly "every query
  // row lies in its own suffix", so the non-causal shared level is exact.
  p.unique = extend_plan(ctx, unique, cache, opt, queue);
  const int32_t T = unique.qo_indptr.back();
  ExtendOptions so = opt;
  so.causal = false;
  p.shared = ops::extend_plan_prefix(ctx, shared, T, cache, so, queue);
  p.num_tokens = T;
  const int Hq = opt.num_qo_heads, D = cache.head_dim;
  namespace ck = rt::checked;
  p.tmp_o_bytes = ck::product({T, Hq, D, int64_t(dtype_size(opt.o_dtype))}, "cascade tmp_o bytes");
  p.tmp_lse_bytes = ck::product({T, Hq, 4}, "cascade tmp_lse bytes");
  // One workspace for both levels (TMA maps, a key split's partial states): the shared level runs
  // after the unique one.
  p.workspace_bytes = std::max(p.shared.workspace_bytes, p.unique.workspace_bytes);
  return p;
}

namespace {
// One level's extend buffers: the cache and its scales (int8 row scales, per-head scales) are
// the same for both levels.
ExtendBuffers level(const CascadeBuffers& b, cl_mem page_ids, cl_mem o, cl_mem lse, cl_mem sinks) {
  ExtendBuffers x;
  x.q = b.q, x.k = b.k_cache, x.v = b.v_cache, x.page_ids = page_ids, x.o = o, x.lse = lse, x.sinks = sinks;
  x.k_scale = b.k_scale, x.v_scale = b.v_scale, x.workspace = b.workspace;
  x.k_scale_cache = b.k_scale_cache, x.v_scale_cache = b.v_scale_cache;
  x.k_head_scales = b.k_head_scales, x.v_head_scales = b.v_head_scales;
  return x;
}
}  // namespace

void cascade_run(const Context& ctx, const CascadePlan& p, const CascadeBuffers& b, const Enqueue& e) {
  if (!p.shared.state_ || !p.unique.state_) rt::invalid("cascade_run: empty plan (make one with cascade_plan)");
  const int64_t T = p.num_tokens;
  const int Hq = p.unique.num_qo_heads, D = p.unique.head_dim;
  if (T == 0) {
    extend_run(ctx, p.unique, level(b, b.unique_page_ids, b.o, b.lse, b.sinks), e);
    return;
  }
  ops::require_buffer(b.tmp_o, p.tmp_o_bytes, "tmp_o", {{T, Hq, D}, "o dtype"});
  ops::require_buffer(b.tmp_lse_shared, p.tmp_lse_bytes, "tmp_lse_shared", {{T, Hq}, "f32"});
  if (!b.lse)
    ops::require_buffer(b.tmp_lse_unique, p.tmp_lse_bytes, "tmp_lse_unique", {{T, Hq}, "f32 (lse is null)"});
  cl_mem lse_u = b.lse ? b.lse : b.tmp_lse_unique;
  // The second level's own checks run after the first is enqueued: check its buffers here.
  if (p.shared.page_ids_needed > 0)
    ops::require_buffer(b.shared_page_ids, p.shared.page_ids_needed * 4, "shared_page_ids",
                        {{p.shared.page_ids_needed}, "i32"});
  ops::require_buffer(b.o, p.tmp_o_bytes, "o", {{T, Hq, D}, "o dtype"});
  if (p.workspace_bytes > 0)
    ops::require_buffer(b.workspace, p.workspace_bytes, "workspace",
                        {{p.workspace_bytes}, "bytes (TMA tensor maps or a key split's partial states)"});
  // (The scale checks are the same for both levels: the first level's run makes them.)
  cl_event ev_u = nullptr, ev_s = nullptr;
  try {
    extend_run(ctx, p.unique, level(b, b.unique_page_ids, b.o, lse_u, b.sinks),
               Enqueue{e.queue, e.num_wait, e.wait, &ev_u});
    // Levels that share the workspace's maps run one after the other (out-of-order queues).
    const bool chain = p.shared.workspace_bytes > 0 && p.unique.workspace_bytes > 0;
    extend_run(ctx, p.shared, level(b, b.shared_page_ids, b.tmp_o, b.tmp_lse_shared, nullptr),
               chain ? Enqueue{e.queue, 1, &ev_u, &ev_s} : Enqueue{e.queue, e.num_wait, e.wait, &ev_s});
    cl_event both[2] = {ev_u, ev_s};
    MergeStateArgs m;
    m.v_a = b.o, m.s_a = lse_u, m.v_b = b.tmp_o, m.s_b = b.tmp_lse_shared, m.v_out = b.o, m.s_out = lse_u;
    m.num_tokens = int(T), m.num_heads = Hq, m.head_dim = D, m.dtype = p.unique.o_dtype;
    merge_state(ctx, m, Enqueue{e.queue, 2, both, e.event});
  } catch (...) {
    if (ev_u) clReleaseEvent(ev_u);
    if (ev_s) clReleaseEvent(ev_s);
    throw;
  }
  clReleaseEvent(ev_u);
  clReleaseEvent(ev_s);
}

}  // namespace clattn
