// MLA plans: checks, metadata validation, the work list (decode split-K through the
// planner, extend blocks of query vectors cut by key where a device bounds a work-item's
// loops), the merge entries, the kernel choice and one non-blocking upload of the table.
#include <algorithm>
#include <climits>

#include "backends/ops/mla/mla_impl.hpp"
#include "backends/ops/merge_state.hpp"
#include "backends/params/param_names.hpp"
#include "backends/planner/split_kv.hpp"
#include "clattn/sparse.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace ops::mla {

using detail::MlaPlanState;
using std::to_string;

MlaPlan make_plan(const Context& ctx, const Requests& r, bool page_table, bool extend, const MlaCache& cache,
                  const MlaOptions& opt, cl_command_queue queue, int topk) {
  auto& c = rt::impl(ctx);
  const bool sparse = topk > 0;
  const std::string op = extend ? "mla_extend" : "mla_decode";
  params::check_param_names({op}, opt.params, "MlaOptions::params");
  const int B = int(r.kv_len.size()), H = opt.num_heads;
  Tile tile = choose_tile(c.profile, cache, opt, extend, ops::preferred_float_width(c), ops::fp32_denorms(c));
  auto st = std::make_shared<MlaPlanState>();
  MlaPlan plan;
  plan.extend = extend;
  plan.batch_size = B;
  plan.num_heads = H;
  plan.num_tokens = r.num_tokens;
  plan.cache = cache;
  plan.q_dtype = opt.q_dtype;
  plan.o_dtype = opt.o_dtype;
  plan.page_table = page_table;
  plan.page_ids_needed = r.page_ids_needed;
  plan.topk = topk;

  // (A device that bounds a work-item's loops merges in the separate pass: the fused merge's
  // loops would come out of every work item's budget.)
  if (c.profile.loop_trip_limit > 0) tile.fuse_merge = false;
  const bool fuse = !extend && tile.fuse_merge;  // decode only: an extend split merges apart
  ops::BuiltVariant built = ops::select_and_build(c, op, variants(c.profile, tile, cache, extend, sparse));
  st->prog = built.program;
  st->attn_k = built.kernel;
  st->wg = built.variant.wg;
  plan.variant = built.variant.name;
  plan.kernel_options = built.variant.options;
  const bool mma = plan.variant == "nv_mma_sync", cpu = plan.variant == "cpu";
  st->fuse_kernel = mma && fuse;

  std::vector<int32_t>& h = st->host;
  auto push = [&h](int32_t kb, int32_t ke, int32_t part, int32_t pb, int32_t row0, int32_t nrows, int32_t vbeg,
                   int32_t cbase) {
    h.insert(h.end(), {kb, ke, part, pb, row0, nrows, vbeg, cbase});
  };
  std::vector<planner::MergeItem> merges;
  std::vector<int32_t> merge_stride;  // per merge entry: its parts' row stride (extend splits; else 1)
  // Work entries: blocks of the chosen kernel's query vectors; KV chunks aligned to its tile.
  // MMA: one m-tile (H < 16: masked rows).
  const int qb = ops::knob(built.variant.tile, "QB", 1), align = ops::knob(built.variant.tile, "KEYS", 16);
  // A device that bounds a work-item's loops: no work entry covers more keys than that allows.
  const int64_t max_keys = ops::max_keys_per_item(c.profile, built.variant.trips_fixed, built.variant.trips_per_key,
                                                  op + " variant " + plan.variant);
  if (!extend) {
    const int n_hblk = (H + qb - 1) / qb;
    st->n_hblk = n_hblk;
    planner::SplitKVConfig cfg;
    cfg.units_per_item = n_hblk;
    cfg.max_concurrent = int64_t(std::max(1u, c.profile.compute_units)) * tile.wgs_per_cu;
    cfg.min_chunk = tile.min_chunk;
    cfg.max_splits = opt.max_splits ? opt.max_splits : tile.max_splits;
    cfg.align = align;
    cfg.max_chunk = max_keys;
    while (max_keys > 0 && cfg.align > max_keys && cfg.align > 1) cfg.align /= 2;
    std::vector<int32_t> begin(size_t(B), 0);
    // Sparse: the key range is the request's index list (none for a request without keys);
    // causal_base stays kv_len - 1, the last position an index may name.
    std::vector<int32_t> keys = r.kv_len;
    if (sparse)
      for (int32_t& k : keys) k = k > 0 ? topk : 0;
    planner::SplitKVPlan sk = planner::plan_split_kv(begin.data(), keys.data(), B, cfg);
    for (const auto& w : sk.work)
      for (int hb = 0; hb < n_hblk; ++hb)
        push(w.begin, w.end, w.part, r.page_base[size_t(w.req)], r.qo_start[size_t(w.req)], 1, hb * qb,
             r.kv_len[size_t(w.req)] - 1);
    merges = sk.merges;
    plan.num_partials = sk.num_partials;
    plan.chunk_tokens = sk.chunk;
  } else {
    // Extend: one entry per block of query vectors over its keys; where a device bounds a
    // work-item's loops, a request with more keys than that is cut into parts of whole chunks
    // (part p of token j: partial row first + p x qo_len + j), each token's parts merged as one
    // entry (stride qo_len).
    for (int i = 0; i < B; ++i) {
      const int64_t nv = int64_t(r.qo_len[i]) * H;
      const int32_t kv = r.kv_len[i], ql = r.qo_len[i];
      const int32_t cbase = opt.causal ? kv - ql : INT_MAX / 2;
      // (Chunks as decode's split cuts them under the same bound: a one-row extend is decode's bits.)
      const int64_t bound = max_keys > 0 ? planner::bounded_chunk(max_keys, align) : 0;
      const int np = bound > 0 && kv > bound ? int(rt::checked::ceil_div(kv, bound)) : 1;
      if (np > 256)
        throw Error(Status::Unsupported, op + ": request " + to_string(i) + " has " + to_string(kv) +
                                             " keys; the device's loop-trip limit allows " + to_string(max_keys) +
                                             " per work entry and the merge 256 parts (docs/portability.md)");
      const int32_t chunk = np > 1 ? int32_t(bound) : kv, first = plan.num_partials;
      if (np > 1) {
        plan.num_partials = rt::checked::to_i32(int64_t(first) + int64_t(np) * ql, "MLA extend partial states");
        for (int32_t j = 0; j < ql; ++j) merges.push_back({r.qo_start[i] + j, first + j, np});
      }
      for (int64_t vb = 0; vb < nv; vb += qb) {
        const int32_t last_row = int32_t((std::min<int64_t>(nv, vb + qb) - 1) / H);
        const int32_t ke = opt.causal ? std::min(kv, kv - ql + last_row + 1) : kv;
        for (int p = 0; p < np; ++p)
          push(np > 1 ? p * chunk : 0, np > 1 ? std::min(ke, (p + 1) * chunk) : ke, np > 1 ? first + p * ql : -1,
               r.page_base[i], r.qo_start[i], ql, int32_t(vb), cbase);
      }
      if (np > 1) merge_stride.resize(merges.size(), ql);
    }
  }
  plan.num_work = int(h.size() / 8);
  plan.num_merges = int(merges.size());
  st->work_off = 0;
  st->merge_off = int(h.size());
  merge_stride.resize(merges.size(), 1);
  for (size_t m = 0; m < merges.size(); ++m)
    h.insert(h.end(), {merges[m].req, merges[m].first, merges[m].count, merge_stride[m]});
  int max_parts = 0;
  for (const auto& m : merges) max_parts = std::max(max_parts, m.count);
  if (max_parts > 256)
    throw Error(Status::Unsupported, op + ": a request needs " + to_string(max_parts) + " parts of at most " +
                                         to_string(max_keys) + " keys (the device's loop-trip limit); the merge takes 256");
  st->fuse = st->fuse_kernel && max_parts <= tile.fuse_max_parts;
  if (st->fuse) {
    st->pmap_off = int(h.size());
    h.resize(h.size() + size_t(plan.num_partials), 0);
    for (size_t m = 0; m < merges.size(); ++m)
      for (int p = 0; p < merges[m].count; ++p) h[size_t(st->pmap_off + merges[m].first + p)] = int32_t(m);
    st->sets.base = int(h.size());
    st->sets.per_set = rt::checked::to_i32(int64_t(merges.size()) * st->n_hblk, "merge counters");
    h.resize(h.size() + size_t(ops::CounterSets::kSets) * size_t(st->sets.per_set), 0);
  }
  planner::WorkspaceLayout ws = planner::workspace_layout(plan.num_partials, H, kMlaCkvDim);
  plan.workspace_bytes = ws.bytes;
  st->lse_off_floats = ws.lse_offset_bytes / 4;

  const int64_t es = int64_t(dtype_size(cache.dtype));
  st->ckv_sp = cache.ckv_page_stride() * es / 4, st->ckv_st = cache.ckv_token_stride() * es / 4;
  st->kpe_sp = cache.kpe_page_stride() * es / 4, st->kpe_st = cache.kpe_token_stride() * es / 4;
  st->kpe_base = cache.kpe_base() * es / 4;
  st->log2_page = log2_int(cache.page_size);
  st->q_scale = ops::score_scale(opt.sm_scale, 0.0f, kMlaCkvDim).q_scale;
  if (plan.num_merges > 0 && !st->fuse) {
    auto mp = ops::merge_program(c);
    st->merge_prog = mp.program;
    st->merge_wg = mp.wg;
    st->merge_k = &mp.program->kernel("merge_partials");
  }
  st->freeze(plan);
  plan.table_bytes = st->upload_host(c, queue, "mla plan table", opt.plan_buffer);
  // lanes = tokens per tile (LANES, KT for tiled, MMA_KEYS for nv_mma_sync, whose loads are 8
  // values: 16 bytes, 8 for fp8; BK for cpu, whose loads are VW values).
  plan.tile = mma   ? MlaPlan::Tile{qb, align, int(st->wg), int(8 * es)}
              : cpu ? MlaPlan::Tile{qb, align, int(st->wg), int(tile.vw * es)}
                    : MlaPlan::Tile{qb, align, int(st->wg), tile.load_bytes};
  rt::log().debug("{} plan: B={} T={} H={} P={} latent={} variant={} QB={} LANES={} WG={} LOAD={} ({}); {} work "
                  "entries, chunk {}, {} partials, {} merges, workspace {} B",
                  sparse ? "mla_sparse_decode" : op, B, r.num_tokens, H, cache.page_size, dtype_name(cache.dtype),
                  plan.variant, plan.tile.qb, plan.tile.lanes, plan.tile.wg, plan.tile.load_bytes, tile.source, plan.num_work, plan.chunk_tokens,
                  plan.num_partials, plan.num_merges, plan.workspace_bytes);
  plan.state_ = st;
  return plan;
}


}  // namespace ops::mla

namespace {
using namespace ops::mla;
using std::to_string;
// Decode or extend from CSR or page-table metadata.
template <class Meta>
MlaPlan plan_of(const Context& ctx, const Meta& m, bool extend, const MlaCache& cache, const MlaOptions& opt,
                cl_command_queue queue, int topk = 0) {
  check_options(cache, opt);
  constexpr bool table = std::is_same_v<Meta, PageTable>;
  meta::KVRequests r;
  if constexpr (table) r = requests_from_table(m, cache, opt, extend);
  else r = requests_from_csr(m, cache, opt, extend);
  return make_plan(ctx, r, table, extend, cache, opt, queue, topk);
}
}  // namespace

MlaPlan mla_decode_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt,
                        cl_command_queue queue) {
  return plan_of(ctx, csr, false, cache, opt, queue);
}
MlaPlan mla_decode_plan(const Context& ctx, const PageTable& table, const MlaCache& cache, const MlaOptions& opt,
                        cl_command_queue queue) {
  return plan_of(ctx, table, false, cache, opt, queue);
}
MlaPlan mla_extend_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt,
                        cl_command_queue queue) {
  return plan_of(ctx, csr, true, cache, opt, queue);
}
MlaPlan mla_extend_plan(const Context& ctx, const PageTable& table, const MlaCache& cache, const MlaOptions& opt,
                        cl_command_queue queue) {
  return plan_of(ctx, table, true, cache, opt, queue);
}

namespace {
template <class Meta>
MlaPlan sparse_plan_of(const Context& ctx, const Meta& m, const MlaCache& cache, const MlaOptions& opt, int topk,
                       cl_command_queue queue) {
  if (topk < 1 || topk > kDsaMaxTopk)
    rt::invalid("topk = " + to_string(topk) + ": sparse MLA decode takes 1.." + to_string(kDsaMaxTopk) +
                " index entries per request");
  return plan_of(ctx, m, false, cache, opt, queue, topk);
}
}  // namespace

MlaPlan mla_sparse_decode_plan(const Context& ctx, const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt,
                               int topk, cl_command_queue queue) {
  return sparse_plan_of(ctx, csr, cache, opt, topk, queue);
}
MlaPlan mla_sparse_decode_plan(const Context& ctx, const PageTable& table, const MlaCache& cache,
                               const MlaOptions& opt, int topk, cl_command_queue queue) {
  return sparse_plan_of(ctx, table, cache, opt, topk, queue);
}

}  // namespace clattn
