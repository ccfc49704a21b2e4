// Paged decode plans: checks, metadata validation, the split-K work list, the kernel choice
// and one non-blocking upload of the table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backends/ops/decode/decode_impl.hpp"

namespace clattn {
namespace ops::decode {

Requests key_ranges(meta::KVRequests&& kv, int window_left) {
  Requests r;
  r.end = std::move(kv.kv_len), r.page_base = std::move(kv.page_base), r.tok_off = std::move(kv.tok_off);
  r.page_ids_needed = kv.page_ids_needed;
  r.begin.resize(r.end.size());
  for (size_t i = 0; i < r.end.size(); ++i) r.begin[i] = window_left >= 0 ? std::max(0, r.end[i] - 1 - window_left) : 0;
  return r;
}

meta::RequestOptions request_options(const DecodeOptions& opt) {
  meta::RequestOptions o;
  o.queries = meta::Queries::Decode, o.validate = opt.validate;
  return o;
}

void check_options(const PagedKV& cache, const DecodeOptions& opt) {
  ops::check_paged_kv(cache, "cache", true, true);
  ops::check_attention_options({opt.num_qo_heads, cache.num_kv_heads, cache.head_dim, opt.q_dtype, opt.o_dtype,
                                opt.sm_scale, opt.logits_soft_cap, opt.window_left});
  if (!is_pow2(cache.page_size) || cache.page_size > 256)
    throw Error(Status::Unsupported, "cache.page_size = " + std::to_string(cache.page_size) +
                                         " unsupported (powers of two 1..256: 1, 8, 16, 32, 64, 128 tested)");
  if (opt.max_splits < 0) rt::invalid("max_splits = " + std::to_string(opt.max_splits) + ", must be >= 0");
  if (opt.split_tokens < 0) rt::invalid("split_tokens = " + std::to_string(opt.split_tokens) + ", must be >= 0");
}

void fill_scales(DecodePlanState& st, const PagedKV& cache, const DecodeOptions& opt) {
  const ops::ScoreScale s = ops::score_scale(opt.sm_scale, opt.logits_soft_cap, cache.head_dim);
  st.q_scale = s.q_scale, st.cap_log2 = s.cap_log2, st.inv_cap = s.inv_cap;
}

// Sparse decode: the work items of every key range of request b write partial states of b,
// merged together (a request with one item writes o directly); items name b, not the range.
void merge_by_owner(planner::SplitKVPlan& sk, const std::vector<int32_t>& owner, int B) {
  std::vector<std::vector<int>> items(static_cast<size_t>(B));
  for (size_t w = 0; w < sk.work.size(); ++w) items[size_t(owner[size_t(sk.work[w].req)])].push_back(int(w));
  sk.merges.clear();
  int parts = 0;
  for (int b = 0; b < B; ++b) {
    const std::vector<int>& it = items[size_t(b)];
    const int n = int(it.size());
    if (n > kMaxMergeParts) rt::invalid("sparse decode: " + std::to_string(n) + " parts for request " + std::to_string(b));
    for (int j = 0; j < n; ++j) {
      auto& wi = sk.work[size_t(it[size_t(j)])];
      wi.req = b;
      wi.part = n == 1 ? -1 : parts + j;
    }
    if (n > 1) {
      sk.merges.push_back({b, parts, n});
      parts += n;
    }
  }
  sk.num_partials = parts;
}

// A fixed-capacity plan's work list before its first refresh: cap requests of nmax slots
// each, all unused (req -1), merge entry r for request r's partial rows r * nmax ...; the
// deterministic split's chunk (cfg) and the largest number of chunks a request can need.
planner::SplitKVPlan fixed_split(const DecodeCapacity& cap, int page_size, const planner::SplitKVConfig& cfg,
                                 DecodePlanState::Fixed* fx) {
  namespace ck = rt::checked;
  const int64_t max_keys = ck::mul(cap.max_pages, page_size, "decode_plan_fixed: max_pages x page_size");
  fx->max_keys = ck::to_i32(max_keys, "decode_plan_fixed: max_pages x page_size");
  fx->align = std::max(1, cfg.align);
  int64_t c = planner::deterministic_chunk(cfg);
  int64_t splits = std::max(1, cfg.max_splits);
  // Under a loop-trip limit no work item may cover more than max_chunk keys: as many parts as
  // the longest request then needs (within what the merge takes).
  if (cfg.max_chunk > 0 && c > cfg.max_chunk) c = std::max<int64_t>(fx->align, cfg.max_chunk / fx->align * fx->align);
  if (cfg.max_chunk > 0) splits = std::max<int64_t>(splits, (max_keys + c - 1) / c);
  if (splits > kMaxMergeParts)
    throw Error(Status::Unsupported, "decode_plan_fixed: max_pages x page_size = " + std::to_string(max_keys) +
                                         " keys need " + std::to_string(splits) + " parts of " + std::to_string(c) +
                                         " (the device's loop-trip limit), the merge takes " +
                                         std::to_string(kMaxMergeParts));
  fx->max_splits = int(splits);
  const bool split = fx->max_splits > 1 && c < max_keys;
  fx->chunk = split ? int(c) : std::max(fx->max_keys, 1);
  fx->nmax = split ? int(std::min<int64_t>(fx->max_splits, (max_keys + c - 1) / c)) : 1;
  planner::SplitKVPlan sk;
  const int64_t items = ck::mul(cap.max_batch, fx->nmax, "decode_plan_fixed: work slots");
  ck::to_i32(ck::mul(items, 8, "decode_plan_fixed: work table"), "decode_plan_fixed: work table");
  sk.work.assign(size_t(items), planner::WorkItem{-1, 0, 0, -1});
  if (fx->nmax > 1) {
    for (int r = 0; r < cap.max_batch; ++r) sk.merges.push_back({r, r * fx->nmax, 0});
    sk.num_partials = int(items);
    sk.chunk = fx->chunk;
  }
  return sk;
}

DecodePlan make_plan(const Context& ctx, const Requests& r, bool page_table, const PagedKV& cache,
                     const DecodeOptions& opt, cl_command_queue queue, const DecodeCapacity* fixed = nullptr) {
  auto& c = rt::impl(ctx);
  params::check_param_names({"decode"}, opt.params, "DecodeOptions::params");
  const int NV = int(r.end.size());        // key ranges (one per request for dense decode)
  const int B = r.sparse ? r.batch : NV;
  const int group = opt.num_qo_heads / cache.num_kv_heads;
  SplitParams sp;
  // Per-query-head lists: one query head per work-group (GMAX 1, a head block per head).
  KTile tile = choose_tile(c.profile, cache, r.sparse == 2 ? 1 : group, opt.params, &sp, ops::preferred_float_width(c));
  if (r.sparse == 2) tile.gmax = 1, tile.n_hblk = group, tile.group = group;
  tile.sparse = r.sparse;
  // Where a work-item's loops are bounded, the separate merge pass merges (the fused one's
  // loops over up to 256 parts would come out of every work item's budget).
  if (c.profile.loop_trip_limit > 0) tile.fuse_merge = 0;

  DecodePlanState::Fixed fx;
  fx.window_left = opt.window_left, fx.max_pages = fixed ? fixed->max_pages : 0;
  // The split for a tile: its work-groups per item and token alignment, and at most
  // max_chunk keys per work item (the device's loop-trip limit; 0: none).
  std::vector<int32_t> range_of;  // work item -> its key range
  auto split = [&](const KTile& t, int64_t max_chunk) {
    planner::SplitKVConfig cfg;
    cfg.units_per_item = int64_t(cache.num_kv_heads) * t.n_hblk;
    cfg.max_concurrent = int64_t(std::max(1u, c.profile.compute_units)) * sp.wgs_per_cu;
    cfg.min_chunk = sp.min_chunk;
    // Sparse: a request's ranges (window, selected pages) share one merge.
    cfg.max_splits = std::min(r.sparse ? kMaxMergeParts / 2 : kMaxMergeParts, opt.max_splits ? opt.max_splits : sp.max_splits);
    cfg.align = std::max(16, t.cpu ? t.unroll : (t.wg / t.tpt) * t.unroll);
    cfg.deterministic = opt.deterministic;
    cfg.fixed_chunk = opt.split_tokens ? opt.split_tokens : sp.det_chunk;
    cfg.max_chunk = max_chunk;
    // A loop-trip bound below the alignment: chunks of fewer keys (a power of two), masked in
    // the kernel's tile steps like any short range.
    while (max_chunk > 0 && cfg.align > max_chunk && cfg.align > 1) cfg.align /= 2;
    planner::SplitKVPlan sk = fixed ? fixed_split(*fixed, cache.page_size, cfg, &fx)
                                    : planner::plan_split_kv(r.begin.data(), r.end.data(), NV, cfg);
    range_of.resize(sk.work.size());
    for (size_t w = 0; w < sk.work.size(); ++w) range_of[w] = sk.work[w].req;
    if (r.sparse) merge_by_owner(sk, r.owner, B);
    for (const auto& m : sk.merges)
      if (m.count > kMaxMergeParts)
        throw Error(Status::Unsupported, "decode: request " + std::to_string(m.req) + " needs " +
                                             std::to_string(m.count) + " parts of at most " + std::to_string(max_chunk) +
                                             " keys (the device's loop-trip limit), the merge takes " +
                                             std::to_string(kMaxMergeParts));
    return sk;
  };
  // The fused merge only for plans that split: its code slows the unsplit kernel
  // (docs/results-h100.md), and a plan without merges never uses it. A separate program,
  // cached like any other. PREFETCH doubles the K/V registers: it pays where the planner
  // sized a split grid to one wave (each work-group's latency is the time), not for big
  // unsplit batches, which need the occupancy (docs/results-h100.md). (int8 / int4: the
  // scales ride the plain path)
  const KTile asked = tile;
  auto flags = [&](KTile& t, const planner::SplitKVPlan& sk) {
    t.fuse_merge = sk.merges.empty() ? 0 : asked.fuse_merge;
    t.prefetch = sk.merges.empty() || r.sparse || cache.dtype == DType::I8 || cache.dtype == DType::I4 ? 0 : asked.prefetch;
  };
  planner::SplitKVPlan sk = split(tile, 0);
  flags(tile, sk);

  // The kernel, then the work list for the tile that was built: a shrunk build has fewer
  // work-groups' worth of slots or head blocks, and a device with a loop-trip limit bounds the
  // keys of a work item (a build with other merge flags follows where that changes the split).
  auto st = std::make_shared<DecodePlanState>();
  DecodePlan plan;
  ops::DecodeCheckCase k;
  k.cache = cache, k.group = group, k.q_dtype = opt.q_dtype, k.o_dtype = opt.o_dtype, k.params = opt.params;
  k.split = !sk.merges.empty();
  KTile built = build_kernels(ctx, tile, cache, k, *st, plan);
  const int64_t max_chunk =
      ops::max_keys_per_item(c.profile, built.trips_fixed, built.trips_per_key, "decode variant " + plan.variant);
  if (max_chunk > 0 || built.n_hblk != tile.n_hblk || built.wg != tile.wg || built.unroll != tile.unroll) {
    sk = split(built, max_chunk);
    KTile again = built;
    flags(again, sk);
    if (again.fuse_merge != built.fuse_merge || again.prefetch != built.prefetch) {
      k.split = !sk.merges.empty();
      built = build_kernels(ctx, again, cache, k, *st, plan);
    }
  }
  tile = built;
  planner::WorkspaceLayout ws = planner::workspace_layout(sk.num_partials, opt.num_qo_heads, cache.head_dim);
  // Sparse: the page lists follow the partial states in the workspace (sparse_lists_offset),
  // which is also the run's page_ids buffer.
  int64_t page_ids_needed = r.page_ids_needed;
  int32_t lists_off = 0;
  if (r.sparse) {
    lists_off = ops::sparse_lists_offset(sk.num_partials, opt.num_qo_heads, cache.head_dim);
    page_ids_needed = rt::checked::add(page_ids_needed, int64_t(lists_off), "sparse decode page lists");
    ws.bytes = rt::checked::mul(page_ids_needed, int64_t(4), "sparse decode workspace bytes");
  }

  plan.batch_size = B;
  plan.num_qo_heads = opt.num_qo_heads;
  plan.num_kv_heads = cache.num_kv_heads;
  plan.head_dim = cache.head_dim;
  plan.page_size = cache.page_size;
  plan.cache = cache;
  plan.q_dtype = opt.q_dtype;
  plan.o_dtype = opt.o_dtype;
  plan.page_table = page_table;
  plan.page_ids_needed = page_ids_needed;
  plan.num_work = int(sk.work.size());
  plan.num_partials = sk.num_partials;
  plan.num_merges = int(sk.merges.size());
  plan.chunk_tokens = sk.chunk;
  plan.workspace_bytes = ws.bytes;

  st->group = group;
  st->deterministic = opt.deterministic;
  st->gmax = tile.gmax;
  st->n_hblk = tile.n_hblk;
  st->log2_page = log2_int(cache.page_size);
  st->lse_off_floats = ws.lse_offset_bytes / 4;
  fill_scales(*st, cache, opt);
  st->work_off = 0;
  st->merge_off = 8 * plan.num_work;
  st->fuse = tile.fuse_merge != 0;
  st->prefetch = tile.prefetch != 0;
  // Fused merge: one zeroed counter per (merge entry, KV head x head block) in each set.
  st->sets.base = st->merge_off + 4 * plan.num_merges;
  st->sets.per_set =
      st->fuse ? rt::checked::to_i32(int64_t(plan.num_merges) * cache.num_kv_heads * tile.n_hblk, "merge counters") : 0;
  st->host.assign(size_t(st->sets.base) + size_t(ops::CounterSets::kSets) * size_t(st->sets.per_set), 0);
  st->extra_off = int32_t(st->host.size());  // the sparse caller's table rows follow
  st->host.insert(st->host.end(), r.extra.begin(), r.extra.end());
  std::vector<int32_t> merge_of(size_t(B), -1);
  for (int m = 0; m < plan.num_merges; ++m) merge_of[size_t(sk.merges[size_t(m)].req)] = m;
  for (int w = 0; w < plan.num_work; ++w) {
    const auto& it = sk.work[size_t(w)];
    int32_t* e = &st->host[size_t(8) * w];
    if (it.req < 0) {  // a fixed plan's unused slot
      e[0] = -1, e[3] = -1;
      continue;
    }
    const size_t kr = size_t(range_of[size_t(w)]);
    e[0] = it.req, e[1] = it.begin, e[2] = it.end, e[3] = it.part;
    e[4] = r.page_base[kr] + lists_off, e[5] = r.tok_off[kr];
    e[6] = it.part >= 0 ? merge_of[size_t(it.req)] : 0, e[7] = r.lstride.empty() ? 0 : r.lstride[kr];
  }
  for (int m = 0; m < plan.num_merges; ++m) {
    const auto& it = sk.merges[size_t(m)];
    int32_t* e = &st->host[size_t(st->merge_off) + size_t(4) * m];
    e[0] = it.req, e[1] = it.first, e[2] = it.count, e[3] = 0;
  }

  if (fixed) {
    st->fixed = true, st->fx = fx;
    st->refresh_prog = c.programs.get("metadata.cl", rt::make_options({}));
    st->refresh_k = &st->refresh_prog->kernel("refresh_decode_work");
    plan.fixed = true;
  }
  st->freeze(plan);
  plan.table_bytes = st->upload_host(c, queue, "decode plan table", opt.plan_buffer);
  plan.state_ = st;
  // The tile of the variant that was built (the cpu variant: one work-item per group).
  plan.tile = {int(st->wg), st->cpu ? 1 : tile.tpt, tile.gmax, tile.unroll, tile.load_bytes, tile.n_hblk};
  rt::log().debug(
      "decode plan: B={} Hq={} Hkv={} D={} P={} kv={} variant={} WG={} TPT={} GMAX={} x{} UNROLL={} LOAD={} "
      "({}); {} work items, chunk {}, {} partials, {} merges, workspace {} B",
      B, opt.num_qo_heads, cache.num_kv_heads, cache.head_dim, cache.page_size, dtype_name(cache.dtype), plan.variant,
      plan.tile.wg, plan.tile.tpt, plan.tile.gmax, plan.tile.head_blocks, plan.tile.unroll, plan.tile.load_bytes,
      tile.source, plan.num_work, plan.chunk_tokens, plan.num_partials, plan.num_merges, plan.workspace_bytes);
  return plan;
}


}  // namespace ops::decode

using namespace ops::decode;

namespace {
// From CSR or page-table metadata (meta::requests_of).
template <class Meta>
DecodePlan plan_of(const Context& ctx, const Meta& m, const PagedKV& cache, const DecodeOptions& opt,
                   cl_command_queue queue) {
  check_options(cache, opt);
  constexpr bool table = std::is_same_v<Meta, PageTable>;
  const CacheShape shape{cache.num_pages, cache.page_size};
  meta::KVRequests kv = meta::requests_of(m, shape, request_options(opt));
  return make_plan(ctx, key_ranges(std::move(kv), opt.window_left), table, cache, opt, queue);
}
}  // namespace

DecodePlan decode_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache, const DecodeOptions& opt,
                       cl_command_queue queue) {
  return plan_of(ctx, csr, cache, opt, queue);
}

namespace ops {
DecodePlan decode_plan_sparse(const Context& ctx, const SparseRanges& sr, const PagedKV& cache,
                              const DecodeOptions& opt, cl_command_queue queue) {
  check_options(cache, opt);
  Requests r;
  r.begin.assign(sr.len.size(), 0);
  r.end = sr.len, r.page_base = sr.page_base, r.tok_off = sr.tok_off;
  r.owner = sr.owner, r.lstride = sr.lstride;
  r.batch = sr.batch, r.sparse = sr.mode, r.page_ids_needed = sr.page_ids_needed, r.extra = sr.extra;
  return make_plan(ctx, r, false, cache, opt, queue);
}

int32_t sparse_lists_offset(int num_partials, int num_qo_heads, int head_dim) {
  const int64_t b = planner::workspace_layout(num_partials, num_qo_heads, head_dim).bytes;
  return rt::checked::to_i32((b + 255) / 256 * 64, "sparse decode page lists' offset");
}

SparseTable sparse_table(const DecodePlan& p) {
  const detail::DecodePlanState* st = p.state_.get();
  if (!st) rt::invalid("sparse decode: empty plan");
  return {st->table, st->upload, st->extra_off};
}
}  // namespace ops

DecodePlan decode_plan(const Context& ctx, const PageTable& table, const PagedKV& cache, const DecodeOptions& opt,
                       cl_command_queue queue) {
  return plan_of(ctx, table, cache, opt, queue);
}

DecodePlan decode_plan_fixed(const Context& ctx, const DecodeCapacity& cap, const PagedKV& cache,
                             const DecodeOptions& opt, cl_command_queue queue) {
  check_options(cache, opt);
  if (cap.max_batch < 1) rt::invalid("decode_plan_fixed: max_batch = " + std::to_string(cap.max_batch) + ", must be >= 1");
  if (cap.max_pages < 1) rt::invalid("decode_plan_fixed: max_pages = " + std::to_string(cap.max_pages) + ", must be >= 1");
  if (cache.num_pages < 1) rt::invalid("decode_plan_fixed: the cache has no pages");
  Requests r;
  r.begin.assign(size_t(cap.max_batch), 0), r.end.assign(size_t(cap.max_batch), 0);
  r.page_base.assign(size_t(cap.max_batch), 0), r.tok_off.assign(size_t(cap.max_batch), 0);
  r.page_ids_needed = rt::checked::mul(cap.max_batch, cap.max_pages, "decode_plan_fixed: page table entries");
  return make_plan(ctx, r, true, cache, opt, queue, &cap);
}
}  // namespace clattn
