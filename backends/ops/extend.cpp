// Extend / prefill: plan (host: argument and metadata checks, tile work list, kernel
// choice with fallback, one non-blocking upload) and run (buffer-size checks, enqueue).
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/metadata/requests.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "backends/ops/extend.hpp"
#include "backends/dispatch/catalog.hpp"
#include "runtime/ptx_retarget.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace detail {

struct ExtendPlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> prog;
  rt::Kernel* kernel = nullptr;
  size_t wg = 0;
  int group = 1;
  bool paged = true, causal = true;
  int window_left = -1, page_size = 1;
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;
  float q_scale = 1.0f, cap_log2 = 0.0f, inv_cap = 0.0f;
  // TMA feed (nv_wgmma with MMA_TMA): the tensor-map kernel run before the main one writes the
  // K and V maps into the first 256 bytes of the caller's workspace (per-run state: the plan's
  // table stays read-only); its arguments (dims innermost first, byte strides of dims 1..3,
  // box rows of dims 1 and 2).
  std::shared_ptr<rt::Program> maps_prog;
  rt::Kernel* maps_kernel = nullptr;
  cl_uint map_dims[4] = {0, 0, 0, 0}, map_box[2] = {0, 0};
  cl_ulong map_strides[3] = {0, 0, 0};

  // The run's view of the plan, fixed when it is made (ExtendPlan's public fields are
  // informational: a caller may edit its copy). Byte sizes by checked arithmetic.
  int64_t T = 0;
  int Hq = 0, Hkv = 0, D = 0, num_tiles = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16, kv_dtype = DType::BF16;
  ExtendPlan::Source source = ExtendPlan::Source::PagedCsr;
  int num_pages = 0;  // paged: the pool the kernels check page ids against
  bool has_mask = false;
  int64_t q_bytes = 0, o_bytes = 0, lse_bytes = 0, sinks_bytes = 0, kv_bytes = 0, page_id_bytes = 0;
  int64_t mask_bytes = 0, workspace_bytes = 0;
  std::string kv_shape;  // for messages
  // The cache the scale checks read (paged: the plan's; ragged: heads and dtype only), and the
  // int8 / int4 scale caches' bytes, strides (elements) and dtype flag.
  PagedKV scales_of;
  int64_t scale_bytes = 0, sc_page = 0, sc_token = 0, sc_head = 0;
  int sc_f16 = 0;

  void freeze(const ExtendPlan& p, int64_t kv_required) {
    namespace ck = rt::checked;
    T = p.num_tokens, Hq = p.num_qo_heads, Hkv = p.num_kv_heads, D = p.head_dim, num_tiles = p.num_tiles;
    q_dtype = p.q_dtype, o_dtype = p.o_dtype, kv_dtype = p.kv_dtype, source = p.source;
    num_pages = p.cache.num_pages, has_mask = p.has_mask;
    const ops::RowBytes rb = ops::row_bytes(ck::mul(T, Hq, "extend q/o rows (num_tokens x num_qo_heads)"), D,
                                            q_dtype, D, o_dtype, p.page_ids_needed);
    q_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    sinks_bytes = ck::mul(Hq, 4, "sinks bytes");
    kv_bytes = kv_required;
    mask_bytes = p.mask_bytes_needed;
    workspace_bytes = p.workspace_bytes;
    if (source == ExtendPlan::Source::Ragged) {
      scales_of.num_kv_heads = p.num_kv_heads, scales_of.head_dim = p.head_dim, scales_of.dtype = p.kv_dtype;
    } else {
      scales_of = p.cache;
    }
    if (p.kv_dtype == DType::I8 || p.kv_dtype == DType::I4) {
      scale_bytes = p.cache.scale_required_bytes();
      sc_page = p.cache.scale_page_stride(), sc_token = p.cache.scale_token_stride();
      sc_head = p.cache.scale_head_stride(), sc_f16 = p.cache.scale_dtype == DType::F16;
    }
  }
};

}  // namespace detail

namespace {

using detail::ExtendPlanState;
using std::to_string;


// Work items of one plan: its table is 8 int32 per item (512 MiB at this bound).
constexpr int64_t kMaxWorkItems = int64_t(1) << 24;

// What the kernel sees of the KV source, whatever its form.
struct KVDesc {
  bool paged = true;
  int num_kv_heads = 0, head_dim = 0, page_size = 1;
  DType dtype = DType::BF16;
  int quant_group = 0;  // int4: head-dim elements per [scale, zero] pair
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;
  int64_t num_pages = 0;   // paged: pages in the cache (a tensor map's outer dim)
  int64_t num_tokens = 0;  // ragged: tokens in the buffer
};

// Floats a key carries beside its row per side in the portable and cpu kernels (KV_META,
// cl_kernels/extend_kv.clh): int8 its row scale, int4 a (scale, zero) pair per group.
int kv_meta(const KVDesc& kv) {
  if (kv.dtype == DType::I8) return 1;
  if (kv.dtype == DType::I4) return 2 * (kv.head_dim / kv.quant_group);
  return 0;
}

// The quantised formats' build options beside KV_DT (int4: its group).
void add_quant_defs(const KVDesc& kv, std::map<std::string, std::string>& d) {
  if (kv.dtype == DType::I4) d["QGROUP"] = to_string(kv.quant_group);
}

// Per-request rows of the work list.
struct Requests {
  std::vector<int32_t> qo_start, qo_len, kv_len, base, tok_off, mask_off;
  int64_t num_tokens = 0;
  int64_t page_ids_needed = 0;
  int64_t mask_bytes = 0;
  int size() const { return int(qo_len.size()); }
};

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

// The tile of one build: which kernel (variant and source file), its work-group, rows and
// keys per step.
struct Tile {
  std::string variant, file, kernel;
  int wg = 0, rows = 0, keys = 0;
  bool tma = false;  // nv_wgmma fed by TMA (runs tma_maps_nv.cl first)
  std::string options;
  size_t local_bytes = 0;  // the estimate below (a pre-filter; the driver's figure decides)
};

// The portable kernel's tile (cl_kernels/extend.cl): WG work-items as a (ROWS / TM) x TX grid.
struct GenericTile {
  int wg, rows, keys, tm, dc, vc, qres;
  int tx() const { return wg / (rows / tm); }
};
// extend.cl: the stage (Q and K chunks [ROWS + KEYS][DC + 4], or with QRES K chunks
// [KEYS][DC + 4]; or a V chunk [VC][D + 4]), with QRES the Q rows [ROWS][D + 4], P^T
// [KEYS][ROWS + 4], the row partials [ROWS][TX + 4] (floats), KEYS row offsets (long) and
// the K and V meta of a quantised tile (2 x KEYS x `meta` floats, kv_meta; other builds never
// read their one-float placeholder, which the compilers drop).
size_t generic_local_bytes(const GenericTile& g, int d, int meta = 0) {
  const size_t srows = size_t(g.qres ? g.keys : g.rows + g.keys);
  const size_t stage = std::max(srows * (g.dc + 4), size_t(g.vc) * (d + 4));
  const size_t qs = g.qres ? size_t(g.rows) * (d + 4) : 0;
  const size_t scales = 2 * size_t(g.keys) * size_t(meta);
  return (stage + qs + size_t(g.keys) * (g.rows + 4) + size_t(g.rows) * (g.tx() + 4) + scales) * 4 +
         size_t(g.keys) * 8;
}
// "" when the tile's divisibility rules hold (the kernel's #error line), else which fails.
std::string generic_unfit(const GenericTile& g, int d) {
  if (g.wg < 1 || g.rows < 1 || g.keys < 1 || g.tm < 1 || g.dc < 1 || g.vc < 1) return "every value must be >= 1";
  if (g.tm % 4 != 0 || g.rows % g.tm != 0) return "TM must be a multiple of 4 dividing ROWS";
  if (g.wg % (g.rows / g.tm) != 0) return "WG must be a multiple of ROWS / TM";
  if (g.keys % g.tx() != 0) return "KEYS must be a multiple of TX = WG / (ROWS / TM) = " + to_string(g.tx());
  if (g.dc % 4 != 0 || d % g.dc != 0) return "DC must be a multiple of 4 dividing head_dim " + to_string(d);
  if (g.keys % g.vc != 0) return "VC must divide KEYS";
  return "";
}
// extend_mma_nv.cl: Ks [keys][KRS words] (rows swizzled when d/8 is a multiple of 8, else
// padded to 16 mod 32 words) and key row offsets of two tiles [2][keys] (long), plus the feed's
// V: register staging (extend_mma_feed_regs_nv.clh) one Ks and a transposed Vt [d][keys/2
// words]; ASYNC (cp.async, 16-bit KV, extend_mma_feed_cpasync_nv.clh) two stages of Ks and of V
// rows (d / 8 chunks, padded to an odd count unless a multiple of 8).
size_t mma_local_bytes(int keys, int d, bool async) {
  const int half = d / 2, cpr = d / 8;
  const int krs = cpr % 8 == 0 ? half : half + (48 - half % 32) % 32;
  if (async) return 2 * size_t(keys) * krs * 4 + 2 * size_t(keys) * size_t(cpr % 8 == 0 ? cpr : cpr | 1) * 16 +
                    size_t(keys) * 2 * 8;
  return size_t(keys) * krs * 4 + size_t(d) * (keys / 2) * 4 + size_t(keys) * 2 * 8;
}

// extend_wgmma_nv.cl: three K and three V stages in core-matrix layout (unpadded); row offsets
// stay in registers (extend_wgmma_feed_cpasync_nv.clh). TMA (extend_wgmma_feed_tma_nv.clh):
// five stages (TK_ST + TV_ST), 1 KB of alignment slack, a full and an empty mbarrier per
// stage, the table of `pages` page ids (TMA_PAGES) and one run flag per warp (prun).
size_t wgmma_local_bytes(int keys, int d, bool tma, int pages = 1024, int warps = 12) {
  return tma ? 5 * size_t(keys) * d * 2 + 1024 + 10 * 8 + 4 * size_t(pages) + 4 * size_t(warps)
             : 6 * size_t(keys) * d * 2;
}

// Why the TMA feed cannot serve these requests ("" when it can): its 16-key boxes must not
// cross a page, its strides are whole 16 bytes (checked with the other tensor-core
// conditions) and its coordinates 32-bit.
std::string tma_unfit(const KVDesc& kv, const std::vector<int32_t>& tok_off) {
  if (kv.paged && kv.page_size % 16 != 0) return "page_size " + to_string(kv.page_size) + " is not a multiple of 16";
  for (size_t i = 0; i < tok_off.size(); ++i)
    if (tok_off[i] % 16 != 0)
      return "request " + to_string(i) + " starts at offset " + to_string(tok_off[i]) + " of its first page";
  if ((kv.paged ? kv.num_pages : kv.num_tokens) >= (int64_t(1) << 31)) return "more than 2^31 pages or tokens";
  return "";
}

using ops::param;

// The Intel matrix-engine kernel's tile (cl_kernels/extend_dpas_intel.cl): RG x CG sub-groups
// of SG work-items, 8 x RB rows per sub-group, KEYS keys per tile.
struct DpasTile {
  int sg, rb, rg, cg, keys;
  int wg() const { return rg * cg * sg; }
  int rows() const { return rg * 8 * rb; }
};
// Q rows and P as 16-bit values, the scores [ROWS][KEYS + 1], the per-row partials
// [ROWS][WG / ROWS], factors (floats) and query positions (int), KEYS row offsets (long);
// emulated, one A operand per work-item (int8 at SG 8, short8 at SG 16).
size_t dpas_local_bytes(const DpasTile& t, int d, bool emulated) {
  const size_t rows = size_t(t.rows()), keys = size_t(t.keys);
  return rows * d * 2 + rows * (keys + 1) * 4 + rows * keys * 2 + rows * (size_t(t.wg()) / rows + 2) * 4 +
         keys * 8 + (emulated ? size_t(t.wg()) * (t.sg == 8 ? 32 : 16) : 0);
}

// The intel_dpas candidate where it applies ("" in *why_not), else why not.
Tile dpas_candidate(const DeviceProfile& prof, const KVDesc& kv, const params::Entry& e,
                    const std::map<std::string, int>& over, size_t lmax, std::string* why_not) {
  Tile t;
  const int d = kv.head_dim;
  if (!params::variant_available(prof, "intel_dpas", why_not)) return t;
  why_not->clear();
  if (kv.dtype != DType::F16 && kv.dtype != DType::BF16) {
    *why_not = "KV dtype " + std::string(dtype_name(kv.dtype)) + " (the kernel takes f16 and bf16 KV)";
    return t;
  }
  DpasTile dt{ops::param_or(e, over, "DPAS_SG", 16), ops::param_or(e, over, "DPAS_RB", 1),
              ops::param_or(e, over, "DPAS_RG", 4), ops::param_or(e, over, "DPAS_CG", 2),
              ops::param_or(e, over, "DPAS_KEYS", 64)};
  if (dt.sg != 8 && dt.sg != 16) rt::invalid("extend parameter DPAS_SG = " + to_string(dt.sg) + " must be 8 or 16");
  if (dt.rb < 1 || dt.rg < 1 || dt.cg < 1 || (dt.cg & (dt.cg - 1)) != 0)
    rt::invalid("extend parameters DPAS_RB = " + to_string(dt.rb) + ", DPAS_RG = " + to_string(dt.rg) +
                ", DPAS_CG = " + to_string(dt.cg) + ": each >= 1, DPAS_CG a power of two");
  if (dt.keys < 16 || dt.keys % (16 * dt.cg) != 0)
    rt::invalid("extend parameter DPAS_KEYS = " + to_string(dt.keys) + " must be a multiple of 16 x DPAS_CG = " +
                to_string(16 * dt.cg));
  if ((dt.cg * dt.sg) % (8 * dt.rb) != 0)
    rt::invalid("extend parameters DPAS_CG = " + to_string(dt.cg) + ", DPAS_SG = " + to_string(dt.sg) +
                ", DPAS_RB = " + to_string(dt.rb) + ": DPAS_CG x DPAS_SG must be a multiple of 8 x DPAS_RB");
  // (The emulation takes either size.)
  const bool emulated = params::emulated(prof, "cl_intel_subgroup_matrix_multiply_accumulate");
  if (!emulated && !prof.subgroup_sizes.empty() &&
      std::find(prof.subgroup_sizes.begin(), prof.subgroup_sizes.end(), unsigned(dt.sg)) == prof.subgroup_sizes.end()) {
    *why_not = "sub-group size DPAS_SG = " + to_string(dt.sg) + " not among the device's";
    return t;
  }
  if (d % 16 != 0) {
    *why_not = "head_dim " + to_string(d) + " is not a multiple of 16";
    return t;
  }
  // Head dims that CG x SG columns do not divide (80 at SG 16 and 8): fewer column groups, and
  // fewer keys per tile with them so that each sub-group's S block stays KEYS / CG keys (the
  // softmax's work-items per row shrink with them; RB follows).
  const int cg_asked = dt.cg;
  while (dt.cg > 1 && d % (dt.cg * dt.sg) != 0) dt.cg /= 2, dt.keys /= 2;
  if ((dt.cg * dt.sg) % (8 * dt.rb) != 0) dt.rb = 1;
  if (d % (dt.cg * dt.sg) != 0) {
    *why_not = "head_dim " + to_string(d) + " is not a multiple of DPAS_SG = " + to_string(dt.sg);
    return t;
  }
  while (dpas_local_bytes(dt, d, emulated) > lmax && dt.keys > 16 * dt.cg) dt.keys /= 2;
  if (dpas_local_bytes(dt, d, emulated) > lmax) {
    *why_not = "the tile needs " + to_string(dpas_local_bytes(dt, d, emulated)) +
               " bytes of local memory, device has " + to_string(lmax);
    return t;
  }
  if (prof.max_work_group_size && size_t(dt.wg()) > prof.max_work_group_size) {
    *why_not = to_string(dt.wg()) + " work-items per group (DPAS_RG x DPAS_CG x DPAS_SG), device allows " +
               to_string(prof.max_work_group_size);
    return t;
  }
  t.variant = "intel_dpas", t.file = "extend_dpas_intel.cl", t.kernel = "extend_dpas_intel";
  t.wg = dt.wg(), t.rows = dt.rows(), t.keys = dt.keys;
  std::map<std::string, std::string> defs = {
      {"HEAD_DIM", to_string(d)},     {"KV_DT", to_string(int(kv.dtype))}, {"SG", to_string(dt.sg)},
      {"RB", to_string(dt.rb)},       {"RG", to_string(dt.rg)},            {"CG", to_string(dt.cg)},
      {"KEYS", to_string(dt.keys)},   {"UNROLL_HINTS", prof.is_cpu ? "0" : "1"}};
  // DPAS_GRF 128: the build keeps IGC's small register file where the device's default is the
  // large one (rt::device_build_options reads CLATTN_GRF); not where the column groups were
  // lowered (D = 80), whose work-items hold twice the O and need the large file.
  if (ops::param_or(e, over, "DPAS_GRF", 0) == 128 && dt.cg == cg_asked) defs["CLATTN_GRF"] = "128";
  ops::add_emulation(prof, "cl_intel_subgroup_matrix_multiply_accumulate", defs);
  t.options = rt::make_options(defs);
  t.local_bytes = dpas_local_bytes(dt, d, emulated);
  return t;
}

// The CPU kernel's tile (cl_kernels/extend_cpu.cl): one work-item, ROWS = RV x VW packed rows,
// BK keys per block, SK x RV and PD x RV vector accumulators in its two micro-kernels.
struct CpuTile {
  int vw, rv, bk, sk, pd;
  int rows() const { return rv * vw; }
};
// Q^T and O^T [D][ROWS], the K and V blocks [BK][D], S^T [BK][ROWS] (floats).
size_t cpu_local_bytes(const CpuTile& t, int d) {
  return (2 * size_t(d) * t.rows() + 2 * size_t(t.bk) * d + size_t(t.bk) * t.rows()) * 4;
}
// The CPU tile from the parameters: VW 0 = the device's preferred float width (4, 8 or 16,
// lowered to divide head_dim); SK / PD 0 = 8 with 16-wide vectors (32 vector registers on
// AVX-512), else 4 (16 on AVX2).
CpuTile cpu_tile(const params::Entry& e, const std::map<std::string, int>& over, int d, int preferred_width) {
  CpuTile t{ops::cpu_vector_width(ops::param_or(e, over, "VW", 0), preferred_width, d, "extend"),
            ops::param_or(e, over, "RV", 2), ops::param_or(e, over, "BK", 32), ops::param_or(e, over, "SK", 0),
            ops::param_or(e, over, "PD", 0)};
  if (t.sk == 0) t.sk = t.vw >= 16 ? 8 : 4;
  if (t.pd == 0) t.pd = t.vw >= 16 ? 8 : 4;
  if (t.rv < 1 || t.rv > 8) rt::invalid("extend parameter RV = " + to_string(t.rv) + " must be 1..8");
  if (t.bk < 1 || t.bk > 64 || t.sk < 1 || t.bk % t.sk != 0)
    rt::invalid("extend parameters BK = " + to_string(t.bk) + ", SK = " + to_string(t.sk) +
                ": BK must be 1..64 and a multiple of SK");
  if (t.pd < 1 || d % t.pd != 0)
    rt::invalid("extend parameter PD = " + to_string(t.pd) + " must divide head_dim " + to_string(d));
  return t;
}

// The AMD matrix-instruction kernels (cl_kernels/extend_amd_mm.clh): WAVES waves of `wave`
// lanes in row blocks of WSPLIT waves, 16 packed rows per block. Local memory: Q rows and P
// per block ([16][D + 8], [16][KEYS + 8] 16-bit), K rows [KEYS][D + 8] and V^T [D][KEYS + 8]
// (16-bit), S per block [16][KEYS + 4] and the row partials (floats), KEYS row offsets (long)
// and flags (int), plus the emulation's operand exchange (per work-item: 32 16-bit values
// for WMMA, 8 for MFMA) where it is emulated.
struct AmdMmTile {
  int waves, wsplit, keys, wave;
  int rb() const { return waves / wsplit; }
  int wg() const { return waves * wave; }
};
size_t amd_mm_local_bytes(const AmdMmTile& t, int d, int emul_per_item) {
  const size_t rb = size_t(t.rb()), ng = size_t(t.wave) * t.wsplit / 16, k = size_t(t.keys);
  return rb * 16 * (d + 8) * 2 + k * (d + 8) * 2 + size_t(d) * (k + 8) * 2 + rb * 16 * (k + 8) * 2 +
         rb * 16 * (k + 4) * 4 + rb * ng * 16 * 4 + rb * 16 * 4 + k * 8 + k * 4 + size_t(t.wg()) * emul_per_item * 2;
}

// amd_wmma / amd_mfma (asked for): "" in *why when it was added to `out`, else why not.
void amd_mm_candidate(const DeviceProfile& prof, const KVDesc& kv, const ExtendOptions& opt, const params::Entry& e,
                      bool mfma, size_t lmax, std::vector<Tile>& out, std::string* why) {
  const std::string variant = mfma ? "amd_mfma" : "amd_wmma", pre = mfma ? "MFMA" : "WMMA";
  const auto& over = opt.params;
  if (!params::variant_available(prof, variant, why)) return;
  if (kv.dtype != DType::F16 && kv.dtype != DType::BF16) {
    *why = "KV dtype " + std::string(dtype_name(kv.dtype)) + " (the matrix instructions take f16/bf16 KV)";
    return;
  }
  if (kv.head_dim % 16 != 0) {
    *why = "head_dim " + to_string(kv.head_dim) + " is not a multiple of 16";
    return;
  }
  AmdMmTile t{ops::param_or(e, over, (pre + "_WAVES").c_str(), 4), ops::param_or(e, over, (pre + "_WSPLIT").c_str(), 1),
              ops::param_or(e, over, (pre + "_KEYS").c_str(), 32), mfma ? 64 : 32};
  if (t.waves < 1 || t.waves > 16 || t.wsplit < 1 || t.waves % t.wsplit != 0)
    rt::invalid("extend parameters " + pre + "_WAVES = " + to_string(t.waves) + ", " + pre + "_WSPLIT = " +
                to_string(t.wsplit) + ": WAVES must be 1..16 and a multiple of WSPLIT");
  if (t.keys < 16 || t.keys > 128 || t.keys % 16 != 0)
    rt::invalid("extend parameter " + pre + "_KEYS = " + to_string(t.keys) + " must be a multiple of 16 in 16..128");
  // WSPLIT divides the head dim's 16-wide tiles (64, 80, 96: lowered); the row blocks stay.
  const int blocks = t.waves / t.wsplit;
  while ((kv.head_dim / 16) % t.wsplit != 0) --t.wsplit;
  t.waves = blocks * t.wsplit;
  // A row's lanes in the softmax (wave x WSPLIT / 16) divide KEYS.
  while (t.keys % (t.wave * t.wsplit / 16) != 0) t.keys += 16;
  std::map<std::string, std::string> d;
  ops::add_emulation(prof, variant, d);
  const int emul = params::emulated(prof, variant) ? (mfma ? 8 : 32) : 0;
  while (amd_mm_local_bytes(t, kv.head_dim, emul) > lmax && t.keys > 16 && (t.keys / 2) % (t.wave * t.wsplit / 16) == 0)
    t.keys /= 2;
  if (amd_mm_local_bytes(t, kv.head_dim, emul) > lmax) {
    *why = "its tiles need " + to_string(amd_mm_local_bytes(t, kv.head_dim, emul)) +
           " bytes of local memory, device has " + to_string(lmax);
    return;
  }
  if (prof.max_work_group_size && size_t(t.wg()) > prof.max_work_group_size) {
    *why = to_string(t.wg()) + " work-items per group exceed the device's " + to_string(prof.max_work_group_size);
    return;
  }
  d["HEAD_DIM"] = to_string(kv.head_dim), d["KV_DT"] = to_string(int(kv.dtype));
  d["WAVES"] = to_string(t.waves), d["WSPLIT"] = to_string(t.wsplit), d["KEYS"] = to_string(t.keys);
  d["UNROLL_HINTS"] = prof.is_cpu ? "0" : "1";
  Tile tile;
  tile.variant = variant, tile.file = mfma ? "extend_mfma_amd.cl" : "extend_wmma_amd.cl";
  tile.kernel = mfma ? "extend_mfma_amd" : "extend_wmma_amd";
  tile.wg = t.wg(), tile.rows = 16 * t.rb(), tile.keys = t.keys;
  tile.options = rt::make_options(d);
  tile.local_bytes = amd_mm_local_bytes(t, kv.head_dim, emul);
  out.push_back(tile);
  why->clear();
}

// Candidates in order of preference: the tensor-core kernel when the parameters (or the
// caller) ask for it and the device and shapes allow it, then the portable kernel.
std::vector<Tile> candidates(const DeviceProfile& prof, const KVDesc& kv, const ExtendOptions& opt,
                             const std::string& tma_why_not, int preferred_width, std::string* why_not_mma) {
  const std::string key = kv.head_dim <= 128 ? "d128" : "d256";
  params::Entry e = params::lookup(prof, "extend", key);
  const auto& over = opt.params;
  const size_t lmax = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
  std::vector<Tile> out;

  // AMD matrix instructions (WMMA on RDNA3, MFMA on CDNA) where asked for; otherwise, or where
  // they do not apply (logged), the kernels below.
  for (bool mfma : {false, true}) {
    const char* name = mfma ? "amd_mfma" : "amd_wmma";
    if (!(opt.variant.empty() ? ops::param_or(e, over, mfma ? "MFMA" : "WMMA", 0) != 0 : opt.variant == name)) continue;
    std::string why;
    amd_mm_candidate(prof, kv, opt, e, mfma, lmax, out, &why);
    if (!why.empty()) rt::log().info("extend: {} not used ({}); using the next kernel", name, why);
  }

  bool want_mma = opt.variant.empty() ? param(e, over, "MMA") != 0
                                       : opt.variant == "nv_mma_sync" || opt.variant == "nv_wgmma";
  if (want_mma) {
    std::string why;
    const int64_t es = int64_t(dtype_size(kv.dtype));
    auto al16 = [&](int64_t s) { return (s * es) % 16 == 0; };
    if (!params::variant_available(prof, "nv_mma_sync", &why)) {
      *why_not_mma = why;
    } else if (kv.dtype == DType::F32) {
      *why_not_mma = "f32 KV keeps f32 math (tensor cores take f16/bf16)";
    } else if (kv.dtype == DType::I8 || kv.dtype == DType::I4) {
      *why_not_mma = std::string(dtype_name(kv.dtype)) + " KV (the portable and cpu kernels dequantise its rows)";
    } else if (!al16(kv.stride_token) || !al16(kv.stride_head) || (kv.paged && !al16(kv.stride_page))) {
      *why_not_mma = "KV strides are not multiples of 16 bytes";
    } else {
      Tile t;
      t.variant = "nv_mma_sync", t.file = "extend_mma_nv.cl";
      // Up to 8 warps; nv_wgmma up to 12 (three warpgroups, registers capped to fit).
      const int warps_asked = param(e, over, "MMA_WARPS");
      const int warps = std::clamp(warps_asked, 1, 8), wg_warps = std::clamp(warps_asked, 4, 12) / 4 * 4;
      t.wg = 32 * warps, t.rows = 16 * warps;
      t.keys = param(e, over, "MMA_KEYS");
      if (t.keys != 32 && t.keys != 64 && t.keys != 128)
        rt::invalid("extend parameter MMA_KEYS = " + to_string(t.keys) + " must be 32, 64 or 128");
      bool async = ops::param_or(e, over, "MMA_ASYNC", 0) != 0 && es == 2;
      // Two stages of the smallest tile (32 keys) exceed local memory at D >= 192: stage through
      // registers there (one K and one transposed-V tile).
      if (async && mma_local_bytes(32, kv.head_dim, true) > lmax) async = false;
      // keys <= work-items: the kernel gives each key's row offset to one work-item
      while (t.keys > 32 && (t.keys > t.wg || mma_local_bytes(t.keys, kv.head_dim, async) > lmax)) t.keys /= 2;
      if (mma_local_bytes(t.keys, kv.head_dim, async) > lmax) {
        *why_not_mma = "tensor-core tiles need " + to_string(mma_local_bytes(t.keys, kv.head_dim, async)) +
                       " bytes of local memory, device has " + to_string(lmax);
      } else {
        const bool bf16 = kv.dtype == DType::BF16;
        std::map<std::string, std::string> d = {{"HEAD_DIM", to_string(kv.head_dim)},
                                                {"KV_DT", to_string(int(kv.dtype))},
                                                {"WARPS", to_string(warps)},
                                                {"KEYS", to_string(t.keys)},
                                                {"MMA_BF16", bf16 ? "1" : "0"}};
        // nv_wgmma (Hopper warpgroup MMA) first where it applies; nv_mma_sync stays behind it
        // as the fallback (a failed sm_90a rebuild is logged and skipped).
        const bool wg_wanted = opt.variant.empty() ? ops::param_or(e, over, "MMA_WGMMA", 0) != 0
                                                   : opt.variant == "nv_wgmma";
        std::string wg_why;
        if (wg_wanted && !params::variant_available(prof, "nv_wgmma", &wg_why)) {
          rt::log().info("extend: nv_wgmma not used ({})", wg_why);
        } else if (wg_wanted && async && warps_asked % 4 == 0 && kv.head_dim % 64 == 0 &&
                   (t.keys == 32 || t.keys == 64) && wgmma_local_bytes(32, kv.head_dim, false) <= lmax) {
          // The TMA feed first where the parameters ask for it and the requests allow it, then
          // the cp.async feed.
          const bool tma_wanted = ops::param_or(e, over, "MMA_TMA", 0) != 0;
          // (MMA_TMA_PAGES: page ids of a group's keys kept in local memory; longer ranges read
          // the page table at each copy.)
          const int tma_pages = std::max(1, int(ops::param_or(e, over, "MMA_TMA_PAGES", 1024)));
          if (tma_wanted && !tma_why_not.empty())
            rt::log().info("extend: nv_wgmma copies by cp.async, not TMA ({})", tma_why_not);
          for (bool tma : {true, false}) {
            if (tma && (!tma_wanted || !tma_why_not.empty())) continue;
            Tile w = t;
            w.variant = "nv_wgmma", w.file = "extend_wgmma_nv.cl";
            w.tma = tma;
            w.wg = 32 * wg_warps, w.rows = 16 * wg_warps;
            while (wgmma_local_bytes(w.keys, kv.head_dim, tma, tma_pages, wg_warps) > lmax) w.keys /= 2;
            auto dw = d;
            dw["KEYS"] = to_string(w.keys);
            dw["WARPS"] = to_string(wg_warps);
            if (tma) {
              dw["TMA"] = "1";
              dw["PINGPONG"] = to_string(int(ops::param_or(e, over, "MMA_PINGPONG", 0) != 0));
              dw["TMA_HEAD_FIRST"] = kv.stride_head < kv.stride_token ? "1" : "0";
              dw["TMA_PAGES"] = to_string(tma_pages);
            }
            // More than 255 registers' worth of warps per multiprocessor: cap them (PTX .maxnreg).
            const int cap = (65536 / w.wg) & ~7;
            std::string extra = rt::kPtxSm90aOption;
            if (cap < 255) extra += std::string(" ") + rt::kPtxMaxnregDefine + to_string(cap);
            w.options = rt::make_options(dw, extra);
            w.local_bytes = wgmma_local_bytes(w.keys, kv.head_dim, tma, tma_pages, wg_warps);
            out.push_back(w);
          }
        } else if (wg_wanted) {
          rt::log().info("extend: nv_wgmma needs 16-bit KV in cp.async stages, MMA_WARPS 4, 8 or 12 and a "
                         "head dim of 64 or 128; using nv_mma_sync");
        }
        d["ASYNC"] = async ? "1" : "0";  // (the feed of extend_mma_nv.cl; nv_wgmma has its own)
        t.options = rt::make_options(d);
        t.local_bytes = mma_local_bytes(t.keys, kv.head_dim, async);
        out.push_back(t);
      }
    }
  }

  // The Intel matrix-engine kernel where the parameters (the intel rows: DPAS) or the caller
  // ask for it and the device has DPAS.
  if (opt.variant.empty() ? ops::param_or(e, over, "DPAS", 0) != 0 : opt.variant == "intel_dpas") {
    std::string why;
    Tile t = dpas_candidate(prof, kv, e, over, lmax, &why);
    if (why.empty()) out.push_back(t);
    else rt::log().info("extend: intel_dpas not used ({}); using the generic kernel", why);
  }

  // The CPU kernel where the parameters (the cpu rows) or the caller ask for it.
  if (opt.variant.empty() ? ops::param_or(e, over, "CPU_KERNEL", 0) != 0 : opt.variant == "cpu") {
    CpuTile ct = cpu_tile(e, over, kv.head_dim, preferred_width);
    // Over the device's local memory: fewer keys per block (down to one micro-tile), then
    // fewer row vectors.
    while (cpu_local_bytes(ct, kv.head_dim) > lmax && (ct.bk > ct.sk || ct.rv > 1)) {
      if (ct.bk > ct.sk) ct.bk = std::max(ct.sk, ct.bk / 2 / ct.sk * ct.sk);
      else ct.rv -= 1;
    }
    Tile t;
    t.variant = "cpu", t.file = "extend_cpu.cl";
    t.wg = 1, t.rows = ct.rows(), t.keys = ct.bk;
    std::map<std::string, std::string> d = {{"HEAD_DIM", to_string(kv.head_dim)}, {"KV_DT", to_string(int(kv.dtype))},
                                            {"VW", to_string(ct.vw)},             {"RV", to_string(ct.rv)},
                                            {"BK", to_string(ct.bk)},             {"SK", to_string(ct.sk)},
                                            {"PD", to_string(ct.pd)}};
    add_quant_defs(kv, d);
    t.options = rt::make_options(d);
    t.local_bytes = cpu_local_bytes(ct, kv.head_dim);
    out.push_back(t);
  }

  Tile g;
  g.variant = "generic", g.file = "extend.cl";
  GenericTile gt{param(e, over, "WG"), param(e, over, "ROWS"), param(e, over, "KEYS"),
                 param(e, over, "TM"),  param(e, over, "DC"),   param(e, over, "VC"),
                 ops::param_or(e, over, "QRES", 1)};
  // int8 caches: KEYS_I8 keys per tile where a row asks for fewer (the Intel rows: 64 keys spill
  // at int8). int4 keeps KEYS: its builds at 64 keys spill nothing in ocloc's dg2 / pvc builds
  // (clattn-kernel-report --op extend, groups 32 and 128, D 64 / 128 / 256).
  const int meta = kv_meta(kv);
  if (kv.dtype == DType::I8 && !over.count("KEYS")) gt.keys = std::max(1, ops::param_or(e, over, "KEYS_I8", gt.keys));
  // A head-dim chunk that does not divide head_dim (80, 96, 192) becomes the largest
  // multiple of 4 below it that does.
  if (gt.dc >= 4 && kv.head_dim % gt.dc != 0 && !over.count("DC"))
    while (gt.dc > 4 && (kv.head_dim % gt.dc != 0 || gt.dc % 4 != 0)) --gt.dc;
  const std::string unfit = generic_unfit(gt, kv.head_dim);
  if (!unfit.empty())
    rt::invalid("extend parameters WG = " + to_string(gt.wg) + ", ROWS = " + to_string(gt.rows) + ", KEYS = " +
                to_string(gt.keys) + ", TM = " + to_string(gt.tm) + ", DC = " + to_string(gt.dc) + ", VC = " +
                to_string(gt.vc) + ": " + unfit);
  if (prof.max_work_group_size && size_t(gt.wg) > prof.max_work_group_size)
    throw Error(Status::Unsupported, "extend parameter WG = " + to_string(gt.wg) + " exceeds the device's " +
                                         to_string(prof.max_work_group_size) + " work-items per group");
  // Over the device's local memory: Q staged per chunk instead of resident, then fewer keys
  // per tile (down to one per tx), then fewer rows (and work-items) per group.
  if (gt.qres && !over.count("QRES") && generic_local_bytes(gt, kv.head_dim, meta) > lmax) gt.qres = 0;
  while (generic_local_bytes(gt, kv.head_dim, meta) > lmax) {
    GenericTile k = gt, r = gt;
    k.keys /= 2, k.vc = std::min(k.vc, k.keys);
    r.rows /= 2, r.wg /= 2;
    if (generic_unfit(k, kv.head_dim).empty()) gt = k;
    else if (generic_unfit(r, kv.head_dim).empty()) gt = r;
    else
      throw Error(Status::Unsupported, "extend tile needs " + to_string(generic_local_bytes(gt, kv.head_dim, meta)) +
                                           " bytes of local memory, device has " + to_string(lmax));
  }
  // (SUB_TX only shapes the grid inside 32 work-items: a power of two up to 32.)
  const int sub_tx = ops::param_or(e, over, "SUB_TX", 8);
  const int sunroll = ops::param_or(e, over, "SUNROLL", gt.dc / 4), punroll = ops::param_or(e, over, "PUNROLL", gt.vc);
  if (sub_tx < 1 || sub_tx > 32 || (sub_tx & (sub_tx - 1)) != 0)
    rt::invalid("extend parameter SUB_TX = " + to_string(sub_tx) + " must be a power of two 1..32");
  if (sunroll < 1 || punroll < 1)
    rt::invalid("extend parameters SUNROLL = " + to_string(sunroll) + ", PUNROLL = " + to_string(punroll) +
                ": unroll counts must be >= 1");
  g.wg = gt.wg, g.rows = gt.rows, g.keys = gt.keys;
  std::map<std::string, std::string> d = {
      {"HEAD_DIM", to_string(kv.head_dim)}, {"KV_DT", to_string(int(kv.dtype))}, {"WG", to_string(gt.wg)},
      {"ROWS", to_string(gt.rows)},         {"KEYS", to_string(gt.keys)},        {"TM", to_string(gt.tm)},
      {"DC", to_string(gt.dc)},             {"VC", to_string(gt.vc)},          {"QRES", to_string(gt.qres)},
      {"SUB_TX", to_string(sub_tx)},        {"SUNROLL", to_string(sunroll)},     {"PUNROLL", to_string(punroll)},
      {"UNROLL_HINTS", prof.is_cpu ? "0" : "1"}};
  add_quant_defs(kv, d);
  g.options = rt::make_options(d);
  g.local_bytes = generic_local_bytes(gt, kv.head_dim, meta);
  out.push_back(g);
  return out;
}


// The candidates as select_and_build takes them.
std::vector<ops::Variant> variants_of(const std::vector<Tile>& cands) {
  std::vector<ops::Variant> vs;
  for (const Tile& t : cands) {
    ops::Variant v;
    v.name = t.variant, v.file = t.file, v.options = t.options, v.wg = size_t(t.wg), v.local_bytes = t.local_bytes;
    v.kernel = !t.kernel.empty()           ? t.kernel
               : t.variant == "generic"    ? "extend_generic"
               : t.variant == "cpu"        ? "extend_cpu"
                                           : "extend_mma";
    // (A register-capped nv_wgmma build: the driver's limit is for the uncapped count.)
    v.check_wg = t.options.find(rt::kPtxMaxnregDefine) == std::string::npos;
    vs.push_back(std::move(v));
  }
  return vs;
}

std::mutex g_test_mu;
std::optional<ops::ExtendTestCandidate> g_test_candidate;

// ops::set_extend_test_candidate's candidate first, unless the caller forces a variant: a
// copy of the generic tile (the last).
void add_test_candidate(const ExtendOptions& opt, std::vector<Tile>& cands) {
  std::lock_guard<std::mutex> lock(g_test_mu);
  if (!g_test_candidate || !opt.variant.empty() || cands.empty() || cands.back().variant != "generic") return;
  Tile t = cands.back();
  t.variant = g_test_candidate->name, t.kernel = "extend_generic";
  const std::string def = "-D" + g_test_candidate->define + "=";
  const size_t at = t.options.find(def);
  if (at == std::string::npos) return;
  const size_t end = t.options.find(' ', at);
  t.options.replace(at + def.size(), end == std::string::npos ? std::string::npos : end - at - def.size(),
                    g_test_candidate->value);
  cands.insert(cands.begin(), t);
}

ExtendPlan make_plan(const Context& ctx, const Requests& r, ExtendPlan::Source src, const KVDesc& kv,
                     const ExtendOptions& opt, cl_command_queue queue) {
  auto& c = rt::impl(ctx);
  params::check_param_names({"extend"}, opt.params, "ExtendOptions::params");
  const int B = r.size();
  const int group = opt.num_qo_heads / kv.num_kv_heads;

  std::string why_not_mma;
  std::vector<Tile> cands =
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
  const ops::BuiltVariant built = ops::select_and_build(c, "extend", variants_of(cands), check);
  Tile tile;
  for (const Tile& t : cands)
    if (t.variant == built.variant.name && t.options == built.variant.options) tile = t;
  std::shared_ptr<rt::Program> prog = built.program;
  rt::Kernel* kernel = built.kernel;
  std::shared_ptr<rt::Program> maps_prog = tile.tma ? c.programs.get("tma_maps_nv.cl", rt::kPtxSm90aOption) : nullptr;

  auto st = std::make_shared<ExtendPlanState>();
  st->prog = prog;
  st->kernel = kernel;
  if (tile.tma) {
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
  st->wg = size_t(tile.wg);
  st->group = group;
  st->paged = kv.paged;
  st->causal = opt.causal;
  st->window_left = opt.window_left;
  st->page_size = kv.page_size;
  st->stride_page = kv.stride_page, st->stride_token = kv.stride_token, st->stride_head = kv.stride_head;
  const ops::ScoreScale sc = ops::score_scale(opt.sm_scale, opt.logits_soft_cap, kv.head_dim);
  st->q_scale = sc.q_scale, st->cap_log2 = sc.cap_log2, st->inv_cap = sc.inv_cap;

  // Work list: (request, row tile), heaviest first (causal rows near the end of a long
  // request see the most keys) so the last wave is made of short items.
  struct Item {
    int req, row0;
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
    num_items += rt::checked::ceil_div(rows, tile.rows);
  }
  if (num_items > kMaxWorkItems)
    rt::invalid("extend: " + to_string(num_items) + " work items (query rows x group / " + to_string(tile.rows) +
                ") exceed " + to_string(kMaxWorkItems) + "; split the batch");
  std::vector<Item> items;
  items.reserve(size_t(num_items));
  for (int i = 0; i < B; ++i) {
    const int64_t qo = r.qo_len[size_t(i)], kvl = r.kv_len[size_t(i)];
    const int rows = int(qo * group);
    for (int row0 = 0; row0 < rows; row0 += std::min(tile.rows, rows - row0)) {
      const int64_t last_tok = (std::min<int64_t>(int64_t(row0) + tile.rows, rows) - 1) / group;
      const int64_t end = opt.causal ? std::min(kvl, kvl - qo + last_tok + 1) : kvl;
      const int64_t begin = opt.window_left >= 0 ? std::max<int64_t>(0, kvl - qo + row0 / group - opt.window_left) : 0;
      items.push_back({i, row0, std::max<int64_t>(0, end - begin) + 1});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  st->host.assign(items.size() * 8, 0);
  for (size_t w = 0; w < items.size(); ++w) {
    const int i = items[w].req;
    int32_t* e = &st->host[w * 8];
    e[0] = r.qo_start[size_t(i)], e[1] = r.qo_len[size_t(i)], e[2] = r.kv_len[size_t(i)], e[3] = items[w].row0;
    e[4] = r.base[size_t(i)], e[5] = r.tok_off[size_t(i)], e[6] = r.mask_off[size_t(i)], e[7] = i;
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
  plan.workspace_bytes = tile.tma ? 256 : 0;  // the K and V tensor maps (2 x 128 bytes)
  plan.variant = tile.variant;
  plan.kernel_options = tile.options;
  plan.tile = {tile.wg, tile.rows, tile.keys};
  rt::log().debug("extend plan: B={} T={} Hq={} Hkv={} D={} kv={} q={} o={} causal={} window={} mask={} "
                  "variant={} WG={} rows={} keys={} ({}); {} tiles",
                  B, r.num_tokens, opt.num_qo_heads, kv.num_kv_heads, kv.head_dim, dtype_name(kv.dtype),
                  dtype_name(opt.q_dtype), dtype_name(opt.o_dtype), opt.causal, opt.window_left, plan.has_mask,
                  tile.variant, tile.wg, tile.rows, tile.keys, tile.options, plan.num_tiles);
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

}  // namespace

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
                          {{st->workspace_bytes}, "bytes (nv_wgmma TMA tensor maps, ExtendPlan::workspace_bytes)"});
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
  cl_mem tmaps = st->workspace_bytes > 0 ? b.workspace : dummy;
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
  try {
    st->kernel->launch(q, 2, gws, lws, maps_done ? 1 : wl.size(), maps_done ? &maps_done : wl.data(), e.event, b.q,
                       cl_int(st->q_dtype), k, v, page_ids, st->table, b.o, cl_int(st->o_dtype), lse,
                       cl_int(b.lse != nullptr), sinks, cl_int(b.sinks != nullptr), mask, cl_int(st->has_mask),
                       cl_int(Hq), cl_int(st->group), cl_int(st->paged), cl_int(st->page_size),
                       cl_long(st->stride_page), cl_long(st->stride_token), cl_long(st->stride_head),
                       cl_float(st->q_scale * b.k_scale), cl_float(st->cap_log2), cl_float(st->inv_cap),
                       cl_float(b.v_scale), cl_int(st->causal), cl_int(st->window_left), cl_int(st->num_pages),
                       c.faults, tmaps, k_sc, v_sc, cl_long(st->sc_page), cl_long(st->sc_token), cl_long(st->sc_head),
                       cl_int(st->sc_f16), k_hs, v_hs, cl_int(b.k_head_scales != nullptr));
  } catch (...) {
    if (maps_done) clReleaseEvent(maps_done);
    throw;
  }
  if (maps_done) clReleaseEvent(maps_done);
}

}  // namespace clattn

namespace clattn::ops {

void set_extend_test_candidate(std::optional<ExtendTestCandidate> t) {
  std::lock_guard<std::mutex> lock(g_test_mu);
  g_test_candidate = std::move(t);
}

// Paged KV (page size 16; ragged builds the same programs) of every dtype at head dims 64, 80,
// 128 and 256, causal; TMA where the cache allows it (a paged NHD cache, 16-byte strides). int4
// at its smallest group (32: the most scale pairs a key stages) and its largest (128) where
// the head dim takes them (80 takes none).
void catalog_extend(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  struct Kind {
    DType dt;
    int group;
  };
  const Kind kinds[] = {{DType::BF16, 0},     {DType::F16, 0}, {DType::F32, 0},
                        {DType::FP8_E4M3, 0}, {DType::I8, 0},  {DType::I4, 32},
                        {DType::I4, 128}};
  for (const Kind& k : kinds)
    for (int d : {64, 80, 128, 256}) {
      if (k.group && d % k.group != 0) continue;
      const std::string shape = std::string(dtype_name(k.dt)) + (k.group ? " g" + std::to_string(k.group) : "") +
                                " d" + std::to_string(d) + " paged";
      catalog_add(out, "extend", shape, [&] {
        KVDesc kv;
        kv.paged = true, kv.num_kv_heads = 8, kv.head_dim = d, kv.dtype = k.dt, kv.page_size = 16;
        kv.quant_group = k.group;
        kv.stride_head = d, kv.stride_token = int64_t(8) * d, kv.stride_page = int64_t(16) * 8 * d;
        kv.num_pages = 1024;
        ExtendOptions opt;
        opt.num_qo_heads = 32;
        std::string why;
        return variants_of(candidates(t.profile, kv, opt, tma_unfit(kv, {0}), t.preferred_float_width, &why));
      });
    }
}

}  // namespace clattn::ops
