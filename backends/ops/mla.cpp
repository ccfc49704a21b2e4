// MLA decode / extend (plan: checks, metadata validation, work list, split-K, kernel
// choice, one non-blocking upload; run: buffer-size checks, then enqueue only), sparse
// decode over per-request index lists (the same kernels built with SPARSE_IDX,
// cl_kernels/mla_sparse.clh; docs/sparse.md) and append_latent. Kernels:
// cl_kernels/mla_tiled.cl (register-blocked), mla.cl (generic), mla_mma_nv.cl (tensor cores),
// mla_cpu.cl (CPU devices); parameters: backends/params/rows_mla.cpp; decisions: docs/mla.md.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "backends/ops/merge_state.hpp"
#include "backends/metadata/requests.hpp"
#include "backends/dispatch/catalog.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "backends/planner/split_kv.hpp"
#include "clattn/mla.hpp"
#include "clattn/sparse.hpp"
#include "runtime/log.hpp"

namespace clattn {

// ---- MlaCache: resolved strides (elements) ----
int64_t MlaCache::ckv_token_stride() const {
  return stride_token ? stride_token : (single_buffer ? kMlaCkvDim + kMlaKpeDim : kMlaCkvDim);
}
int64_t MlaCache::ckv_page_stride() const {
  return stride_page ? stride_page : rt::checked::mul(page_size, ckv_token_stride(), "latent cache page stride");
}
int64_t MlaCache::kpe_token_stride() const {
  if (kpe_stride_token) return kpe_stride_token;
  return single_buffer ? ckv_token_stride() : kMlaKpeDim;
}
int64_t MlaCache::kpe_page_stride() const {
  if (kpe_stride_page) return kpe_stride_page;
  return single_buffer ? ckv_page_stride() : rt::checked::mul(page_size, kpe_token_stride(), "kpe cache page stride");
}
int64_t MlaCache::kpe_base() const { return kpe_offset ? kpe_offset : (single_buffer ? kMlaCkvDim : 0); }
namespace {
// Elements up to the end of the last row of a paged buffer (checked: hostile strides are
// rejected rather than wrapped into a small size).
int64_t paged_extent(int64_t base, int num_pages, int64_t page_stride, int page_size, int64_t token_stride,
                     int64_t row, const char* what) {
  namespace ck = rt::checked;
  int64_t last = ck::add(base, ck::mul(int64_t(num_pages) - 1, page_stride, what), what);
  last = ck::add(last, ck::mul(int64_t(page_size) - 1, token_stride, what), what);
  return ck::add(last, row, what);
}
}  // namespace

int64_t MlaCache::ckv_required_bytes() const {
  if (num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA latent cache size";
  int64_t last = paged_extent(0, num_pages, ckv_page_stride(), page_size, ckv_token_stride(), kMlaCkvDim, what);
  if (single_buffer)
    last = std::max(last, paged_extent(kpe_base(), num_pages, kpe_page_stride(), page_size, kpe_token_stride(),
                                       kMlaKpeDim, what));
  return rt::checked::mul(last, int64_t(dtype_size(dtype)), what);
}
int64_t MlaCache::scale_token_stride() const { return scale_stride_token ? scale_stride_token : 2; }
int64_t MlaCache::scale_page_stride() const {
  return scale_stride_page ? scale_stride_page
                           : rt::checked::mul(page_size, scale_token_stride(), "latent scale cache page stride");
}
int64_t MlaCache::scale_required_bytes() const {
  if (dtype != DType::I8 || num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA latent scale cache size";
  const int64_t last = paged_extent(0, num_pages, scale_page_stride(), page_size, scale_token_stride(), 2, what);
  return rt::checked::mul(last, int64_t(dtype_size(scale_dtype)), what);
}
int64_t MlaCache::kpe_required_bytes() const {
  if (single_buffer || num_pages <= 0 || page_size <= 0) return 0;
  const char* what = "MLA kpe cache size";
  const int64_t last =
      paged_extent(kpe_base(), num_pages, kpe_page_stride(), page_size, kpe_token_stride(), kMlaKpeDim, what);
  return rt::checked::mul(last, int64_t(dtype_size(dtype)), what);
}

namespace detail {
struct MlaPlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> prog, merge_prog;
  rt::Kernel* attn_k = nullptr;
  rt::Kernel* merge_k = nullptr;
  size_t wg = 0, merge_wg = 0;
  int work_off = 0, merge_off = 0, log2_page = 0;
  // Fused split-K merge (mla_mma_nv.cl FUSE_MERGE): the part -> merge entry map and the
  // counter sets (one zeroed counter per (merge entry, head block) each) follow the merge
  // entries in the table.
  bool fuse_kernel = false;  // the kernel was built with FUSE_MERGE (takes the extra arguments)
  bool fuse = false;         // ... and this plan's merges run in it (pmap_off >= 0)
  int pmap_off = -1, n_hblk = 1;
  ops::CounterSets sets;
  float q_scale = 1.0f;
  int64_t lse_off_floats = 0;
  int64_t ckv_sp = 0, ckv_st = 0, kpe_sp = 0, kpe_st = 0, kpe_base = 0;  // 32-bit words

  // The run's view of the plan, fixed when it is made (MlaPlan's public fields are
  // informational: a caller may edit its copy). Byte sizes by checked arithmetic.
  int T = 0, H = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  MlaCache cache;
  bool page_table = false;
  int num_work = 0, num_merges = 0, num_partials = 0;
  int64_t q_nope_bytes = 0, q_pe_bytes = 0, o_bytes = 0, lse_bytes = 0, ckv_bytes = 0, kpe_bytes = 0;
  int64_t page_id_bytes = 0, workspace_bytes = 0;
  int topk = 0;              // sparse decode: index entries per request (0: dense)
  int64_t index_bytes = 0;   // ... and the bytes of indices [B, topk] int32

  void freeze(const MlaPlan& p) {
    namespace ck = rt::checked;
    T = p.num_tokens, H = p.num_heads, q_dtype = p.q_dtype, o_dtype = p.o_dtype, cache = p.cache;
    page_table = p.page_table, num_work = p.num_work, num_merges = p.num_merges, num_partials = p.num_partials;
    const int64_t rows = ck::mul(T, H, "MLA q/o rows (tokens x num_heads)");
    const ops::RowBytes rb = ops::row_bytes(rows, kMlaCkvDim, q_dtype, kMlaCkvDim, o_dtype, p.page_ids_needed);
    q_nope_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    q_pe_bytes = ck::product({rows, kMlaKpeDim, int64_t(dtype_size(q_dtype))}, "q_pe bytes");
    ckv_bytes = cache.ckv_required_bytes();
    kpe_bytes = cache.single_buffer ? 0 : cache.kpe_required_bytes();
    workspace_bytes = p.workspace_bytes;
    topk = p.topk;
    index_bytes = ck::product({int64_t(p.batch_size), int64_t(topk), 4}, "sparse MLA indices bytes");
  }
};
}  // namespace detail

namespace {

using detail::MlaPlanState;
using std::to_string;
using ops::is_pow2;
using ops::log2_int;
using ops::pow2_ceil;


bool mla_kv_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::FP8_E4M3 || t == DType::FP8_E5M2 ||
         t == DType::I8;
}

// int8 latent: the scale cache's dtype and geometry (a pair per token that does not overlap
// the next token's).
void check_scale_cache(const MlaCache& c, const std::string& what) {
  if (c.scale_dtype != DType::F32 && c.scale_dtype != DType::F16)
    throw Error(Status::Unsupported, what + ".scale_dtype " + std::string(dtype_name(c.scale_dtype)) +
                                         " unsupported (f32, f16)");
  if (c.scale_stride_page < 0 || c.scale_stride_token < 0) rt::invalid(what + ": negative scale stride");
  if (c.page_size > 1 && c.scale_token_stride() < 2)
    rt::invalid(what + ".scale_stride_token = " + to_string(c.scale_token_stride()) +
                " < 2 (a token's pair of scales: ckv, kpe)");
  try {
    (void)c.scale_required_bytes();
  } catch (const Error& e) {
    rt::invalid(what + ": " + e.what());
  }
}

void check_cache(const MlaCache& c, const std::string& what) {
  if (c.num_pages < 0) rt::invalid(what + ".num_pages = " + to_string(c.num_pages) + ", must be >= 0");
  if (!is_pow2(c.page_size) || c.page_size > 256)
    throw Error(Status::Unsupported, what + ".page_size = " + to_string(c.page_size) +
                                         " unsupported (powers of two 1..256; 1, 16, 32, 64 tested)");
  if (!mla_kv_dtype(c.dtype))
    throw Error(Status::Unsupported, what + ".dtype " + std::string(dtype_name(c.dtype)) +
                                         " unsupported (f16, bf16, fp8_e4m3, fp8_e5m2, int8, f32)");
  if (c.dtype == DType::I8) check_scale_cache(c, what);
  if (c.stride_page < 0 || c.stride_token < 0 || c.kpe_stride_page < 0 || c.kpe_stride_token < 0 || c.kpe_offset < 0)
    rt::invalid(what + ": negative stride or offset");
  const int64_t ckv_w = c.single_buffer ? kMlaCkvDim + kMlaKpeDim : kMlaCkvDim;
  if (c.page_size > 1 && c.ckv_token_stride() < ckv_w)
    rt::invalid(what + ".stride_token = " + to_string(c.ckv_token_stride()) + " < row width " + to_string(ckv_w));
  if (!c.single_buffer && c.page_size > 1 && c.kpe_token_stride() < kMlaKpeDim)
    rt::invalid(what + ".kpe_stride_token = " + to_string(c.kpe_token_stride()) + " < 64");
  if (c.single_buffer && c.kpe_base() < kMlaCkvDim)
    rt::invalid(what + ".kpe_offset = " + to_string(c.kpe_base()) + ": kpe would overlap ckv (single buffer)");
  try {
    (void)c.ckv_required_bytes(), (void)c.kpe_required_bytes();  // geometry whose byte size overflows
    const int64_t es = int64_t(dtype_size(c.dtype));
    for (int64_t s : {c.ckv_page_stride(), c.ckv_token_stride(), c.kpe_page_stride(), c.kpe_token_stride(),
                      c.kpe_base()})
      (void)rt::checked::mul(s, es, "stride bytes");
  } catch (const Error& e) {
    rt::invalid(what + ": " + e.what());
  }
}

// int8 latent: the scale cache buffer holds the descriptor's pairs.
void require_latent_scales(const MlaCache& c, cl_mem scale_cache) {
  ops::require_buffer(scale_cache, c.scale_required_bytes(), "scale_cache",
                      {{c.num_pages, c.page_size, 2}, dtype_name(c.scale_dtype), "latent scale cache (ckv, kpe) "});
}

void check_options(const MlaCache& cache, const MlaOptions& opt) {
  check_cache(cache, "cache");
  if (opt.num_heads < 1 || opt.num_heads > 1024)
    rt::invalid("num_heads = " + to_string(opt.num_heads) + ", must be in 1..1024");
  ops::require_io_dtype(opt.q_dtype, "q_dtype");
  ops::require_io_dtype(opt.o_dtype, "o_dtype");
  if (!(opt.sm_scale > 0.0f) || !std::isfinite(opt.sm_scale))
    rt::invalid("sm_scale = " + to_string(opt.sm_scale) + ": must be finite and > 0 (MLA has no default)");
  if (opt.max_splits < 0) rt::invalid("max_splits = " + to_string(opt.max_splits) + ", must be >= 0");
}

// Per-request query rows and key counts, and where their page ids start: the shared
// request view (backends/metadata/requests.hpp); a windowed CSR is unsupported.
using Requests = meta::KVRequests;

meta::RequestOptions request_options(const MlaOptions& opt, bool extend) {
  meta::RequestOptions o;
  o.queries = extend ? meta::Queries::Extend : meta::Queries::Decode, o.validate = opt.validate;
  o.allow_window = false;
  return o;
}
Requests requests_from_csr(const PagedCsr& csr, const MlaCache& cache, const MlaOptions& opt, bool extend) {
  return meta::requests_from_csr(csr, {cache.num_pages, cache.page_size}, request_options(opt, extend));
}
Requests requests_from_table(const PageTable& t, const MlaCache& cache, const MlaOptions& opt, bool extend) {
  return meta::requests_from_table(t, {cache.num_pages, cache.page_size}, request_options(opt, extend));
}

struct Tile {
  int qb = 16, lanes = 16, load_bytes = 16;
  int wgs_per_cu = 2, min_chunk = 256, max_splits = 64;
  std::string source;
  // Tensor-core kernel (mla_mma_nv.cl) when the parameters ask for it (MMA=1) and the
  // device and cache allow it: 16 query vectors per group, MMA_WARPS warps, MMA_KEYS tokens.
  bool mma = false;
  int mma_warps = 4, mma_keys = 16;
  bool fuse_merge = true;  // decode: the last part's group merges (FUSE_MERGE) ...
  int fuse_max_parts = 8;  // ... when no merge has more parts than this (one group reads them all)
  int l2_ahead = 0;        // sparse decode: prefetch the listed rows this many tiles ahead into L2 (0: off)
  std::string why_not_mma;
  // Register-blocked portable kernel (mla_tiled.cl) when the parameters ask for it (TILED=1)
  // and it fits: tqb query vectors, KT-token tiles; S by tqb / MS x DS work-items (MS vectors
  // each), P V with MO vectors per work-item.
  bool tiled = false;
  int tqb = 16, kt = 8, ms = 1, ds = 16, dsw = 8, mo = 8;
  bool unroll = true;  // UNROLL_HINTS: GPUs on, CPU devices off (PoCL compiles unrolled code slowly)
  size_t tiled_wg() const { return size_t(tqb / ms) * ds; }
  std::string why_not_tiled;
  // CPU variant (mla_cpu.cl) when the parameters ask for it (CPU_KERNEL=1): one work-item per
  // group owning cqb query vectors (a multiple of the vector width vw); bk-key blocks; S in
  // sk x (cqb / vw) micro-tiles over sd-dim passes, P V in oh x od; fp8 decoded by bit moves
  // where fp8_fast.
  bool cpu = false;
  int cqb = 16, vw = 16, bk = 16, sk = 8, sd = 64, oh = 8, od = 2, touch_ahead = 1;
  bool fp8_fast = false;
  bool local_bufs = true;
};

// mla_cpu.cl: Q^T (576 x cqb) and O (cqb x 512), the f32 block (bk x 576) and S^T (bk x cqb).
size_t cpu_local_bytes(int cqb, int bk) {
  return (size_t(kMlaCkvDim + kMlaKpeDim) * cqb + size_t(kMlaCkvDim) * cqb + size_t(bk) * (kMlaCkvDim + kMlaKpeDim) +
          size_t(bk) * cqb) * 4;
}

// mla_mma_nv.cl: the staged V slices (keys x 512 16-bit values) + two buffers of every
// warp's partial S (16 x keys f32) + the fused merge's flag.
size_t mma_local_bytes(int warps, int keys) {
  return size_t(keys) * kMlaCkvDim * 2 + 2 * size_t(warps) * 16 * keys * 4 + 4;
}

// mla_tiled.cl: the f32 latent tile (KT x 576), p (rounded up to float4s), the score
// partials (DS + 1 per score), the scores and one float per query vector.
size_t tiled_local_bytes(int qb, int kt, int ds) {
  const size_t ns = size_t(qb) * kt;
  return size_t(kt) * (kMlaCkvDim + kMlaKpeDim) * 4 + (ns + 3) / 4 * 16 + ns * (ds + 1) * 4 + ns * 4 + size_t(qb) * 4;
}

// mla.cl: the raw latent tile, the score partials, scores and p (+ the tile's scale pairs
// for int8).
size_t local_bytes(const Tile& t, DType dt) {
  const size_t wg = size_t(t.qb) * t.lanes;
  return size_t(t.lanes) * (kMlaCkvDim + kMlaKpeDim) * dtype_size(dt) + wg * (t.lanes + 1) * 4 + 2 * wg * 4 +
         (dt == DType::I8 ? size_t(t.lanes) * 8 : 0);
}

// preferred_float_width: the device's CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT (the CPU
// variant's default VW); denorms: the device keeps f32 denormals (the CPU variant's fast fp8
// decode is exact only then).
Tile choose_tile(const DeviceProfile& prof, const MlaCache& c, const MlaOptions& opt, bool extend,
                 int preferred_float_width, bool denorms) {
  params::Entry e = params::lookup(prof, extend ? "mla_extend" : "mla_decode", "*");
  Tile t;
  t.source = e.source;
  const auto& ov = opt.params;
  t.qb = ops::param_or(e, ov, "QB", 16);
  t.lanes = ops::param_or(e, ov, "LANES", 16);
  t.load_bytes = ops::param_or(e, ov, "LOAD_BYTES", 16);
  t.wgs_per_cu = std::max(1, ops::param_or(e, ov, "WGS_PER_CU", 2));
  t.min_chunk = std::max(1, ops::param_or(e, ov, "MIN_CHUNK", 256));
  t.max_splits = std::max(1, ops::param_or(e, ov, "MAX_SPLITS", 64));
  if (t.lanes != 4 && t.lanes != 8 && t.lanes != 16)
    rt::invalid("mla parameter LANES = " + to_string(t.lanes) + " must be 4, 8 or 16");
  if (!is_pow2(t.qb) || t.qb > 64) rt::invalid("mla parameter QB = " + to_string(t.qb) + " must be a power of two <= 64");
  if (!extend) t.qb = std::min(t.qb, pow2_ceil(opt.num_heads));  // decode: no idle heads in a group
  const size_t maxwg = prof.max_work_group_size ? prof.max_work_group_size : 256;
  while (t.qb > 1 && size_t(t.qb) * t.lanes > maxwg) t.qb /= 2;
  // (A generic tile that still does not fit is refused by select_and_build, after the others.)
  while (t.qb > 1 && prof.local_mem_bytes && local_bytes(t, c.dtype) > prof.local_mem_bytes) t.qb /= 2;
  // Widest load that keeps every latent row chunk aligned.
  const int64_t es = int64_t(dtype_size(c.dtype));
  const int64_t offs[] = {c.ckv_page_stride(), c.ckv_token_stride(), c.kpe_page_stride(), c.kpe_token_stride(),
                          c.kpe_base()};
  auto aligned = [&](int b) {
    for (int64_t o : offs)
      if ((o * es) % b) return false;
    return (kMlaKpeDim * es) % b == 0;
  };
  int lb = t.load_bytes;
  if (lb != 16 && lb != 8 && lb != 4) rt::invalid("mla parameter LOAD_BYTES must be 4, 8 or 16");
  while (lb > 4 && !aligned(lb)) lb /= 2;
  if (!aligned(lb))
    throw Error(Status::Unsupported, "latent cache strides/offsets (elements of " + std::string(dtype_name(c.dtype)) +
                                         ") must be multiples of 4 bytes");
  t.load_bytes = lb;

  // Register-blocked portable variant: the parameters' tile, halved where the device's work-group
  // or local-memory limits ask for it (query vectors first, then tile tokens).
  if (ops::param_or(e, ov, "TILED", 0) != 0) {
    t.kt = ops::param_or(e, ov, "KT", 8);
    t.ds = ops::param_or(e, ov, "DS", 16);
    t.dsw = ops::param_or(e, ov, "DSW", 8);
    t.mo = ops::param_or(e, ov, "MO", 8);
    t.ms = ops::param_or(e, ov, "MS", 1);
    t.unroll = ops::param_or(e, ov, "UNROLL_HINTS", prof.is_cpu ? 0 : 1) != 0;
    auto check = [](const char* name, int v, int lo, int hi) {
      if (!is_pow2(v) || v < lo || v > hi)
        rt::invalid(std::string("mla parameter ") + name + " = " + to_string(v) + " must be a power of two in " +
                    to_string(lo) + ".." + to_string(hi));
    };
    check("KT", t.kt, 4, 32), check("DS", t.ds, 1, 16), check("DSW", t.dsw, 1, 64), check("MO", t.mo, 1, 16);
    check("MS", t.ms, 1, 8);
    t.dsw = std::min(t.dsw, t.ds);
    t.tqb = ops::param_or(e, ov, "QB", 16);  // validated above
    if (!extend) t.tqb = std::min(t.tqb, pow2_ceil(opt.num_heads));
    t.ms = std::min(t.ms, t.tqb);
    while (t.tqb > t.ms && t.tiled_wg() > maxwg) t.tqb /= 2;
    t.mo = std::min(t.mo, t.tqb);
    const size_t lmax = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
    while (t.kt > 4 && tiled_local_bytes(t.tqb, t.kt, t.ds) > lmax) t.kt /= 2;
    const int cb = t.ds * t.mo / t.ms;  // P V: work-items per block of MO vectors (float4 column stride)
    if (t.ds * t.mo < t.ms || cb > 128)
      t.why_not_tiled = "DS x MO / MS = " + to_string(t.ds) + " x " + to_string(t.mo) + " / " + to_string(t.ms) +
                        " must be 1..128 (work-items across the 128 float4 output columns)";
    else if (t.tiled_wg() > maxwg)
      t.why_not_tiled = "device allows " + to_string(maxwg) + " work-items per group, the tile needs " +
                        to_string(t.tiled_wg());
    else if (tiled_local_bytes(t.tqb, t.kt, t.ds) > lmax)
      t.why_not_tiled = "tile needs " + to_string(tiled_local_bytes(t.tqb, t.kt, t.ds)) +
                        " bytes of local memory, device has " + to_string(lmax);
    else
      t.tiled = true;
  }

  // CPU variant: VW (0 = the device's preferred float vector width: 16 on AVX-512), the query
  // vectors per work-item (decode: at most the head count rounded up to a power of two, at
  // least one vector: VW is lowered first where the heads fill less), the key block and the
  // two micro-tiles; the buffers go to local memory where they fit, else private memory.
  if (ops::param_or(e, ov, "CPU_KERNEL", 0) != 0) {
    auto check = [](const char* name, int v, int lo, int hi) {
      if (!is_pow2(v) || v < lo || v > hi)
        rt::invalid(std::string("mla parameter ") + name + " = " + to_string(v) + " must be a power of two in " +
                    to_string(lo) + ".." + to_string(hi));
    };
    t.vw = ops::cpu_vector_width(ops::param_or(e, ov, "VW", 0), preferred_float_width, 0, "mla");
    t.cqb = ops::param_or(e, ov, "CPU_QB", 16);
    t.bk = ops::param_or(e, ov, "BK", 16), t.sk = ops::param_or(e, ov, "SK", 8);
    t.sd = ops::param_or(e, ov, "SD", 64);
    t.oh = ops::param_or(e, ov, "OH", 8), t.od = ops::param_or(e, ov, "OD", 2);
    t.touch_ahead = ops::param_or(e, ov, "TOUCH_AHEAD", 1);
    check("CPU_QB", t.cqb, 1, 64), check("BK", t.bk, 1, 64), check("SK", t.sk, 1, 16), check("OH", t.oh, 1, 16);
    check("OD", t.od, 1, 32);
    if (t.sd < 1 || (kMlaCkvDim + kMlaKpeDim) % t.sd || t.sd % 16)
      rt::invalid("mla parameter SD = " + to_string(t.sd) + " must be a multiple of 16 dividing 576");
    if (t.touch_ahead < 0 || t.touch_ahead > 8)
      rt::invalid("mla parameter TOUCH_AHEAD = " + to_string(t.touch_ahead) + " must be in 0..8");
    if (!extend) t.cqb = std::min(t.cqb, pow2_ceil(opt.num_heads));
    if (t.cqb < t.vw) t.vw = std::max(4, t.cqb);  // fewer heads than lanes: narrower vectors
    t.cqb = std::max(t.cqb, t.vw);
    t.sk = std::min(t.sk, t.bk), t.oh = std::min(t.oh, t.cqb), t.od = std::min(t.od, kMlaCkvDim / t.vw);
    const size_t lmax = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
    // LOCAL_BUFS (not in the rows; 0 forces private arrays): local where the buffers fit.
    t.local_bufs = ops::param_or(e, ov, "LOCAL_BUFS", 1) != 0 && cpu_local_bytes(t.cqb, t.bk) <= lmax;
    const int ff = ops::param_or(e, ov, "FP8_FAST", -1);
    t.fp8_fast = ff != 0 && denorms;  // (never where denormals flush: the bit moves need them)
    t.cpu = true;
  }

  // L2_AHEAD (the tensor-core kernel's sparse builds; read here so that a bad value is named
  // on every device).
  t.l2_ahead = ops::param_or(e, ov, "L2_AHEAD", 0);
  if (t.l2_ahead < 0 || t.l2_ahead == 1 || t.l2_ahead > 8)
    rt::invalid("mla parameter L2_AHEAD = " + to_string(t.l2_ahead) + " must be 0 or in 2..8");

  // Tensor-core variant: capability (inline PTX, sm_80+), a 16-bit or fp8 latent, chunk
  // loads of 8 values (16 bytes, 8 for fp8) aligned, local memory for the tile.
  if (ops::param_or(e, ov, "MMA", 0) != 0) {
    std::string why;
    t.mma_warps = ops::param_or(e, ov, "MMA_WARPS", 4);
    t.mma_keys = ops::param_or(e, ov, "MMA_KEYS", 16);
    if (t.mma_warps != 2 && t.mma_warps != 4)
      rt::invalid("mla parameter MMA_WARPS = " + to_string(t.mma_warps) + " must be 2 or 4");
    if (t.mma_keys != 16 && t.mma_keys != 32)
      rt::invalid("mla parameter MMA_KEYS = " + to_string(t.mma_keys) + " must be 16 or 32");
    const bool dt_ok = c.dtype == DType::BF16 || c.dtype == DType::F16 || c.dtype == DType::FP8_E4M3 ||
                       c.dtype == DType::FP8_E5M2;
    t.fuse_merge = ops::param_or(e, ov, "FUSE_MERGE", 1) != 0;
    t.fuse_max_parts = ops::param_or(e, ov, "FUSE_MAX_PARTS", 8);
    const size_t lmax = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
    while (t.mma_keys > 16 && mma_local_bytes(t.mma_warps, t.mma_keys) > lmax) t.mma_keys /= 2;
    if (!params::variant_available(prof, "nv_mma_sync", &why))
      t.why_not_mma = why;
    else if (!dt_ok)  // int8: per-token scales are not in its fragments; the portable and cpu kernels read it
      t.why_not_mma = std::string("latent ") + dtype_name(c.dtype) + " (tensor cores take f16/bf16/fp8)";
    else if (!aligned(8 * int(es)))
      t.why_not_mma = "latent strides/offsets are not multiples of " + to_string(8 * es) + " bytes";
    else if (mma_local_bytes(t.mma_warps, t.mma_keys) > lmax)
      t.why_not_mma = "tile needs " + to_string(mma_local_bytes(t.mma_warps, t.mma_keys)) +
                      " bytes of local memory, device has " + to_string(lmax);
    else if (prof.max_work_group_size && size_t(32 * t.mma_warps) > prof.max_work_group_size)
      t.why_not_mma = "device allows " + to_string(prof.max_work_group_size) + " work-items per group";
    else
      t.mma = true;
  }
  return t;
}


// The kernel's candidates: the tensor-core variant first when chosen, then the CPU variant,
// then the register-blocked portable kernel, then the generic one (all take the same arguments
// and work entries: mla_run does not care which). sparse: every one built with SPARSE_IDX
// (sparse decode; each supports it, so none is skipped for it).
std::vector<ops::Variant> variants(const DeviceProfile& prof, const Tile& tile, const MlaCache& cache, bool extend,
                                   bool sparse = false) {
  const bool fuse = !extend && tile.fuse_merge;  // decode only: the extend split merges apart
  const std::string sparse_opt = sparse ? " -DSPARSE_IDX=1" : "";
  const std::string pf = ops::prefetch_builtin(prof);
  std::vector<ops::Variant> cands;
  // Every tile names its query vectors per work entry (QB), the keys its loop steps by (KEYS)
  // and its work-items (WG): the plan's work list reads them back.
  {
    ops::Variant mv;
    mv.name = "nv_mma_sync", mv.file = "mla_mma_nv.cl", mv.kernel = "mla_mma";
    mv.why_not = tile.mma ? "" : tile.why_not_mma.empty() ? "MMA = 0" : tile.why_not_mma;
    mv.wg = size_t(32 * tile.mma_warps), mv.local_bytes = mma_local_bytes(tile.mma_warps, tile.mma_keys);
    mv.options = rt::make_options({{"KV_DT", to_string(int(cache.dtype))}, {"WARPS", to_string(tile.mma_warps)},
                                   {"KEYS", to_string(tile.mma_keys)}, {"FUSE_MERGE", fuse ? "1" : "0"},
                                   {"L2_AHEAD", to_string(sparse ? tile.l2_ahead : 0)}}) + sparse_opt;
    if (sparse && tile.l2_ahead) mv.local_bytes += size_t(tile.l2_ahead + 1) * size_t(tile.mma_keys) * 8;  // the ring
    mv.tile = {{"QB", 16}, {"KEYS", tile.mma_keys}, {"WG", int(mv.wg)}};
    cands.push_back(mv);
  }
  // The cpu kernel: knobs QB, BK and LOCAL_BUFS, shrunk buffers to private memory first, then
  // keys per block, then query vectors (down to one vector).
  cands.push_back(ops::shrinkable(
      {{"QB", tile.cqb}, {"BK", tile.bk}, {"LOCAL_BUFS", tile.local_bufs ? 1 : 0}},
      [&prof, tile, cache, sparse_opt, pf](const ops::Tile& k) {
        Tile t = tile;
        t.cqb = ops::knob(k, "QB"), t.bk = ops::knob(k, "BK"), t.local_bufs = ops::knob(k, "LOCAL_BUFS") != 0;
        t.sk = std::min(t.sk, t.bk), t.oh = std::min(t.oh, t.cqb);
        ops::Variant cv;
        cv.name = "cpu", cv.file = "mla_cpu.cl", cv.kernel = "mla_cpu";
        cv.why_not = !tile.cpu ? "CPU_KERNEL = 0" : params::why_unavailable(prof, cv.name);
        if (cv.why_not.empty() && (t.cqb < t.vw || t.cqb % t.vw || t.bk < 1)) cv.why_not = "QB a multiple of VW";
        cv.wg = 1, cv.local_bytes = t.local_bufs ? cpu_local_bytes(t.cqb, t.bk) : 0;
        std::map<std::string, std::string> d = {
            {"KV_DT", to_string(int(cache.dtype))}, {"QB", to_string(t.cqb)}, {"VW", to_string(t.vw)},
            {"BK", to_string(t.bk)},             {"SK", to_string(t.sk)},  {"SD", to_string(t.sd)},
            {"OH", to_string(t.oh)},             {"OD", to_string(t.od)},  {"TOUCH_AHEAD", to_string(t.touch_ahead)},
            {"LOCAL_BUFS", t.local_bufs ? "1" : "0"}, {"PREFETCH_BUILTIN", pf}};
        if (cache.dtype == DType::FP8_E4M3 || cache.dtype == DType::FP8_E5M2) d["FP8_FAST"] = t.fp8_fast ? "1" : "0";
        cv.options = rt::make_options(d) + sparse_opt;
        cv.tile = k;
        cv.tile["KEYS"] = t.bk, cv.tile["WG"] = 1;
        ops::bound_trips(cv, t.cqb, kMlaCkvDim + kMlaKpeDim, kMlaCkvDim, 1, t.vw);
        return cv;
      },
      {{"LOCAL_BUFS", 0}, {"BK", 1}, {"QB", 4}}));
  // The register-blocked kernel: knobs QB and KT, shrunk query vectors first, then tile tokens.
  cands.push_back(ops::shrinkable(
      {{"QB", tile.tqb}, {"KT", tile.kt}},
      [tile, cache, sparse_opt](const ops::Tile& k) {
        Tile t = tile;
        t.tqb = ops::knob(k, "QB"), t.kt = ops::knob(k, "KT");
        t.mo = std::min(tile.mo, t.tqb);
        ops::Variant tv;
        tv.name = "tiled", tv.file = "mla_tiled.cl", tv.kernel = "mla_tiled";
        tv.why_not = tile.tiled ? "" : tile.why_not_tiled.empty() ? "TILED = 0" : tile.why_not_tiled;
        if (tv.why_not.empty() && (t.tqb < t.ms || t.kt < 4 || t.ds * t.mo < t.ms)) tv.why_not = "QB >= MS, KT >= 4";
        tv.wg = t.tiled_wg(), tv.local_bytes = tiled_local_bytes(t.tqb, t.kt, t.ds);
        tv.options = rt::make_options({{"KV_DT", to_string(int(cache.dtype))}, {"QB", to_string(t.tqb)},
                                       {"KT", to_string(t.kt)}, {"MS", to_string(t.ms)}, {"DS", to_string(t.ds)},
                                       {"DSW", to_string(t.dsw)}, {"MO", to_string(t.mo)},
                                       {"LOAD_BYTES", to_string(t.load_bytes)},
                                       {"UNROLL_HINTS", t.unroll ? "1" : "0"}}) + sparse_opt;
        tv.tile = k;
        tv.tile["KEYS"] = t.kt, tv.tile["WG"] = int(tv.wg);
        ops::bound_trips(tv, t.tqb, kMlaCkvDim + kMlaKpeDim, kMlaCkvDim, int64_t(tv.wg), 4);
        return tv;
      },
      {{"QB", 1}, {"KT", 4}}));
  // The portable kernel: knob QB (work-items QB x LANES), shrunk down to one query vector.
  cands.push_back(ops::shrinkable(
      {{"QB", tile.qb}},
      [tile, cache, sparse_opt](const ops::Tile& k) {
        Tile t = tile;
        t.qb = ops::knob(k, "QB");
        ops::Variant gv;
        gv.name = "generic", gv.file = "mla.cl", gv.kernel = "mla_attn";
        if (t.qb < 1) gv.why_not = "QB >= 1";
        gv.wg = size_t(t.qb) * t.lanes, gv.local_bytes = local_bytes(t, cache.dtype);
        gv.options = rt::make_options({{"KV_DT", to_string(int(cache.dtype))}, {"QB", to_string(t.qb)},
                                       {"LANES", to_string(t.lanes)}, {"LOAD_BYTES", to_string(t.load_bytes)}}) +
                     sparse_opt;
        gv.tile = k;
        gv.tile["KEYS"] = t.lanes, gv.tile["WG"] = int(gv.wg);
        ops::bound_trips(gv, t.qb, kMlaCkvDim + kMlaKpeDim, kMlaCkvDim, int64_t(gv.wg), 1);
        return gv;
      },
      {{"QB", 1}}));
  return cands;
}

// mla_append.cl: no build parameters; 16 work-items per token on CPUs, 64 elsewhere (at most
// 64: append_latent_i8's local maxima).
// A launch choice, not a build option: fewer where the compiled kernel allows fewer.
ops::Variant append_variant(const DeviceProfile& prof, const std::string& kernel = "append_latent") {
  return ops::wg_variant("generic", "mla_append.cl", kernel, "WG", prof.is_cpu ? 16 : 64, 1,
                         [](int) { return rt::make_options({}); });
}

// topk > 0: sparse decode over index lists of topk entries per request (the decode
// parameters and kernels, built with SPARSE_IDX).
MlaPlan make_plan(const Context& ctx, const Requests& r, bool page_table, bool extend, const MlaCache& cache,
                  const MlaOptions& opt, cl_command_queue queue, int topk = 0) {
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

}  // namespace

namespace {
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

namespace {
// mla_run (sparse false) and mla_sparse_run (sparse true, with the plan's indices).
void run_plan(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, cl_mem indices, const Enqueue& e,
              bool sparse) {
  const MlaPlanState* st = plan.state_.get();
  const char* fn = sparse ? "mla_sparse_run" : "mla_run";  // (messages are built only on failure)
  if (!st)
    rt::invalid(std::string(fn) + ": empty plan (make one with " +
                (sparse ? "mla_sparse_decode_plan)" : "mla_decode_plan / mla_extend_plan)"));
  if (st->topk > 0 && !sparse)
    rt::invalid(std::string(fn) + ": the plan is a sparse decode plan (mla_sparse_decode_plan); run it with "
                                  "mla_sparse_run and its indices");
  if (st->topk == 0 && sparse)
    rt::invalid(std::string(fn) + ": the plan is not a sparse decode plan (make one with mla_sparse_decode_plan)");
  if (!(b.kv_scale > 0.0f) || !std::isfinite(b.kv_scale))
    rt::invalid(std::string(fn) + ": kv_scale = " + to_string(b.kv_scale) + ", must be finite and > 0");
  const bool i8 = st->cache.dtype == DType::I8;
  if (i8 && b.kv_scale != 1.0f)
    rt::invalid(std::string(fn) + ": kv_scale must be 1 for an int8 latent cache (each token carries its own "
                                  "scales; got " + to_string(b.kv_scale) + ")");
  const int T = st->T, H = st->H;
  cl_command_queue q = ops::queue_of(ctx, e);
  if (T > 0) {
    ops::require_buffer(b.q_nope, st->q_nope_bytes, "q_nope", {{T, H, kMlaCkvDim}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.q_pe, st->q_pe_bytes, "q_pe", {{T, H, kMlaKpeDim}, dtype_name(st->q_dtype)});
    ops::require_buffer(b.o, st->o_bytes, "o", {{T, H, kMlaCkvDim}, dtype_name(st->o_dtype)});
    if (b.lse) ops::require_buffer(b.lse, st->lse_bytes, "lse", {{T, H}, "f32"});
    if (st->topk > 0) ops::require_buffer(indices, st->index_bytes, "indices", {{T, st->topk}, "i32"});
  }
  if (st->num_work > 0) {
    if (st->cache.num_pages > 0) {
      ops::require_buffer(b.ckv, st->ckv_bytes, "ckv",
                          {{st->cache.num_pages, st->cache.page_size}, dtype_name(st->cache.dtype), "latent cache "});
      if (!st->cache.single_buffer)
        ops::require_buffer(b.kpe, st->kpe_bytes, "kpe",
                            {{st->cache.num_pages, st->cache.page_size}, dtype_name(st->cache.dtype), "kpe cache "});
      if (i8) require_latent_scales(st->cache, b.scale_cache);
    }
    if (st->page_id_bytes > 0)
      ops::require_buffer(b.page_ids, st->page_id_bytes, "page_ids",
                          {{st->page_id_bytes / 4}, "i32", st->page_table ? "page_table " : "kv_indices "});
    if (st->workspace_bytes > 0)
      ops::require_buffer(b.workspace, st->workspace_bytes, "workspace",
                          {{st->num_partials, H, kMlaCkvDim}, "f32 partial states and their lse"});
  }
  ops::WaitList wl(e, st->upload);
  if (st->num_work == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  auto& c = rt::impl(ctx);
  cl_mem dummy = st->table;  // bound for unused optional buffers (never read or written)
  cl_mem ckv = b.ckv ? b.ckv : dummy;
  cl_mem kpe = st->cache.single_buffer ? ckv : (b.kpe ? b.kpe : dummy);
  cl_mem page_ids = b.page_ids ? b.page_ids : dummy;
  cl_mem lse = b.lse ? b.lse : dummy;
  cl_mem ws = st->workspace_bytes > 0 ? b.workspace : dummy;
  const bool merge = st->num_merges > 0 && !st->fuse;
  const size_t gws[1] = {size_t(st->num_work) * st->wg}, lws[1] = {st->wg};
  cl_event ev1 = nullptr;
  // The arguments every variant takes, then `tail`: the fused merge's (nv_mma_sync with
  // FUSE_MERGE), then the index list's (sparse builds), then the scale cache's (int8 latents).
  auto launch_with = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... tail) {
    st->attn_k->launch(q, 1, gws, lws, nwait, wait, ev, b.q_nope, b.q_pe, cl_int(st->q_dtype), ckv, kpe, page_ids,
                       st->table, cl_int(st->work_off), b.o, cl_int(st->o_dtype), lse, cl_int(b.lse != nullptr), ws,
                       cl_ulong(st->lse_off_floats), cl_int(H), cl_long(st->ckv_sp), cl_long(st->ckv_st),
                       cl_long(st->kpe_sp), cl_long(st->kpe_st), cl_long(st->kpe_base), cl_int(st->log2_page),
                       cl_float(st->q_scale * b.kv_scale), cl_float(b.kv_scale), cl_int(st->cache.num_pages),
                       c.faults, tail...);
  };
  auto launch_i8 = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... tail) {
    if (i8)
      launch_with(nwait, wait, ev, tail..., b.scale_cache, cl_long(st->cache.scale_page_stride()),
                  cl_long(st->cache.scale_token_stride()), cl_int(st->cache.scale_dtype == DType::F16));
    else
      launch_with(nwait, wait, ev, tail...);
  };
  auto launch_sparse = [&](cl_uint nwait, const cl_event* wait, cl_event* ev, auto... fused) {
    if (st->topk > 0) launch_i8(nwait, wait, ev, fused..., indices, cl_int(st->topk));
    else launch_i8(nwait, wait, ev, fused...);
  };
  if (st->fuse_kernel) {  // the counter arguments are passed even when this plan merges separately
    auto launch = [&](int counter_off, cl_uint nwait, const cl_event* wait, cl_event* ev) {
      launch_sparse(nwait, wait, ev, st->table, cl_int(st->merge_off), cl_int(st->pmap_off), cl_int(counter_off),
                    cl_int(st->n_hblk));
    };
    if (st->sets.per_set > 0) {
      st->sets.run(q, wl, e.event, launch);
      return;
    }
    launch(0, wl.size(), wl.data(), (merge || e.event) ? &ev1 : nullptr);
  } else {
    launch_sparse(wl.size(), wl.data(), (merge || e.event) ? &ev1 : nullptr);
  }
  if (!merge) {
    if (e.event) *e.event = ev1;
    return;
  }
  const int cb = ops::merge_col_blocks(c.profile, st->num_merges, H, kMlaCkvDim);
  const size_t mg[2] = {size_t(st->num_merges) * size_t(cb) * st->merge_wg, size_t(H)}, ml[2] = {st->merge_wg, 1};
  try {
    st->merge_k->launch(q, 2, mg, ml, 1, &ev1, e.event, st->table, cl_int(st->merge_off), ws,
                        cl_ulong(st->lse_off_floats), b.o, cl_int(st->o_dtype), lse, cl_int(b.lse != nullptr), dummy,
                        cl_int(0), cl_int(H), cl_int(kMlaCkvDim), cl_int(cb));
  } catch (...) {
    clReleaseEvent(ev1);
    throw;
  }
  clReleaseEvent(ev1);
}
}  // namespace

void mla_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, const Enqueue& e) {
  run_plan(ctx, plan, b, nullptr, e, false);
}

void mla_sparse_run(const Context& ctx, const MlaPlan& plan, const MlaBuffers& b, cl_mem indices, const Enqueue& e) {
  run_plan(ctx, plan, b, indices, e, true);
}

// ------------------------------------------------------------------------ append_latent
void append_latent(const Context& ctx, const AppendLatentArgs& a, const Enqueue& e) {
  auto& c = rt::impl(ctx);
  check_cache(a.cache, "cache");
  ops::require_io_dtype(a.src_dtype, "src_dtype");
  if (a.slot_dtype != DType::I32 && a.slot_dtype != DType::I64)
    rt::invalid("slot_dtype " + std::string(dtype_name(a.slot_dtype)) + " must be i32 or i64");
  if (a.num_tokens < 0) rt::invalid("num_tokens = " + to_string(a.num_tokens) + ", must be >= 0");
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) rt::invalid("scale = " + to_string(a.scale) + ", must be > 0");
  const bool i8 = a.cache.dtype == DType::I8;
  if (i8 && a.scale != 1.0f)
    rt::invalid("append_latent: scale must be 1 for an int8 latent cache (each token gets its own scales; got " +
                to_string(a.scale) + ")");
  const int64_t s_ckv = a.src_stride_ckv ? a.src_stride_ckv : kMlaCkvDim;
  const int64_t s_kpe = a.src_stride_kpe ? a.src_stride_kpe : kMlaKpeDim;
  if (s_ckv < kMlaCkvDim || s_kpe < kMlaKpeDim)
    rt::invalid("src strides (" + to_string(s_ckv) + ", " + to_string(s_kpe) + ") must be >= 512 and >= 64");
  const CacheShape shape{a.cache.num_pages, a.cache.page_size};
  if (a.slot_mapping_host) {
    if (a.slot_dtype == DType::I32)
      validate_slot_mapping(static_cast<const int32_t*>(a.slot_mapping_host), a.num_tokens, shape);
    else
      validate_slot_mapping(static_cast<const int64_t*>(a.slot_mapping_host), a.num_tokens, shape);
  }
  cl_command_queue q = ops::queue_of(ctx, e);
  if (a.num_tokens > 0) {
    namespace ck = rt::checked;
    const int64_t ss = int64_t(dtype_size(a.src_dtype)), n = a.num_tokens;
    const int64_t ckv_bytes = ck::mul(ck::mul_add(n - 1, s_ckv, kMlaCkvDim, "ckv rows"), ss, "ckv bytes");
    const int64_t kpe_bytes = ck::mul(ck::mul_add(n - 1, s_kpe, kMlaKpeDim, "kpe rows"), ss, "kpe bytes");
    ops::require_buffer(a.ckv, ckv_bytes, "ckv", {{a.num_tokens, kMlaCkvDim}, dtype_name(a.src_dtype)});
    ops::require_buffer(a.kpe, kpe_bytes, "kpe", {{a.num_tokens, kMlaKpeDim}, dtype_name(a.src_dtype)});
    ops::require_buffer(a.slot_mapping, ck::mul(n, int64_t(dtype_size(a.slot_dtype)), "slot_mapping bytes"),
                        "slot_mapping", {{a.num_tokens}, dtype_name(a.slot_dtype)});
    if (a.cache.num_pages > 0) {
      const ops::Shape cache{{a.cache.num_pages, a.cache.page_size}, dtype_name(a.cache.dtype), "latent cache "};
      ops::require_buffer(a.ckv_cache, a.cache.ckv_required_bytes(), "ckv_cache", cache);
      if (!a.cache.single_buffer) ops::require_buffer(a.kpe_cache, a.cache.kpe_required_bytes(), "kpe_cache", cache);
      if (i8) require_latent_scales(a.cache, a.scale_cache);
    }
  }
  ops::WaitList wl(e, nullptr);
  if (a.num_tokens == 0 || a.cache.num_pages == 0) {
    ops::enqueue_marker(q, wl.size(), wl.data(), e.event);
    return;
  }
  const ops::BuiltVariant av = ops::select_and_build(c, "mla_append", {append_variant(c.profile, i8 ? "append_latent_i8" : "append_latent")});
  auto prog = av.program;
  const size_t wg = av.variant.wg;
  const size_t gws[1] = {size_t(rt::checked::mul(a.num_tokens, int64_t(wg), "append_latent work-items"))},
               lws[1] = {wg};
  cl_mem kc = a.cache.single_buffer ? a.ckv_cache : a.kpe_cache;
  if (i8) {
    prog->kernel("append_latent_i8")
        .launch(q, 1, gws, lws, wl.size(), wl.data(), e.event, a.ckv, a.kpe, cl_int(a.src_dtype), cl_long(s_ckv),
                cl_long(s_kpe), a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(a.num_tokens),
                a.ckv_cache, kc, cl_long(a.cache.ckv_page_stride()), cl_long(a.cache.ckv_token_stride()),
                cl_long(a.cache.kpe_page_stride()), cl_long(a.cache.kpe_token_stride()), cl_long(a.cache.kpe_base()),
                cl_long(a.cache.page_size), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size), a.scale_cache,
                cl_long(a.cache.scale_page_stride()), cl_long(a.cache.scale_token_stride()),
                cl_int(a.cache.scale_dtype == DType::F16), rt::impl(ctx).faults);
    return;
  }
  prog->kernel("append_latent")
      .launch(q, 1, gws, lws, wl.size(), wl.data(), e.event, a.ckv, a.kpe, cl_int(a.src_dtype), cl_long(s_ckv),
              cl_long(s_kpe), a.slot_mapping, cl_int(a.slot_dtype == DType::I64), cl_long(a.num_tokens), a.ckv_cache,
              kc, cl_int(a.cache.dtype), cl_long(a.cache.ckv_page_stride()), cl_long(a.cache.ckv_token_stride()),
              cl_long(a.cache.kpe_page_stride()), cl_long(a.cache.kpe_token_stride()), cl_long(a.cache.kpe_base()),
              cl_long(a.cache.page_size), cl_long(int64_t(a.cache.num_pages) * a.cache.page_size), cl_float(a.scale),
              rt::impl(ctx).faults);
}

namespace ops {

// Decode at 16 and 128 heads (dense and sparse), extend; every latent dtype (int8: dense
// decode at 16 heads); the latent appender.
void catalog_mla(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (int kind : {0, 1, 2})  // decode, sparse decode, extend
    for (DType dt : {DType::BF16, DType::FP8_E4M3, DType::F32, DType::I8})
      for (int heads : {16, 128}) {
        const bool extend = kind == 2, sparse = kind == 1;
        if (extend && heads != 16) continue;
        if (dt == DType::I8 && (kind != 0 || heads != 16)) continue;
        const std::string shape =
            std::string(dtype_name(dt)) + " H" + std::to_string(heads) + (sparse ? " sparse" : "");
        catalog_add(out, extend ? "mla_extend" : "mla_decode", shape, [&] {
          MlaCache cache;
          cache.num_pages = 1024, cache.page_size = 64, cache.dtype = dt;
          MlaOptions opt;
          opt.num_heads = heads, opt.sm_scale = 0.1f;
          const auto tile = choose_tile(t.profile, cache, opt, extend, t.preferred_float_width, t.fp32_denorms);
          return variants(t.profile, tile, cache, extend, sparse);
        });
      }
  catalog_add(out, "mla_append", "*", [&] { return std::vector<Variant>{append_variant(t.profile)}; });
}

}  // namespace ops

}  // namespace clattn
