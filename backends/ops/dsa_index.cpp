// DSA indexer (plan: checks, metadata validation, the work list of token tiles, kernel
// choice, one non-blocking upload; run: buffer-size checks, then enqueue only). Kernels:
// cl_kernels/dsa_index.cl (scores, then the per-request top-k of cl_kernels/topk.clh);
// parameters: backends/params/rows_dsa_index.cpp; decisions: docs/sparse.md.
#include <algorithm>
#include <cmath>

#include "backends/metadata/requests.hpp"
#include "backends/dispatch/catalog.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "clattn/sparse.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace detail {

struct DsaIndexPlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> prog, topk_prog;  // (the same program unless the top-k kernel shrank)
  rt::Kernel* score_k = nullptr;
  rt::Kernel* topk_k = nullptr;
  size_t wg = 0, topk_wg = 0;
  int work_off = 0, len_off = 0, num_work = 0, log2_page = 0;
  int64_t scratch_off_floats = 0;  // workspace: top-k scores when the caller takes none

  // The run's view of the plan (DsaIndexPlan's public fields are informational).
  int B = 0, Hi = 0, Di = 0, topk = 0, ld = 0;
  DType q_dtype = DType::BF16;
  PagedKV cache;
  bool page_table = false;
  int64_t q_bytes = 0, w_bytes = 0, out_bytes = 0, k_bytes = 0, page_id_bytes = 0, workspace_bytes = 0;
};

}  // namespace detail

namespace {

using detail::DsaIndexPlanState;
using ops::is_pow2;
using std::to_string;

// Index dims the scoring kernel takes: whole 16-dim groups (any chunk of 16 holds whole words).
constexpr int kMaxIndexDim = 1024;
constexpr int kMaxIndexHeads = 1024;

void check_options(const PagedKV& c, const DsaIndexOptions& opt) {
  ops::check_paged_kv(c, "index_cache");
  if (c.num_kv_heads != 1)
    rt::invalid("index_cache.num_kv_heads = " + to_string(c.num_kv_heads) + ": the indexer's key cache has one head");
  if (c.head_dim % 16 != 0 || c.head_dim > kMaxIndexDim)
    throw Error(Status::Unsupported, "index_cache.head_dim = " + to_string(c.head_dim) +
                                         " unsupported (multiples of 16 up to " + to_string(kMaxIndexDim) + ")");
  if (!is_pow2(c.page_size) || c.page_size > 256)
    throw Error(Status::Unsupported, "index_cache.page_size = " + to_string(c.page_size) +
                                         " unsupported (powers of two 1..256)");
  const int64_t es = int64_t(dtype_size(c.dtype));
  if ((c.page_stride() * es) % 4 || (c.token_stride() * es) % 4)
    rt::invalid("index_cache strides (" + to_string(c.page_stride()) + ", " + to_string(c.token_stride()) +
                " elements) must keep rows 4-byte aligned");
  if (opt.num_index_heads < 1 || opt.num_index_heads > kMaxIndexHeads)
    rt::invalid("num_index_heads = " + to_string(opt.num_index_heads) + ", must be in 1.." + to_string(kMaxIndexHeads));
  if (opt.topk < 1 || opt.topk > kDsaMaxTopk)
    rt::invalid("topk = " + to_string(opt.topk) + ", must be in 1.." + to_string(kDsaMaxTopk) +
                " (kDsaMaxTopk: index entries per request)");
  ops::require_io_dtype(opt.q_dtype, "q_dtype");
}

struct Tile {
  int tt = 64, tm = 4, th = 8, hp = 64, dk = 32, topk_wg = 256;
  bool topk_chunks = false;  // TOPK_CHUNKS (topk.clh): contiguous chunks per work-item (CPUs)
  size_t wg() const { return size_t(tt / tm) * size_t(hp / th); }
  size_t local_bytes() const { return 4 * (size_t(dk) * (tt + hp) + size_t(tt) * (hp / th)); }
};

// The parameters' tile for Hi heads of dim Di: heads per pass at most Hi rounded up to a power
// of two, chunks that divide Di; halved (tokens per group, then heads per pass) where the
// device's work-group or local-memory limits ask for it.
Tile choose_tile(const DeviceProfile& prof, const PagedKV& c, const DsaIndexOptions& opt) {
  const params::Entry e = params::lookup(prof, "dsa_index", "*");
  const auto& ov = opt.params;
  Tile t;
  t.tt = ops::param(e, ov, "TT"), t.tm = ops::param(e, ov, "TM"), t.th = ops::param(e, ov, "TH");
  t.hp = ops::param(e, ov, "HP"), t.dk = ops::param(e, ov, "DK"), t.topk_wg = ops::param(e, ov, "TOPK_WG");
  t.topk_chunks = ops::param_or(e, ov, "TOPK_CHUNKS", 0) != 0;
  auto check = [](const char* name, int v, int lo, int hi) {
    if (!is_pow2(v) || v < lo || v > hi)
      rt::invalid(std::string("dsa_index parameter ") + name + " = " + to_string(v) + " must be a power of two in " +
                  to_string(lo) + ".." + to_string(hi));
  };
  check("TT", t.tt, 4, 256), check("TM", t.tm, 1, 32), check("TH", t.th, 1, 32), check("HP", t.hp, 1, 256);
  check("DK", t.dk, 16, 128), check("TOPK_WG", t.topk_wg, 16, 1024);
  t.hp = std::min(t.hp, ops::pow2_ceil(opt.num_index_heads));
  t.th = std::min(t.th, t.hp), t.tm = std::min(t.tm, t.tt);
  while (c.head_dim % t.dk) t.dk /= 2;  // >= 16: head_dim is a multiple of 16
  const size_t maxwg = prof.max_work_group_size ? prof.max_work_group_size : 256;
  const size_t lmax = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
  while ((t.wg() > maxwg || t.local_bytes() > lmax) && t.tt > t.tm) t.tt /= 2;
  while ((t.wg() > maxwg || t.local_bytes() > lmax) && t.hp > t.th) t.hp /= 2;
  while (size_t(t.topk_wg) > maxwg && t.topk_wg > 16) t.topk_wg /= 2;
  return t;
}

// The program's two kernels, each a candidate of its own: the scores kernel's tile shrinks its
// tokens per group (TT), then its heads per pass (HP); the top-k kernel's its work-group
// (TOPK_WG), built with the scores kernel's chosen tile.
std::vector<ops::Variant> variants(const Tile& asked, const PagedKV& c, bool topk) {
  auto build = [c, topk](Tile t) {
    ops::Variant v;
    v.name = "generic", v.file = "dsa_index.cl";
    v.kernel = topk ? "dsa_index_topk" : "dsa_index_scores";
    if (t.tt < t.tm || t.hp < t.th || t.topk_wg < 16) v.why_not = "TT >= TM, HP >= TH, TOPK_WG >= 16";
    v.options = rt::make_options({{"DI", to_string(c.head_dim)}, {"KV_DT", to_string(int(c.dtype))},
                                  {"TT", to_string(t.tt)}, {"TM", to_string(t.tm)}, {"TH", to_string(t.th)},
                                  {"HP", to_string(t.hp)}, {"DK", to_string(t.dk)}, {"TOPK_WG", to_string(t.topk_wg)},
                                  {"TOPK_CHUNKS", t.topk_chunks ? "1" : "0"}});
    v.wg = topk ? size_t(t.topk_wg) : t.wg();
    v.local_bytes = topk ? 256 * 4 + 2 * size_t(t.topk_wg) * 4 + 16 : t.local_bytes();
    return v;
  };
  if (topk)
    return {ops::shrinkable({{"TOPK_WG", asked.topk_wg}}, [asked, build](const ops::Tile& k) {
      Tile t = asked;
      t.topk_wg = ops::knob(k, "TOPK_WG");
      return build(t);
    }, {{"TOPK_WG", 16}})};
  return {ops::shrinkable({{"TT", asked.tt}, {"HP", asked.hp}}, [asked, build](const ops::Tile& k) {
    Tile t = asked;
    t.tt = ops::knob(k, "TT"), t.hp = ops::knob(k, "HP");
    return build(t);
  }, {{"TT", 1}, {"HP", 1}})};
}

DsaIndexPlan make_plan(const Context& ctx, const meta::KVRequests& r, bool page_table, const PagedKV& cache,
                       const DsaIndexOptions& opt, cl_command_queue queue) {
  namespace ck = rt::checked;
  auto& c = rt::impl(ctx);
  params::check_param_names({"dsa_index"}, opt.params, "DsaIndexOptions::params");
  Tile tile = choose_tile(c.profile, cache, opt);
  const int B = r.size();
  auto st = std::make_shared<DsaIndexPlanState>();
  DsaIndexPlan plan;
  plan.batch_size = B, plan.num_index_heads = opt.num_index_heads, plan.index_dim = cache.head_dim;
  plan.page_size = cache.page_size, plan.topk = opt.topk, plan.cache = cache, plan.q_dtype = opt.q_dtype;
  plan.page_table = page_table, plan.page_ids_needed = r.page_ids_needed;
  for (int i = 0; i < B; ++i) plan.max_kv_len = std::max(plan.max_kv_len, r.kv_len[size_t(i)]);

  const ops::BuiltVariant sv = ops::select_and_build(c, "dsa_index", variants(tile, cache, false));
  tile.tt = ops::knob(sv.variant.tile, "TT"), tile.hp = ops::knob(sv.variant.tile, "HP");
  const ops::BuiltVariant tv = ops::select_and_build(c, "dsa_index", variants(tile, cache, true));
  tile.topk_wg = ops::knob(tv.variant.tile, "TOPK_WG");
  st->prog = sv.program, st->topk_prog = tv.program, st->score_k = sv.kernel, st->topk_k = tv.kernel;
  st->wg = sv.variant.wg, st->topk_wg = tv.variant.wg;
  plan.variant = sv.variant.name;

  // Work entries {request, t0, page_base, L}: one per TT tokens of each request; then L_b.
  std::vector<int32_t>& h = st->host;
  for (int i = 0; i < B; ++i)
    for (int64_t t0 = 0; t0 < r.kv_len[size_t(i)]; t0 += tile.tt)
      h.insert(h.end(), {i, int32_t(t0), r.page_base[size_t(i)], r.kv_len[size_t(i)]});
  st->num_work = ck::to_i32(int64_t(h.size() / 4), "dsa_index work entries");
  st->work_off = 0;
  st->len_off = int(h.size());
  h.insert(h.end(), r.kv_len.begin(), r.kv_len.end());
  if (h.empty()) h.push_back(0);  // a table to bind

  // Workspace: scores [B, max_kv_len] f32, then (256-byte aligned) top-k scores [B, topk] f32
  // for runs that take no scores output.
  const int64_t score_bytes = ck::product({int64_t(B), int64_t(plan.max_kv_len), 4}, "dsa_index workspace (scores)");
  const int64_t scratch = (score_bytes + 255) / 256 * 256;
  st->scratch_off_floats = scratch / 4;
  plan.workspace_bytes =
      B > 0 ? ck::add(scratch, ck::product({int64_t(B), int64_t(opt.topk), 4}, "dsa_index workspace"), "workspace") : 0;

  st->log2_page = ops::log2_int(cache.page_size);
  st->B = B, st->Hi = opt.num_index_heads, st->Di = cache.head_dim, st->topk = opt.topk, st->ld = plan.max_kv_len;
  st->q_dtype = opt.q_dtype, st->cache = cache, st->page_table = page_table;
  st->q_bytes = ck::product({int64_t(B), int64_t(st->Hi), int64_t(st->Di), int64_t(dtype_size(opt.q_dtype))},
                            "dsa_index q bytes");
  st->w_bytes = ck::product({int64_t(B), int64_t(st->Hi), 4}, "dsa_index weights bytes");
  st->out_bytes = ck::product({int64_t(B), int64_t(opt.topk), 4}, "dsa_index indices bytes");
  st->k_bytes = cache.required_bytes();
  st->page_id_bytes = ck::mul(r.page_ids_needed, 4, "page_ids bytes");
  st->workspace_bytes = plan.workspace_bytes;
  plan.table_bytes = st->upload_host(c, queue, "dsa_index plan table", opt.plan_buffer);
  rt::log().debug("dsa_index plan: B={} Hi={} Di={} P={} keys={} topk={} TT={} TM={} TH={} HP={} DK={} WG={} "
                  "TOPK_WG={}; {} work entries, max_kv_len {}, workspace {} B",
                  B, st->Hi, st->Di, cache.page_size, dtype_name(cache.dtype), opt.topk, tile.tt, tile.tm, tile.th,
                  tile.hp, tile.dk, st->wg, st->topk_wg, st->num_work, plan.max_kv_len, plan.workspace_bytes);
  plan.state_ = st;
  return plan;
}

template <class Meta>
DsaIndexPlan plan_of(const Context& ctx, const Meta& m, const PagedKV& cache, const DsaIndexOptions& opt,
                     cl_command_queue queue) {
  check_options(cache, opt);
  constexpr bool table = std::is_same_v<Meta, PageTable>;
  meta::RequestOptions ro;
  ro.queries = meta::Queries::Decode, ro.validate = opt.validate, ro.allow_window = false;
  const CacheShape shape{cache.num_pages, cache.page_size};
  const meta::KVRequests r = meta::requests_of(m, shape, ro);
  return make_plan(ctx, r, table, cache, opt, queue);
}

}  // namespace

DsaIndexPlan dsa_index_plan(const Context& ctx, const PagedCsr& csr, const PagedKV& index_cache,
                            const DsaIndexOptions& opt, cl_command_queue queue) {
  return plan_of(ctx, csr, index_cache, opt, queue);
}
DsaIndexPlan dsa_index_plan(const Context& ctx, const PageTable& table, const PagedKV& index_cache,
                            const DsaIndexOptions& opt, cl_command_queue queue) {
  return plan_of(ctx, table, index_cache, opt, queue);
}

void dsa_index_run(const Context& ctx, const DsaIndexPlan& plan, const DsaIndexBuffers& b, const Enqueue& e) {
  const DsaIndexPlanState* st = plan.state_.get();
  if (!st) rt::invalid("dsa_index_run: empty plan (make one with dsa_index_plan)");
  if (!(b.k_scale > 0.0f) || !std::isfinite(b.k_scale))
    rt::invalid("dsa_index_run: k_scale = " + to_string(b.k_scale) + ", must be finite and > 0");
  const int B = st->B;
  cl_command_queue q = ops::queue_of(ctx, e);
  if (B > 0) {
    ops::require_buffer(b.q, st->q_bytes, "q", {{B, st->Hi, st->Di}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.weights, st->w_bytes, "weights", {{B, st->Hi}, "f32"});
    ops::require_buffer(b.indices, st->out_bytes, "indices", {{B, st->topk}, "i32"});
    if (b.scores) ops::require_buffer(b.scores, st->out_bytes, "scores", {{B, st->topk}, "f32"});
    ops::require_buffer(b.workspace, st->workspace_bytes, "workspace", {{B, st->ld}, "f32 scores, then [B, topk] f32"});
  }
  if (st->num_work > 0) {
    if (st->cache.num_pages > 0)
      ops::require_buffer(b.k_cache, st->k_bytes, "k_cache",
                          {{st->cache.num_pages, st->cache.page_size, 1, st->Di}, dtype_name(st->cache.dtype),
                           "index cache "});
    if (st->page_id_bytes > 0)
      ops::require_buffer(b.page_ids, st->page_id_bytes, "page_ids",
                          {{st->page_id_bytes / 4}, "i32", st->page_table ? "page_table " : "kv_indices "});
  }
  ops::WaitList wl(e, st->upload);
  if (B == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  auto& c = rt::impl(ctx);
  cl_mem dummy = st->table;
  const int64_t es = int64_t(dtype_size(st->cache.dtype));
  cl_event ev1 = nullptr;
  if (st->num_work > 0) {
    const size_t gws[1] = {size_t(st->num_work) * st->wg}, lws[1] = {st->wg};
    st->score_k->launch(q, 1, gws, lws, wl.size(), wl.data(), &ev1, b.q, cl_int(st->q_dtype), b.weights,
                        b.k_cache ? b.k_cache : dummy, b.page_ids ? b.page_ids : dummy, st->table,
                        cl_int(st->work_off), b.workspace, cl_int(st->ld), cl_int(st->Hi),
                        cl_long(st->cache.page_stride() * es / 4), cl_long(st->cache.token_stride() * es / 4),
                        cl_int(st->log2_page), cl_float(b.k_scale), cl_int(st->cache.num_pages), c.faults);
  }
  // Top-k scores go to the caller's buffer, else to the workspace's scratch rows (an offset:
  // a sub-buffer per run would allocate).
  const size_t tg[1] = {size_t(B) * st->topk_wg}, tl[1] = {st->topk_wg};
  cl_mem out_s = b.scores ? b.scores : b.workspace;
  const cl_ulong out_off = b.scores ? 0 : cl_ulong(st->scratch_off_floats);
  try {
    if (ev1)
      st->topk_k->launch(q, 1, tg, tl, 1, &ev1, e.event, b.workspace, cl_int(st->ld), st->table, cl_int(st->len_off),
                         cl_int(st->topk), b.indices, out_s, out_off);
    else
      st->topk_k->launch(q, 1, tg, tl, wl.size(), wl.data(), e.event, b.workspace, cl_int(st->ld), st->table,
                         cl_int(st->len_off), cl_int(st->topk), b.indices, out_s, out_off);
  } catch (...) {
    if (ev1) clReleaseEvent(ev1);
    throw;
  }
  if (ev1) clReleaseEvent(ev1);
}

namespace ops {

// DeepSeek-V3.2's indexer (64 heads of 128) over bf16, fp8 and f32 key caches.
void catalog_dsa_index(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (DType dt : {DType::BF16, DType::FP8_E4M3, DType::F32})
    for (bool topk : {false, true}) {
      catalog_add(out, "dsa_index", std::string(dtype_name(dt)) + (topk ? " topk" : " scores"), [&] {
        PagedKV cache;
        cache.num_pages = 1024, cache.page_size = 64, cache.num_kv_heads = 1, cache.head_dim = 128, cache.dtype = dt;
        DsaIndexOptions opt;
        opt.num_index_heads = 64, opt.topk = 2048;
        return variants(choose_tile(t.profile, cache, opt), cache, topk);
      });
    }
}

}  // namespace ops
}  // namespace clattn
