// Extend / prefill plans: argument and metadata checks, the tile work list, the kernel choice
// with fallback and one non-blocking upload.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/ops/extend/extend_impl.hpp"

namespace clattn {
namespace ops::extend {

void check_options(const KVDesc& kv, const ExtendOptions& opt) {
  ops::check_attention_options({opt.num_qo_heads, kv.num_kv_heads, kv.head_dim, opt.q_dtype, opt.o_dtype,
                                opt.sm_scale, opt.logits_soft_cap, opt.window_left});
  if (!opt.variant.empty() && opt.variant != "generic" && opt.variant != "cpu" && opt.variant != "nv_mma_sync" &&
      opt.variant != "nv_wgmma" && opt.variant != "intel_dpas" && opt.variant != "amd_wmma" &&
      opt.variant != "amd_mfma")
    rt::invalid("variant = '" + opt.variant +
                "' unknown (\"\", \"generic\", \"cpu\", \"nv_mma_sync\", \"nv_wgmma\", \"intel_dpas\", "
                "\"amd_wmma\", \"amd_mfma\")");
}

// The shared request view (backends/metadata/requests.hpp) as the work list reads it.
Requests from_kv(meta::KVRequests&& kv) {
  Requests r;
  r.qo_start = std::move(kv.qo_start), r.qo_len = std::move(kv.qo_len), r.kv_len = std::move(kv.kv_len);
  r.base = std::move(kv.page_base), r.tok_off = std::move(kv.tok_off);
  r.num_tokens = kv.num_tokens, r.page_ids_needed = kv.page_ids_needed;
  return r;
}

// mask_indptr (bytes, FlashInfer segment_packbits layout) against the batch's shapes.
void fill_mask(Requests& r, const ExtendOptions& opt) {
  const int B = r.size();
  r.mask_off.assign(size_t(B), 0);
  if (opt.mask_indptr.empty()) return;
  if (opt.mask_indptr.size() != size_t(B) + 1)
    rt::invalid("mask_indptr: " + to_string(opt.mask_indptr.size()) + " entries, needs batch_size + 1 = " +
                to_string(B + 1));
  if (opt.mask_indptr[0] < 0) rt::invalid("mask_indptr[0] = " + to_string(opt.mask_indptr[0]) + ", must be >= 0");
  for (int i = 0; i < B; ++i) {
    const int64_t bits = int64_t(r.qo_len[size_t(i)]) * r.kv_len[size_t(i)];
    const int64_t need = (bits + 7) / 8;
    const int64_t have = int64_t(opt.mask_indptr[size_t(i) + 1]) - opt.mask_indptr[size_t(i)];
    if (have != need)
      rt::invalid("mask_indptr: request " + to_string(i) + " has " + to_string(have) + " bytes (mask_indptr[" +
                  to_string(i + 1) + "] - mask_indptr[" + to_string(i) + "]), needs ceil(qo_len " +
                  to_string(r.qo_len[size_t(i)]) + " x kv_len " + to_string(r.kv_len[size_t(i)]) + " / 8) = " +
                  to_string(need));
    r.mask_off[size_t(i)] = opt.mask_indptr[size_t(i)];
  }
  r.mask_bytes = std::max<int64_t>(1, opt.mask_indptr[size_t(B)]);
}

// qo: the cascade's shared level (one non-causal request whose rows may outnumber its
// keys); the CSR's qo_indptr is then ignored in favour of `qo`.
Requests requests_from_csr(const PagedCsr& csr, const PagedKV& cache, const ExtendOptions& opt,
                           const std::vector<int32_t>* qo = nullptr) {
  meta::RequestOptions o;
  o.queries = qo ? meta::Queries::Given : meta::Queries::Extend, o.validate = opt.validate, o.rows = qo;
  Requests r = from_kv(meta::requests_from_csr(csr, {cache.num_pages, cache.page_size}, o));
  fill_mask(r, opt);
  return r;
}

Requests requests_from_table(const PageTable& t, const PagedKV& cache, const ExtendOptions& opt) {
  meta::RequestOptions o;
  o.queries = meta::Queries::Extend, o.validate = opt.validate;
  Requests r = from_kv(meta::requests_from_table(t, {cache.num_pages, cache.page_size}, o));
  fill_mask(r, opt);
  return r;
}


// Where a device bounds a work-item's loops (max_keys > 0), each request whose row tiles see
// more keys than that is cut into parts of `chunk` keys: part p of token j is partial row
// first + p x qo_len + j, and token j's parts merge as one entry (stride qo_len).
struct KeySplit {
  bool needed = false;
  std::vector<int> parts;  // per request (1: not split)
  std::vector<int32_t> chunk, first;
  int num_partials = 0, num_merges = 0;
};
KeySplit key_split(const Requests& r, int group, int tile_rows, const ExtendOptions& opt, int64_t max_keys) {
  KeySplit s;
  s.parts.assign(size_t(r.size()), 1), s.chunk.assign(size_t(r.size()), 0), s.first.assign(size_t(r.size()), 0);
  if (max_keys <= 0) return s;
  constexpr int kMaxParts = 256;  // the merge pass's parts per token (MERGE_MAXP)
  for (int i = 0; i < r.size(); ++i) {
    const int64_t qo = r.qo_len[size_t(i)], kvl = r.kv_len[size_t(i)];
    // The widest key range of a row tile: the last tile's (causal) or the whole request.
    int64_t widest = 0;
    const int64_t rows = qo * group;
    for (int64_t row0 = 0; row0 < rows; row0 += tile_rows) {
      const int64_t last_tok = (std::min<int64_t>(row0 + tile_rows, rows) - 1) / group;
      const int64_t end = opt.causal ? std::min(kvl, kvl - qo + last_tok + 1) : kvl;
      const int64_t begin = opt.window_left >= 0 ? std::max<int64_t>(0, kvl - qo + row0 / group - opt.window_left) : 0;
      widest = std::max(widest, end - begin);
    }
    if (widest <= max_keys) continue;
    // Parts of whole chunks over the request's keys: no item's range (a chunk's slice) exceeds
    // max_keys. (A window's range may straddle two chunks: still within the bound.)
    const int64_t np = rt::checked::ceil_div(kvl, max_keys);
    if (np > kMaxParts)
      throw Error(Status::Unsupported, "extend: request " + to_string(i) + " has " + to_string(kvl) +
                                           " keys; the device's loop-trip limit allows " + to_string(max_keys) +
                                           " per work item and the merge " + to_string(kMaxParts) +
                                           " parts (docs/portability.md)");
    s.needed = true;
    s.parts[size_t(i)] = int(np);
    s.chunk[size_t(i)] = int32_t(rt::checked::ceil_div(kvl, np));
    s.first[size_t(i)] = s.num_partials;
    s.num_partials = rt::checked::to_i32(int64_t(s.num_partials) + np * qo, "extend partial states");
    s.num_merges = rt::checked::to_i32(int64_t(s.num_merges) + qo, "extend merge entries");
  }
  return s;
}

ExtendPlan make_plan(const Context& ctx, const Requests& r, ExtendPlan::Source src, const KVDesc& kv,
                     const ExtendOptions& opt, cl_command_queue queue) {
  auto& c = rt::impl(ctx);
  params::check_param_names({"extend"}, opt.params, "ExtendOptions::params");
  const int B = r.size();
  const int group = opt.num_qo_heads / kv.num_kv_heads;

  std::string why_not_mma;
  std::vector<ops::Variant> cands =
      candidates(c.profile, kv, opt, tma_unfit(kv, r.tok_off), ops::preferred_float_width(c), &why_not_mma);
  if (!why_not_mma.empty())
    rt::log().info("extend: nv_mma_sync not used ({}); using the generic kernel", why_not_mma);

  add_test_candidate(opt, cands);

  // The first candidate that builds, fits and, where listed, passed self-validation on this
  // device (each variant has its own file).
  const ops::SelfCheck check = [&](const ops::Variant& v) {
    const ops::ExtendCheckCase k{kv.dtype,    opt.q_dtype, opt.o_dtype, kv.head_dim, kv.paged ? kv.page_size : 16,
                                 opt.variant, opt.params};
    return ops::extend_self_check(ctx, k, v);
  };
  ops::BuiltVariant built = ops::select_and_build(c, "extend", cands, check);
  // A device that bounds a work-item's loops: items whose key range the bound does not reach
  // are split by key (KEY_SPLIT build, partial states merged by the merge pass).
  const int64_t max_keys = ops::max_keys_per_item(c.profile, built.variant.trips_fixed, built.variant.trips_per_key,
                                                  "extend variant " + built.variant.name);
  const KeySplit split = key_split(r, group, std::max(1, ops::knob(built.variant.tile, "ROWS")), opt, max_keys);
  if (split.needed) {
    if (ops::knob(built.variant.tile, "KEY_SPLIT", -1) < 0)
      throw Error(Status::Unsupported, "extend: variant " + built.variant.name + " cannot split its keys, and the " +
                                           "device's loop-trip limit needs it (docs/portability.md)");
    ops::Tile t = built.variant.tile;
    t["KEY_SPLIT"] = 1;
    built = ops::select_and_build(c, "extend", {ops::realize_like(built.variant, t)}, check);
  }
  const ops::Tile& tile = built.variant.tile;
  const bool tma = ops::knob(tile, "TMA") != 0;
  const int tile_rows = ops::knob(tile, "ROWS");
  if (tile_rows < 1) throw Error(Status::Internal, "extend: variant " + built.variant.name + " names no ROWS");
  std::shared_ptr<rt::Program> prog = built.program;
  rt::Kernel* kernel = built.kernel;
  std::shared_ptr<rt::Program> maps_prog = tma ? c.programs.get("tma_maps_nv.cl", rt::kPtxSm90aOption) : nullptr;

  auto st = std::make_shared<ExtendPlanState>();
  st->prog = prog;
  st->kernel = kernel;
  if (tma) {
    // Map dims innermost first: d, then slot and head (smaller stride first, as the kernel's
    // TMA_HEAD_FIRST says), then page (ragged: tokens as slots, one page).
    const int64_t es = int64_t(dtype_size(kv.dtype));
    const bool head_first = kv.stride_head < kv.stride_token;
    const int64_t slots = kv.paged ? kv.page_size : kv.num_tokens;
    st->maps_prog = maps_prog;
    st->maps_kernel = &maps_prog->kernel("tma_maps");
    st->map_dims[0] = cl_uint(kv.head_dim);
    st->map_dims[1] = cl_uint(head_first ? kv.num_kv_heads : slots);
    st->map_dims[2] = cl_uint(head_first ? slots : kv.num_kv_heads);
    st->map_dims[3] = cl_uint(kv.paged ? kv.num_pages : 1);
    st->map_strides[0] = cl_ulong((head_first ? kv.stride_head : kv.stride_token) * es);
    st->map_strides[1] = cl_ulong((head_first ? kv.stride_token : kv.stride_head) * es);
    st->map_strides[2] = cl_ulong(kv.paged ? kv.stride_page * es : 16);  // (one page: never stepped)
    st->map_box[0] = head_first ? 1 : 16, st->map_box[1] = head_first ? 16 : 1;
  }
  st->wg = built.variant.wg;
  st->group = group;
  st->paged = kv.paged;
  st->causal = opt.causal;
  st->window_left = opt.window_left;
  st->page_size = kv.page_size;
  st->stride_page = kv.stride_page, st->stride_token = kv.stride_token, st->stride_head = kv.stride_head;
  const ops::ScoreScale sc = ops::score_scale(opt.sm_scale, opt.logits_soft_cap, kv.head_dim);
  st->q_scale = sc.q_scale, st->cap_log2 = sc.cap_log2, st->inv_cap = sc.inv_cap;

  // Work list: (request, row tile[, key part]), heaviest first (causal rows near the end of a
  // long request see the most keys) so the last wave is made of short items.
  struct Item {
    int req, row0, part;
    int64_t cost;
  };
  // A request's packed rows (query tokens x GQA group) are int in the kernels, and the
  // work list is bounded before it is built.
  int64_t num_items = 0;
  for (int i = 0; i < B; ++i) {
    const int64_t rows = int64_t(r.qo_len[size_t(i)]) * group;
    if (rows > std::numeric_limits<int32_t>::max())
      rt::invalid("request " + to_string(i) + ": qo_len x (num_qo_heads / num_kv_heads) = " + to_string(rows) +
                  " packed rows, more than 2^31 - 1");
    num_items += rt::checked::ceil_div(rows, tile_rows) * split.parts[size_t(i)];
  }
  if (num_items > kMaxWorkItems)
    rt::invalid("extend: " + to_string(num_items) + " work items (query rows x group / " + to_string(tile_rows) +
                ") exceed " + to_string(kMaxWorkItems) + "; split the batch");
  std::vector<Item> items;
  items.reserve(size_t(num_items));
  for (int i = 0; i < B; ++i) {
    const int64_t qo = r.qo_len[size_t(i)], kvl = r.kv_len[size_t(i)];
    const int rows = int(qo * group);
    for (int row0 = 0; row0 < rows; row0 += std::min(tile_rows, rows - row0)) {
      const int64_t last_tok = (std::min<int64_t>(int64_t(row0) + tile_rows, rows) - 1) / group;
      const int64_t end = opt.causal ? std::min(kvl, kvl - qo + last_tok + 1) : kvl;
      const int64_t begin = opt.window_left >= 0 ? std::max<int64_t>(0, kvl - qo + row0 / group - opt.window_left) : 0;
      for (int p = 0; p < split.parts[size_t(i)]; ++p) {
        const int64_t kb = std::max<int64_t>(begin, int64_t(p) * split.chunk[size_t(i)]);
        const int64_t ke = std::min<int64_t>(end, int64_t(p + 1) * split.chunk[size_t(i)]);
        items.push_back({i, row0, p, std::max<int64_t>(0, ke - kb) + 1});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  // Entries of 8 per item, then (split plans) the split entries of 4 per item and the merge
  // entries of 4 per split token.
  const size_t n = items.size();
  st->host.assign(n * 8 + (split.needed ? n * 4 + size_t(split.num_merges) * 4 : 0), 0);
  st->split_off = int32_t(n * 8);
  st->merge_off = int32_t(n * 12);
  for (size_t w = 0; w < n; ++w) {
    const int i = items[w].req;
    int32_t* e = &st->host[w * 8];
    e[0] = r.qo_start[size_t(i)], e[1] = r.qo_len[size_t(i)], e[2] = r.kv_len[size_t(i)], e[3] = items[w].row0;
    e[4] = r.base[size_t(i)], e[5] = r.tok_off[size_t(i)], e[6] = r.mask_off[size_t(i)], e[7] = i;
    if (!split.needed) continue;
    int32_t* se = &st->host[size_t(st->split_off) + w * 4];
    const int np = split.parts[size_t(i)], p = items[w].part;
    se[0] = np > 1 ? p * split.chunk[size_t(i)] : 0;
    se[1] = np > 1 ? std::min(r.kv_len[size_t(i)], (p + 1) * split.chunk[size_t(i)]) : r.kv_len[size_t(i)];
    se[2] = np > 1 ? split.first[size_t(i)] + p * r.qo_len[size_t(i)] : -1;
  }
  if (split.needed) {
    int m = 0;
    for (int i = 0; i < B; ++i) {
      if (split.parts[size_t(i)] < 2) continue;
      for (int j = 0; j < r.qo_len[size_t(i)]; ++j, ++m) {
        int32_t* me = &st->host[size_t(st->merge_off) + size_t(m) * 4];
        me[0] = r.qo_start[size_t(i)] + j, me[1] = split.first[size_t(i)] + j, me[2] = split.parts[size_t(i)];
        me[3] = r.qo_len[size_t(i)];
      }
    }
    st->num_merges = split.num_merges;
    const planner::WorkspaceLayout ws = planner::workspace_layout(split.num_partials, opt.num_qo_heads, kv.head_dim);
    st->lse_off_floats = ws.lse_offset_bytes / 4;
    st->split_workspace = ws.bytes;
    if (st->num_merges > 0) {
      auto mp = ops::merge_program(c);
      st->merge_prog = mp.program, st->merge_wg = mp.wg;
      st->merge_k = &mp.program->kernel("merge_partials");
    }
  }
  const int64_t table_bytes = st->upload_host(c, queue, "extend plan table", opt.plan_buffer);

  ExtendPlan plan;
  plan.table_bytes = table_bytes;
  plan.source = src;
  plan.batch_size = B;
  plan.num_qo_heads = opt.num_qo_heads;
  plan.num_kv_heads = kv.num_kv_heads;
  plan.head_dim = kv.head_dim;
  plan.num_tokens = r.num_tokens;
  plan.q_dtype = opt.q_dtype, plan.o_dtype = opt.o_dtype, plan.kv_dtype = kv.dtype;
  plan.page_ids_needed = r.page_ids_needed;
  plan.has_mask = !opt.mask_indptr.empty();
  plan.mask_bytes_needed = plan.has_mask ? r.mask_bytes : 0;
  plan.num_tiles = rt::checked::to_i32(int64_t(items.size()), "extend work items");
  // The K and V tensor maps (2 x 128 bytes) of the TMA feed, or a key split's partial states.
  plan.workspace_bytes = tma ? 256 : st->split_workspace;
  plan.variant = built.variant.name;
  plan.kernel_options = built.variant.options;
  plan.tile = {int(built.variant.wg), tile_rows, ops::knob(tile, "KEYS")};
  rt::log().debug("extend plan: B={} T={} Hq={} Hkv={} D={} kv={} q={} o={} causal={} window={} mask={} "
                  "variant={} WG={} rows={} keys={} ({}); {} tiles",
                  B, r.num_tokens, opt.num_qo_heads, kv.num_kv_heads, kv.head_dim, dtype_name(kv.dtype),
                  dtype_name(opt.q_dtype), dtype_name(opt.o_dtype), opt.causal, opt.window_left, plan.has_mask,
                  plan.variant, plan.tile.wg, plan.tile.rows, plan.tile.keys, plan.kernel_options, plan.num_tiles);
  plan.state_ = st;
  return plan;
}

// Fixes the run's view once the caller-facing fields are final (the KV descriptor is set
// by the entry point after make_plan).
ExtendPlan finish(ExtendPlan p, int64_t kv_required) {
  auto st = std::const_pointer_cast<ExtendPlanState>(p.state_);
  st->freeze(p, kv_required);
  return p;
}

KVDesc desc_of(const PagedKV& cache) {
  KVDesc d;
  d.paged = true;
  d.num_kv_heads = cache.num_kv_heads, d.head_dim = cache.head_dim, d.page_size = cache.page_size;
  d.dtype = cache.dtype, d.quant_group = cache.quant_group;
  d.stride_page = cache.page_stride(), d.stride_token = cache.token_stride(), d.stride_head = cache.head_stride();
  d.num_pages = cache.num_pages;
  return d;
}

int64_t ragged_required_bytes(const RaggedKV& kv) {
  if (kv.num_tokens <= 0) return 0;
  namespace ck = rt::checked;
  const char* what = "ragged K/V size";
  const int64_t st = kv.stride_token ? kv.stride_token : ck::mul(kv.num_kv_heads, kv.head_dim, what);
  const int64_t sh = kv.stride_head ? kv.stride_head : kv.head_dim;
  int64_t last = ck::add(ck::mul(kv.num_tokens - 1, st, what), ck::mul(int64_t(kv.num_kv_heads) - 1, sh, what), what);
  return ck::mul(ck::add(last, kv.head_dim, what), int64_t(dtype_size(kv.dtype)), what);
}


}  // namespace ops::extend

using namespace ops::extend;

namespace {
// A plan over the paged cache: cache and option checks, then the requests that
// `requests()` builds from the caller's metadata.
template <class MakeRequests>
ExtendPlan paged_plan(const Context& ctx, const PagedKV& cache, const ExtendOptions& opt, ExtendPlan::Source src,
                      cl_command_queue queue, MakeRequests&& requests) {
  ops::check_paged_kv(cache, "cache", true, true);
  KVDesc kv = desc_of(cache);
  check_options(kv, opt);
  ExtendPlan p = make_plan(ctx, requests(), src, kv, opt, queue);
  p.cache = cache;
  return finish(std::move(p), cache.required_bytes());
}
}  // namespace

ExtendPlan extend_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache, const ExtendOptions& opt,
                       cl_command_queue queue) {
  return paged_plan(ctx, cache, opt, ExtendPlan::Source::PagedCsr, queue,
                    [&] { return requests_from_csr(csr, cache, opt); });
}

namespace ops {
ExtendPlan extend_plan_prefix(const Context& ctx, const PagedCsr& prefix, int32_t num_rows, const PagedKV& cache,
                              const ExtendOptions& opt, cl_command_queue queue) {
  if (opt.causal || opt.window_left >= 0 || !opt.mask_indptr.empty())
    rt::invalid("extend_plan_prefix: only for a non-causal, unwindowed, unmasked prefix");
  if (prefix.batch_size() != 1) rt::invalid("extend_plan_prefix: the prefix CSR must hold one request");
  const std::vector<int32_t> qo = {0, num_rows};
  return paged_plan(ctx, cache, opt, ExtendPlan::Source::PagedCsr, queue,
                    [&] { return requests_from_csr(prefix, cache, opt, &qo); });
}
}  // namespace ops

ExtendPlan extend_plan(const Context& ctx, const PageTable& table, const PagedKV& cache, const ExtendOptions& opt,
                       cl_command_queue queue) {
  return paged_plan(ctx, cache, opt, ExtendPlan::Source::PageTable, queue,
                    [&] { return requests_from_table(table, cache, opt); });
}

ExtendPlan prefill_plan(const Context& ctx, const std::vector<int32_t>& qo_indptr,
                        const std::vector<int32_t>& kv_indptr, const RaggedKV& kvr, const ExtendOptions& opt,
                        cl_command_queue queue) {
  if (kvr.num_kv_heads < 1) rt::invalid("kv.num_kv_heads = " + to_string(kvr.num_kv_heads) + ", must be >= 1");
  if (kvr.num_tokens < 0) rt::invalid("kv.num_tokens = " + to_string(kvr.num_tokens) + ", must be >= 0");
  if (!ops::is_kv_dtype(kvr.dtype))
    throw Error(Status::Unsupported, "kv.dtype " + std::string(dtype_name(kvr.dtype)) +
                                         " unsupported (f32, f16, bf16, fp8_e4m3, fp8_e5m2)");
  if (kvr.stride_token < 0 || kvr.stride_head < 0) rt::invalid("kv: negative stride");
  KVDesc kv;
  kv.paged = false;
  kv.num_kv_heads = kvr.num_kv_heads, kv.head_dim = kvr.head_dim, kv.dtype = kvr.dtype;
  kv.stride_token = kvr.stride_token ? kvr.stride_token : int64_t(kvr.num_kv_heads) * kvr.head_dim;
  kv.stride_head = kvr.stride_head ? kvr.stride_head : kvr.head_dim;
  kv.num_tokens = kvr.num_tokens;
  check_options(kv, opt);
  if (kv.num_kv_heads > 1 && kv.stride_head < kv.head_dim)
    rt::invalid("kv.stride_head = " + to_string(kv.stride_head) + " < head_dim " + to_string(kv.head_dim));
  for (int64_t s : {kv.stride_token, kv.stride_head})  // byte strides used by the alignment checks and the kernels
    (void)rt::checked::mul(s, int64_t(dtype_size(kv.dtype)), "kv stride bytes");
  if (qo_indptr.empty()) rt::invalid("qo_indptr: empty, needs batch_size + 1 entries");
  const int B = int(qo_indptr.size()) - 1;
  meta::KVRequests kr;
  kr.kv_len = meta::indptr_lengths(kv_indptr, B, "kv_indptr");
  if (B > 0 && kv_indptr[size_t(B)] > kvr.num_tokens)
    rt::invalid("kv_indptr[" + to_string(B) + "] = " + to_string(kv_indptr[size_t(B)]) + " exceeds kv.num_tokens = " +
                to_string(kvr.num_tokens));
  kr.page_base.assign(kv_indptr.begin(), kv_indptr.end() - 1);
  kr.tok_off.assign(size_t(B), 0);
  meta::fill_queries(kr, qo_indptr, "qo_indptr", meta::Queries::Extend);
  Requests r = from_kv(std::move(kr));
  fill_mask(r, opt);
  ExtendPlan p = make_plan(ctx, r, ExtendPlan::Source::Ragged, kv, opt, queue);
  p.ragged = kvr;
  p.ragged.stride_token = kv.stride_token, p.ragged.stride_head = kv.stride_head;
  const int64_t kv_bytes = ragged_required_bytes(p.ragged);
  return finish(std::move(p), kv_bytes);
}

}  // namespace clattn
