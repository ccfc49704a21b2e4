// HSA decode: plan (host: checks, candidate and window ranges, the sparse decode's plan
// over per-head page lists, the selection kernels) and run (buffer checks, then enqueue:
// selection, page lists, sparse decode). Semantics: include/clattn/sparse.hpp; design:
// docs/sparse.md.
#include <algorithm>
#include <cmath>

#include "backends/metadata/requests.hpp"
#include "backends/dispatch/catalog.hpp"
#include "backends/ops/decode/sparse.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "clattn/sparse.hpp"
#include "runtime/checked.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace detail {

struct HsaPlanState {
  DecodePlan decode;                       // the sparse decode (decode.cl SPARSE)
  std::shared_ptr<rt::Program> prog;       // hsa.cl
  rt::Kernel* select_k = nullptr;
  rt::Kernel* lists_k = nullptr;
  size_t select_wg = 0;
  int B = 0, Hq = 0, Hkv = 0, D = 0, P = 0, topk = 0, nsel = 0, group = 1, ncand = 0, cstride = 0;
  bool head_mode = false;
  PagedKV cache;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  int max_nw = 0;                          // most window pages of a request
  int32_t lists_off = 0;                   // the lists' start in the workspace (int32 entries)
  int64_t sc_off = 0, ss_off = 0;          // selection scores scratch, scores sink (floats)
  int64_t workspace_bytes = 0, q_bytes = 0, sel_bytes = 0, cand_bytes = 0, mask_bytes = 0, page_id_bytes = 0;
  float select_scale = 1.0f;               // sm_scale (k_scale applied at run)
};

}  // namespace detail

namespace {

using detail::HsaPlanState;

constexpr int kMaxTopk = 1 << 16;            // pages per selection list
constexpr int64_t kMaxListTokens = 1 << 24;  // topk x page_size

void check_hsa_options(const PagedKV& cache, const HsaOptions& opt) {
  ops::check_paged_kv(cache, "cache");
  if (opt.topk < 1) rt::invalid("HsaOptions::topk = " + std::to_string(opt.topk) + ", must be >= 1");
  if (opt.topk > kMaxTopk || int64_t(opt.topk) * cache.page_size > kMaxListTokens)
    rt::invalid("HsaOptions::topk = " + std::to_string(opt.topk) + " exceeds the budget (at most " +
                std::to_string(kMaxTopk) + " pages and " + std::to_string(kMaxListTokens) +
                " tokens per selection list at page_size " + std::to_string(cache.page_size) + ")");
  if (opt.strategy != HsaStrategy::Group && opt.strategy != HsaStrategy::Head)
    rt::invalid("HsaOptions::strategy = " + std::to_string(int(opt.strategy)) + ", must be Group (0) or Head (1)");
  if (opt.window_size < 0)
    rt::invalid("HsaOptions::window_size = " + std::to_string(opt.window_size) + ", must be >= 0");
  if (opt.num_candidates < 0 || opt.num_candidates > (1 << 24))
    rt::invalid("HsaOptions::num_candidates = " + std::to_string(opt.num_candidates) + ", must be in [0, 2^24]");
  if (cache.page_size < 2)
    rt::invalid("cache.page_size = " + std::to_string(cache.page_size) +
                ": HSA pages hold a landmark in their last slot, so page_size >= 2");
  if (cache.num_pages < 1) rt::invalid("cache.num_pages = 0: HSA needs a cache of at least one page");
}

}  // namespace

namespace ops {
// The selection program (hsa.cl) for this head dim, its work-group size from the rows.
Variant hsa_select_variant(const DeviceProfile& prof, int head_dim, const std::map<std::string, int>& over) {
  params::Entry e = params::lookup(prof, "hsa");
  int wg = param(e, over, "SELECT_WG");
  if (!is_pow2(wg) || wg < 1 || wg > 1024)
    rt::invalid("hsa parameter SELECT_WG = " + std::to_string(wg) + " must be a power of two up to 1024");
  wg = int(std::min<size_t>(size_t(wg), prof.max_work_group_size ? prof.max_work_group_size : size_t(wg)));
  const std::string chunks = param_or(e, over, "TOPK_CHUNKS", 0) ? "1" : "0";
  // (SELECT_WG shrinks where the compiled kernel allows fewer work-items.)
  return wg_variant(
      "generic", "hsa.cl", "hsa_select", "SELECT_WG", wg, 1,
      [head_dim, chunks](int w) {
        return rt::make_options({{"HEAD_DIM", std::to_string(head_dim)}, {"SELECT_WG", std::to_string(w)},
                                 {"TOPK_CHUNKS", chunks}});
      },
      [head_dim](int w) { return uint64_t(head_dim) * 4 + 256 * 4 + 2 * uint64_t(w) * 4 + 16; });
}

// The selection at the head dims HSA models use.
void catalog_hsa(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (int d : {64, 128})
    catalog_add(out, "hsa", "d" + std::to_string(d), [&] { return std::vector<Variant>{hsa_select_variant(t.profile, d, {})}; });
}
}  // namespace ops

namespace {

ops::BuiltVariant build_select(detail::ContextImpl& c, const PagedKV& cache, const std::map<std::string, int>& over) {
  return ops::select_and_build(c, "hsa", {ops::hsa_select_variant(c.profile, cache.head_dim, over)});
}

template <class Meta>
HsaPlan plan_of(const Context& ctx, const Meta& m, const PagedKV& cache, const HsaOptions& opt,
                cl_command_queue queue) {
  namespace ck = rt::checked;
  check_hsa_options(cache, opt);
  params::check_param_names({"decode", "hsa"}, opt.params, "HsaOptions::params");
  std::map<std::string, int> dec_params = opt.params, sel_params;
  if (auto it = dec_params.find("SELECT_WG"); it != dec_params.end()) {
    sel_params.insert(*it);
    dec_params.erase(it);
  }
  DecodeOptions dopt;
  dopt.num_qo_heads = opt.num_qo_heads, dopt.q_dtype = opt.q_dtype, dopt.o_dtype = opt.o_dtype;
  dopt.sm_scale = opt.sm_scale, dopt.logits_soft_cap = opt.logits_soft_cap, dopt.max_splits = opt.max_splits;
  dopt.validate = false, dopt.params = dec_params, dopt.plan_buffer = opt.plan_buffer;
  ops::check_attention_options({opt.num_qo_heads, cache.num_kv_heads, cache.head_dim, opt.q_dtype, opt.o_dtype,
                                opt.sm_scale, opt.logits_soft_cap, -1});

  constexpr bool table = std::is_same_v<Meta, PageTable>;
  meta::RequestOptions ro;
  ro.queries = meta::Queries::Decode, ro.validate = opt.validate, ro.allow_window = false;
  const CacheShape shape{cache.num_pages, cache.page_size};
  const meta::KVRequests kv = meta::requests_of(m, shape, ro);

  const int B = kv.size(), P = cache.page_size, K = opt.topk, W = opt.window_size;
  const bool head_mode = opt.strategy == HsaStrategy::Head;
  const int group = opt.num_qo_heads / cache.num_kv_heads;
  const int nsel = head_mode ? opt.num_qo_heads : cache.num_kv_heads;

  HsaPlan plan;
  plan.num_candidates.resize(size_t(B));
  ops::SparseRanges sr;
  sr.batch = B, sr.mode = head_mode ? 2 : 1;
  sr.extra.assign(size_t(B) * 8, 0);
  int64_t lists = 0;  // entries of every request's lists so far
  int max_nw = 0, max_cand = 0;
  for (int b = 0; b < B; ++b) {
    const int L = kv.kv_len[size_t(b)];
    const int cutoff = W > 0 ? std::max(0, L - W) : L;
    const int npages = (L + P - 1) / P;
    const int ncand = cutoff / P;
    const bool window = opt.fuse_window && W > 0 && L > cutoff;
    const int wfirst = cutoff / P, nw = window ? npages - wfirst : 0;
    plan.num_candidates[size_t(b)] = ncand;
    max_cand = std::max(max_cand, ncand), max_nw = std::max(max_nw, nw);
    const int32_t lbase = ck::to_i32(lists, "HSA page lists");
    int32_t* r = &sr.extra[size_t(b) * 8];
    r[0] = kv.page_base[size_t(b)], r[1] = ncand, r[2] = npages, r[3] = cutoff, r[4] = lbase, r[5] = nw, r[6] = wfirst;
    r[7] = L;
    // One key range per request: every list holds the window's pages, then its selection.
    const int stride = nw + K;
    sr.owner.push_back(b), sr.len.push_back(ck::to_i32(int64_t(stride) * P, "HSA list keys"));
    sr.page_base.push_back(lbase), sr.tok_off.push_back(0), sr.lstride.push_back(stride);
    lists = ck::add(lists, ck::mul(int64_t(2) * nsel, int64_t(stride), "HSA lists"), "HSA lists");
  }
  sr.page_ids_needed = lists;
  DecodePlan dp = ops::decode_plan_sparse(ctx, sr, cache, dopt, queue);

  auto& c = rt::impl(ctx);
  auto st = std::make_shared<HsaPlanState>();
  st->decode = dp;
  ops::BuiltVariant sel = build_select(c, cache, sel_params);
  st->prog = sel.program;
  st->select_k = sel.kernel;
  st->select_wg = sel.variant.wg;
  st->lists_k = &sel.program->kernel("hsa_lists");
  st->B = B, st->Hq = opt.num_qo_heads, st->Hkv = cache.num_kv_heads, st->D = cache.head_dim, st->P = P;
  st->topk = K, st->nsel = nsel, st->group = group, st->head_mode = head_mode, st->ncand = opt.num_candidates;
  st->cache = cache, st->q_dtype = opt.q_dtype, st->o_dtype = opt.o_dtype, st->max_nw = max_nw;
  st->cstride = std::max(1, opt.num_candidates > 0 ? opt.num_candidates : max_cand);
  st->lists_off = ops::sparse_lists_offset(dp.num_partials, opt.num_qo_heads, cache.head_dim);
  st->select_scale = opt.sm_scale > 0.0f ? opt.sm_scale : 1.0f / std::sqrt(float(cache.head_dim));
  const int64_t rows = ck::mul(int64_t(B), int64_t(nsel), "selection lists");
  st->sc_off = (dp.workspace_bytes + 255) / 256 * 64;
  st->ss_off = (ck::add(st->sc_off, ck::mul(rows, int64_t(st->cstride), "selection scores"), "HSA workspace") + 63) / 64 * 64;
  st->workspace_bytes = ck::mul(ck::add(st->ss_off, ck::mul(rows, int64_t(K), "selected scores"), "HSA workspace"),
                                int64_t(4), "HSA workspace bytes");
  const ops::RowBytes rb = ops::row_bytes(ck::mul(B, opt.num_qo_heads, "q rows"), cache.head_dim, opt.q_dtype,
                                          cache.head_dim, opt.o_dtype, kv.page_ids_needed);
  st->q_bytes = rb.q, st->page_id_bytes = rb.page_ids;
  st->sel_bytes = ck::mul(ck::mul(rows, int64_t(K), "selected entries"), int64_t(4), "selected bytes");
  st->cand_bytes = ck::mul(ck::mul(int64_t(B), int64_t(opt.num_candidates), "candidates"), int64_t(4), "candidates");
  st->mask_bytes = int64_t(B) * opt.num_candidates;

  plan.batch_size = B, plan.num_qo_heads = opt.num_qo_heads, plan.num_kv_heads = cache.num_kv_heads;
  plan.head_dim = cache.head_dim, plan.page_size = P, plan.topk = K, plan.num_sel_heads = nsel;
  plan.strategy = opt.strategy, plan.window_size = W, plan.fuse_window = opt.fuse_window, plan.cache = cache;
  plan.q_dtype = opt.q_dtype, plan.o_dtype = opt.o_dtype, plan.page_table = table;
  plan.page_ids_needed = kv.page_ids_needed, plan.max_candidates = st->cstride;
  plan.num_work = dp.num_work, plan.num_partials = dp.num_partials, plan.num_merges = dp.num_merges;
  plan.workspace_bytes = st->workspace_bytes, plan.table_bytes = dp.table_bytes;
  plan.select_variant = sel.variant.name, plan.decode_variant = dp.variant, plan.decode_options = dp.kernel_options;
  plan.state_ = st;
  rt::log().debug("hsa plan: B={} Hq={} Hkv={} D={} P={} topk={} {} window={} fuse={}; select {} WG={}, decode {}; "
                  "{} work items, {} merges, workspace {} B",
                  B, opt.num_qo_heads, cache.num_kv_heads, cache.head_dim, P, K, head_mode ? "head" : "group", W,
                  opt.fuse_window, plan.select_variant, st->select_wg, plan.decode_variant, plan.num_work,
                  plan.num_merges, plan.workspace_bytes);
  return plan;
}

const HsaPlanState& state_of(const HsaPlan& p, const char* op) {
  if (!p.state_) rt::invalid(std::string(op) + ": empty plan (make one with hsa_plan)");
  return *p.state_;
}

void check_scales(const HsaBuffers& b, const char* op) {
  if (!(b.k_scale > 0.0f) || !std::isfinite(b.k_scale) || !(b.v_scale > 0.0f) || !std::isfinite(b.v_scale))
    rt::invalid(std::string(op) + ": k_scale/v_scale must be finite and > 0 (got " + std::to_string(b.k_scale) +
                ", " + std::to_string(b.v_scale) + ")");
}

// Buffers both steps read.
void check_common(const HsaPlanState& st, const HsaBuffers& b) {
  const int64_t kv_bytes = st.cache.required_bytes();
  const ops::Shape cache{{st.cache.num_pages, st.P, st.Hkv, st.D}, dtype_name(st.cache.dtype), "paged cache "};
  ops::require_buffer(b.k_cache, kv_bytes, "k_cache", cache);
  if (st.page_id_bytes > 0) ops::require_buffer(b.page_ids, st.page_id_bytes, "page_ids", {{st.page_id_bytes / 4}, "i32"});
  ops::require_buffer(b.selected_page_ids, st.sel_bytes, "selected_page_ids", {{st.B, st.nsel, st.topk}, "i32"});
  ops::require_buffer(b.workspace, st.workspace_bytes, "workspace", {{st.workspace_bytes}, "bytes"});
}

void check_select(const HsaPlanState& st, const HsaBuffers& b) {
  ops::require_buffer(b.q, st.q_bytes, "q", {{st.B, st.Hq, st.D}, dtype_name(st.q_dtype)});
  if (b.selected_scores)
    ops::require_buffer(b.selected_scores, st.sel_bytes, "selected_scores", {{st.B, st.nsel, st.topk}, "f32"});
  if (st.ncand > 0) {
    ops::require_buffer(b.candidates, st.cand_bytes, "candidates", {{st.B, st.ncand}, "i32"});
    if (b.candidate_mask) ops::require_buffer(b.candidate_mask, st.mask_bytes, "candidate_mask", {{st.B, st.ncand}, "u8"});
  } else if (b.candidates || b.candidate_mask) {
    rt::invalid("hsa_select: candidates given to a plan made without HsaOptions::num_candidates");
  }
}

void enqueue_select(const Context& ctx, const HsaPlanState& st, const HsaBuffers& b, cl_command_queue q,
                    cl_uint nwait, const cl_event* wait, cl_event* ev) {
  auto& c = rt::impl(ctx);
  const ops::SparseTable t = ops::sparse_table(st.decode);
  cl_mem ws = b.workspace;
  cl_mem cand = b.candidates ? b.candidates : ws;
  cl_mem mask = b.candidate_mask ? b.candidate_mask : ws;
  cl_mem scores = b.selected_scores ? b.selected_scores : ws;
  const cl_ulong ss_off = b.selected_scores ? 0 : cl_ulong(st.ss_off);
  size_t gws[2] = {st.select_wg, size_t(st.B) * size_t(st.nsel)}, lws[2] = {st.select_wg, 1};
  cl_mem page_ids = b.page_ids ? b.page_ids : ws;
  st.select_k->launch(q, 2, gws, lws, nwait, wait, ev, b.q, cl_int(st.q_dtype), b.k_cache, cl_int(st.cache.dtype),
                      page_ids, t.table, cl_int(t.extra_off), cand, mask, cl_int(st.ncand > 0), cl_int(b.candidate_mask != nullptr),
                      cl_int(st.ncand), ws, cl_ulong(st.sc_off), cl_int(st.cstride), b.selected_page_ids, scores,
                      ss_off, cl_int(st.topk), cl_int(st.Hq), cl_int(st.group), cl_int(st.head_mode),
                      cl_long(st.cache.page_stride()), cl_long(st.cache.token_stride()),
                      cl_long(st.cache.head_stride()), cl_int(st.P), cl_int(st.cache.num_pages),
                      cl_float(st.select_scale * b.k_scale), c.faults);
}

// The sparse decode's buffers: the workspace is also its page-id list.
DecodeBuffers decode_buffers(const HsaBuffers& b) {
  DecodeBuffers d;
  d.q = b.q, d.k_cache = b.k_cache, d.v_cache = b.v_cache, d.page_ids = b.workspace, d.o = b.o, d.lse = b.lse;
  d.workspace = b.workspace, d.sinks = b.sinks, d.k_scale = b.k_scale, d.v_scale = b.v_scale;
  return d;
}

// Lists, then the sparse decode.
void enqueue_decode(const Context& ctx, const HsaPlanState& st, const HsaBuffers& b, cl_command_queue q,
                    cl_uint nwait, const cl_event* wait, cl_event* ev) {
  auto& c = rt::impl(ctx);
  const ops::SparseTable t = ops::sparse_table(st.decode);
  cl_mem page_ids = b.page_ids ? b.page_ids : b.workspace;
  const int64_t n = int64_t(st.nsel) * (st.topk + st.max_nw);
  size_t gws[2] = {size_t(n), size_t(st.B)};
  ops::WaitList wl({q, nwait, wait, nullptr}, t.upload);
  cl_event lists_done = nullptr;
  st.lists_k->launch(q, 2, gws, nullptr, wl.size(), wl.data(), &lists_done, page_ids, t.table, cl_int(t.extra_off),
                     b.selected_page_ids, cl_int(st.topk), cl_int(st.nsel), b.workspace, cl_int(st.lists_off),
                     cl_int(st.P), cl_int(st.cache.num_pages), c.faults);
  try {
    ops::decode_enqueue(ctx, st.decode, decode_buffers(b), {q, 1, &lists_done, ev});
  } catch (...) {
    clReleaseEvent(lists_done);
    throw;
  }
  clReleaseEvent(lists_done);
}


}  // namespace

HsaPlan hsa_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& cache, const HsaOptions& opt,
                 cl_command_queue queue) {
  return plan_of(ctx, csr, cache, opt, queue);
}
HsaPlan hsa_plan(const Context& ctx, const PageTable& table, const PagedKV& cache, const HsaOptions& opt,
                 cl_command_queue queue) {
  return plan_of(ctx, table, cache, opt, queue);
}

namespace {
// A run's checks (its steps' buffers), before anything is enqueued; nullptr for an empty
// batch, whose call a marker stands for.
const HsaPlanState* checked(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e,
                            const char* op, bool select, bool decode) {
  const HsaPlanState& st = state_of(plan, op);
  check_scales(b, op);
  if (st.B == 0) {
    ops::marker_if_needed(ops::queue_of(ctx, e), e);
    return nullptr;
  }
  check_common(st, b);
  if (select) check_select(st, b);
  if (decode) ops::decode_check(st.decode, decode_buffers(b));
  return &st;
}
}  // namespace

void hsa_select(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e) {
  const HsaPlanState* st = checked(ctx, plan, b, e, "hsa_select", true, false);
  if (!st) return;
  ops::WaitList wl(e, ops::sparse_table(st->decode).upload);
  enqueue_select(ctx, *st, b, ops::queue_of(ctx, e), wl.size(), wl.data(), e.event);
}

void hsa_decode(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e) {
  const HsaPlanState* st = checked(ctx, plan, b, e, "hsa_decode", false, true);
  if (st) enqueue_decode(ctx, *st, b, ops::queue_of(ctx, e), e.num_wait, e.wait, e.event);
}

void hsa_run(const Context& ctx, const HsaPlan& plan, const HsaBuffers& b, const Enqueue& e) {
  const HsaPlanState* st = checked(ctx, plan, b, e, "hsa_run", true, true);
  if (!st) return;
  cl_command_queue q = ops::queue_of(ctx, e);
  ops::WaitList wl(e, ops::sparse_table(st->decode).upload);
  cl_event selected = nullptr;
  enqueue_select(ctx, *st, b, q, wl.size(), wl.data(), &selected);
  try {
    enqueue_decode(ctx, *st, b, q, 1, &selected, e.event);
  } catch (...) {
    clReleaseEvent(selected);
    throw;
  }
  clReleaseEvent(selected);
}

}  // namespace clattn
