// Paged decode: plan (host: checks, metadata validation, split-K work list, kernel choice,
// one non-blocking upload) and run (buffer-size checks, then enqueue only).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backends/metadata/requests.hpp"
#include "backends/ops/catalog.hpp"
#include "backends/ops/decode_check.hpp"
#include "backends/ops/decode_sparse.hpp"
#include "backends/ops/merge_state.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/ops/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "backends/planner/split_kv.hpp"
#include "clattn/decode.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace detail {

// Everything a run needs besides the caller's buffers. Owned by the plan (shared by its
// copies); the destructor waits for the table upload before freeing its host source.
struct DecodePlanState : ops::PlanTable {
  std::shared_ptr<rt::Program> decode_prog, merge_prog;
  rt::Kernel* decode_k = nullptr;
  rt::Kernel* merge_k = nullptr;
  size_t wg = 0, merge_wg = 0;
  int work_off = 0, merge_off = 0;
  bool fuse = false;    // the decode kernel merges (FUSE_MERGE) with the counter sets below
  bool prefetch = false;  // PREFETCH build (kept for to_vector)
  bool cpu = false;       // the cpu variant (decode_cpu.cl): grid dimensions swapped
  ops::CounterSets sets;  // FUSE_MERGE: per-run counters in the table (one set per run)
  int group = 1, gmax = 1, n_hblk = 1, log2_page = 0;
  float q_scale = 1.0f, cap_log2 = 0.0f, inv_cap = 0.0f;
  int64_t lse_off_floats = 0;
  int32_t extra_off = 0;  // sparse plans: where SparseRanges::extra starts in the table
  // Fixed-capacity plans (decode_plan_fixed): refresh_decode_work's settings and kernel.
  struct Fixed {
    int nmax = 0, chunk = 0, align = 0, max_splits = 0, window_left = -1, max_pages = 0, max_keys = 0;
  };
  bool fixed = false;
  Fixed fx;
  std::shared_ptr<rt::Program> refresh_prog;
  rt::Kernel* refresh_k = nullptr;

  // The run's view of the plan, fixed when the plan is made: DecodePlan's public fields
  // are informational (a caller may edit its copy), so the run reads only these.
  int B = 0, Hq = 0, Hkv = 0, D = 0;
  DType q_dtype = DType::BF16, o_dtype = DType::BF16;
  PagedKV cache;
  bool page_table = false;
  int num_work = 0, num_merges = 0, num_partials = 0;
  // Buffer sizes in bytes (checked arithmetic; 0 = not needed).
  int64_t q_bytes = 0, o_bytes = 0, lse_bytes = 0, sinks_bytes = 0, kv_bytes = 0, page_id_bytes = 0;
  int64_t scale_bytes = 0;  // int8 / int4: each scale cache
  int64_t workspace_bytes = 0;

  void freeze(const DecodePlan& p) {
    namespace ck = rt::checked;
    B = p.batch_size, Hq = p.num_qo_heads, Hkv = p.num_kv_heads, D = p.head_dim;
    q_dtype = p.q_dtype, o_dtype = p.o_dtype, cache = p.cache, page_table = p.page_table;
    num_work = p.num_work, num_merges = p.num_merges, num_partials = p.num_partials;
    const ops::RowBytes rb = ops::row_bytes(ck::mul(B, Hq, "decode q/o rows (batch_size x num_qo_heads)"), D,
                                            q_dtype, D, o_dtype, p.page_ids_needed);
    q_bytes = rb.q, o_bytes = rb.o, lse_bytes = rb.lse, page_id_bytes = rb.page_ids;
    sinks_bytes = ck::mul(Hq, 4, "sinks bytes");
    kv_bytes = cache.required_bytes();
    scale_bytes = cache.scale_required_bytes();
    workspace_bytes = p.workspace_bytes;
  }
};

}  // namespace detail

namespace {

using detail::DecodePlanState;
using ops::is_pow2;
using ops::log2_int;
using ops::pow2_ceil;

constexpr int64_t kPlanMagic = 0x434c4154444543LL;  // "CLATDEC"
constexpr int64_t kPlanVersion = 5;

// Parts one request may be split into: the merge pass keeps their weights in local memory
// (MERGE_MAXP in merge_state.cl).
constexpr int kMaxMergeParts = 256;


const char* kv_key(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: return "fp8";
  }
}


// Bytes of n cache elements (int4: two a byte; its strides and head dims are even).
int64_t kv_nbytes(DType t, int64_t n) { return t == DType::I4 ? n / 2 : n * int64_t(dtype_size(t)); }
// Cache elements per LOAD_BYTES load.
int load_elems(DType t, int load_bytes) { return t == DType::I4 ? 2 * load_bytes : load_bytes / int(dtype_size(t)); }

// KTile parameters of one decode kernel build.
struct KTile {
  int wg = 128, tpt = 8, gmax = 4, unroll = 4, load_bytes = 16;
  bool ptx_shfl = false;  // preferred by the parameters (the variant still needs the device)
  // Sub-group variants (SUBGROUP): intel_subgroups and khr_subgroups, each where allowed here
  // (a plan vector names the one it was built with); sg_size: SUBGROUP_SIZE, Intel's required
  // sub-group size (0: none required) and the emulated size (0: 32); sg_shuffle: SUBGROUP_SHUFFLE,
  // -1 = cl_khr_subgroup_shuffle where the device has it, 0 = the sub-group-fenced local-memory
  // butterfly, 1 = shuffles required.
  bool subgroup = false, sg_intel = true, sg_khr = true;
  int sg_size = 0, sg_shuffle = -1;
  int fuse_merge = 1;     // split-K merged by the last work-group of each request (no second launch)
  int prefetch = 0;       // next tile's K/V loaded into a second register set (PREFETCH)
  int merge_batch = 8;    // fused merge: partial states loaded per batch (MERGE_BATCH)
  int n_hblk = 1;
  int unroll_hints = -1;  // -1: by device type (GPUs on, CPUs off)
  int fp8_fast = -1;      // -1: when the device keeps f32 denormals
  // CPU variant (decode_cpu.cl), asked for by CPU_KERNEL: one work-item per group, tokens in
  // blocks of `unroll` = VW (the vector width in floats); wg/tpt above serve the generic
  // fallback.
  bool cpu = false;
  int touch_ahead = 2;    // CPU variant: blocks ahead whose rows are prefetched (TOUCH_AHEAD)
  int prefetch_locality = 3;  // and the prefetch's locality hint (PREFETCH_LOCALITY: 3 L1, 1 L2)
  int sparse = 0;         // SPARSE build (HSA per-head page lists): 1 per KV head, 2 per query head
  // Tensor-core variant (decode_mma_nv.cl, int8 caches), asked for by MMA: wg / 32 warps,
  // mma_unroll 16-key blocks per warp and step (MMA_UNROLL).
  bool mma = false;
  int mma_unroll = 1;
  std::string source;     // parameter source, for logs
};

struct SplitParams {
  int wgs_per_cu = 4, min_chunk = 256, max_splits = 64, det_chunk = 1024;
};

// Local memory the kernel declares (mirrors LMEM_FLOATS in decode.cl); shfl: the butterfly
// uses register shuffles (no scratch rows).
size_t local_bytes(const KTile& t, int head_dim, bool shfl) {
  size_t nslot = size_t(t.wg / t.tpt);
  // The slot sum's transpose (RED_FLOATS in decode_lanes.clh): padded partial rows, then the sums.
  const size_t nscore = size_t(t.unroll) * t.gmax;
  const size_t lane_stride = (nscore % 4 == 0 && (nscore / 4) % 2 == 0) ? nscore + 4 : nscore;
  size_t scr = (t.tpt > 1 && !shfl) ? nslot * (size_t(t.tpt) * lane_stride + 16) + nslot * nscore : 1;
  size_t merge = nslot * head_dim + 2 * nslot * t.gmax;
  size_t fused = t.fuse_merge ? 1 : 0;  // FUSE_MERGE: the "last part" flag
  return (std::max(scr, merge) + fused) * 4;
}

// Chooses the tile from the parameter entry (with overrides) for this shape.
KTile choose_tile(const DeviceProfile& prof, const PagedKV& c, int group, const std::map<std::string, int>& over,
                 SplitParams* sp, int preferred_float_width) {
  params::Entry e = params::lookup(prof, "decode", kv_key(c.dtype));
  KTile t;
  t.source = e.source;
  t.wg = ops::param(e, over, "WG");
  t.unroll = std::max(1, ops::param(e, over, "UNROLL"));
  t.ptx_shfl = ops::param(e, over, "PTX_SHFL") != 0;
  t.subgroup = ops::param_or(e, over, "SUBGROUP", 0) != 0;
  t.sg_size = ops::param_or(e, over, "SUBGROUP_SIZE", 0);
  t.sg_shuffle = ops::param_or(e, over, "SUBGROUP_SHUFFLE", -1);
  if (t.sg_size < 0 || (t.sg_size && !is_pow2(t.sg_size)) || t.sg_size > 128)
    rt::invalid("decode parameter SUBGROUP_SIZE = " + std::to_string(t.sg_size) +
                " must be 0 or a power of two up to 128");
  if (t.sg_shuffle < -1 || t.sg_shuffle > 1)
    rt::invalid("decode parameter SUBGROUP_SHUFFLE = " + std::to_string(t.sg_shuffle) + " must be -1, 0 or 1");
  t.fuse_merge = ops::param_or(e, over, "FUSE_MERGE", 1) != 0;
  t.prefetch = ops::param_or(e, over, "PREFETCH", 0) != 0;
  t.merge_batch = std::clamp(ops::param_or(e, over, "MERGE_BATCH", 8), 1, 32);
  // The local-memory butterfly costs a barrier pair per step, so where it runs instead of the
  // shfl form (the device or portable-only mode rules the shfl variant out) fewer lanes per
  // token can pay: QREGS_LMEM / QREGS_MAX_LMEM (default: QREGS / QREGS_MAX).
  const bool lmem = !t.ptx_shfl || !params::variant_available(prof, "nv_ptx_shfl");
  int qregs = std::max(1, ops::param(e, over, "QREGS"));
  int qregs_max = std::max(qregs, ops::param(e, over, "QREGS_MAX"));
  if (lmem) {
    qregs = std::max(1, ops::param_or(e, over, "QREGS_LMEM", qregs));
    qregs_max = std::max(qregs, ops::param_or(e, over, "QREGS_MAX_LMEM", qregs_max));
  }
  // Sub-group variants: a sub-group is one SIMD thread's lanes (Intel: SIMD16 at size 16, half
  // the registers per lane of the SIMD8 build the compiler picks for the generic kernel), so
  // the rows may ask for a smaller tile there: QREGS_SG / QREGS_MAX_SG / UNROLL_SG.
  if (t.subgroup &&
      (params::variant_available(prof, "intel_subgroups") || params::variant_available(prof, "khr_subgroups"))) {
    qregs = std::max(1, ops::param_or(e, over, "QREGS_SG", qregs));
    qregs_max = std::max(qregs, ops::param_or(e, over, "QREGS_MAX_SG", qregs_max));
    t.unroll = std::max(1, ops::param_or(e, over, "UNROLL_SG", t.unroll));
  }
  const int gcap = std::clamp(ops::param(e, over, "GMAX_CAP"), 1, 16);
  sp->wgs_per_cu = std::max(1, ops::param(e, over, "WGS_PER_CU"));
  sp->min_chunk = std::max(1, ops::param(e, over, "MIN_CHUNK"));
  sp->max_splits = std::max(1, ops::param(e, over, "MAX_SPLITS"));
  sp->det_chunk = std::max(1, ops::param(e, over, "DET_CHUNK"));

  if (!is_pow2(t.wg) || t.wg < 1) rt::invalid("decode parameter WG = " + std::to_string(t.wg) + " is not a power of two");
  t.wg = int(std::min<size_t>(size_t(t.wg), prof.max_work_group_size ? prof.max_work_group_size : size_t(t.wg)));

  // Widest load that keeps every row aligned: rows start at multiples of the strides.
  int lb = ops::param(e, over, "LOAD_BYTES");
  if (lb != 16 && lb != 8 && lb != 4) rt::invalid("decode parameter LOAD_BYTES must be 4, 8 or 16");
  auto aligned = [&](int b) {
    return kv_nbytes(c.dtype, c.page_stride()) % b == 0 && kv_nbytes(c.dtype, c.token_stride()) % b == 0 &&
           kv_nbytes(c.dtype, c.head_stride()) % b == 0 && kv_nbytes(c.dtype, c.head_dim) % b == 0;
  };
  while (lb > 4 && !aligned(lb)) lb /= 2;
  if (!aligned(lb))
    throw Error(Status::Unsupported, "paged cache strides (" + std::to_string(c.page_stride()) + ", " +
                                         std::to_string(c.token_stride()) + ", " + std::to_string(c.head_stride()) +
                                         " elements of " + dtype_name(c.dtype) + ") must be multiples of 4 bytes");
  const int gb = std::min(pow2_ceil(std::min(group, 16)), gcap);
  int tpt = pow2_ceil((int64_t(gb) * c.head_dim + qregs - 1) / qregs);
  auto over_tpt = over.find("TPT");
  if (over_tpt != over.end()) tpt = over_tpt->second;
  // int4 rows are half int8's bytes: where the row has fewer loads than the lanes per token
  // the rows ask for, the loads narrow (to 8 bytes, int8's 16 elements per load) instead of
  // each lane holding twice the q and output elements (256 floats a lane at the amd row's
  // GMAX 4: clattn-kernel-report gfx90a).
  if (c.dtype == DType::I4)
    while (lb > 8 && tpt > c.head_dim / load_elems(c.dtype, lb)) lb /= 2;
  t.load_bytes = lb;
  const int vec = load_elems(c.dtype, lb);
  const int nchunk = c.head_dim / vec;
  const int tpt_max = std::min({pow2_ceil(nchunk), 32, t.wg});
  t.tpt = std::clamp(tpt, 1, tpt_max);
  if (!is_pow2(t.tpt)) rt::invalid("decode parameter TPT = " + std::to_string(t.tpt) + " is not a power of two");
  const int el = vec * ((nchunk + t.tpt - 1) / t.tpt);
  t.gmax = gb;
  while (t.gmax > 1 && t.gmax * el > qregs_max) t.gmax /= 2;
  auto over_h = over.find("UNROLL_HINTS");
  if (over_h != over.end()) t.unroll_hints = over_h->second ? 1 : 0;
  auto over_f = over.find("FP8_FAST");
  if (over_f != over.end()) t.fp8_fast = over_f->second ? 1 : 0;
  // The tensor-core kernels (int8, int4) keep up to 8 heads in their MMA rows at no register cost.
  t.mma = ops::param_or(e, over, "MMA", 0) != 0;
  t.mma_unroll = std::clamp(ops::param_or(e, over, "MMA_UNROLL", 1), 1, 4);
  if (t.mma && (c.dtype == DType::I8 || c.dtype == DType::I4) && (c.head_dim == 64 || c.head_dim == 128) &&
      params::variant_available(prof, "nv_mma_sync"))
    t.gmax = std::min(pow2_ceil(std::min(group, 8)), 8);
  auto over_g = over.find("GMAX");
  if (over_g != over.end()) t.gmax = std::clamp(over_g->second, 1, 16);
  t.n_hblk = int(rt::checked::ceil_div(group, t.gmax));
  // The final merge keeps one head row per token slot in local memory: widen the slots
  // (fewer of them) until the tile fits the device's local memory (at most 32 KiB, so
  // several groups still share a compute unit).
  const size_t budget = std::min<size_t>(32768, prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : 32768);
  while (local_bytes(t, c.head_dim, false) > budget && t.tpt < tpt_max && over_tpt == over.end()) t.tpt *= 2;
  while (local_bytes(t, c.head_dim, false) > budget && t.wg > 32 && t.wg > t.tpt) t.wg /= 2;
  // CPU variant: VW (0 = the device's preferred float vector width) lowered to a width
  // of 4, 8 or 16 that divides head_dim; the plan's tile then counts one work-item per group
  // and VW tokens per step. No fused merge (no work-group barriers on one work-item) and no
  // prefetch registers.
  t.cpu = ops::param_or(e, over, "CPU_KERNEL", 0) != 0;
  if (t.cpu) {
    t.unroll = ops::cpu_vector_width(ops::param_or(e, over, "VW", 0), preferred_float_width, c.head_dim, "decode");
    t.touch_ahead = std::clamp(ops::param_or(e, over, "TOUCH_AHEAD", 2), 0, 16);
    t.prefetch_locality = std::clamp(ops::param_or(e, over, "PREFETCH_LOCALITY", 3), 0, 3);
    t.fuse_merge = 0;
    t.prefetch = 0;
  }
  return t;
}

// sg: the sub-group build (USE_SUBGROUP and its settings; kind 0 = none).
struct SubgroupBuild {
  int kind = 0;  // 1 khr, 2 intel
  int size = 0, shuffle = 1, reqd = 0;
  std::string cl_std;  // "-cl-std=CL2.0" / "CL3.0" where the khr builtins need it
  std::map<std::string, std::string> emulation;  // EMULATE_* (ops::add_emulation)
};

std::string build_options(const KTile& t, const PagedKV& c, bool shfl, bool cpu, bool denorms,
                          const SubgroupBuild& sg = {}) {
  // Unroll hints only where the per-lane arrays can live in registers: CPU compilers keep
  // them on the stack anyway (and spend most of a cold build unrolling), and a GPU tile
  // with more than 256 floats of q per lane (e.g. the CPU tile forced onto a GPU) spills.
  const int vec = load_elems(c.dtype, t.load_bytes);
  const int el = vec * ((c.head_dim / vec + t.tpt - 1) / t.tpt);
  const bool hints = t.unroll_hints >= 0 ? t.unroll_hints != 0 : (!cpu && t.gmax * el <= 256);
  std::map<std::string, std::string> d = {
      {"HEAD_DIM", std::to_string(c.head_dim)}, {"KV_DT", std::to_string(int(c.dtype))},
      {"GMAX", std::to_string(t.gmax)},         {"TPT", std::to_string(t.tpt)},
      {"WGSIZE", std::to_string(t.wg)},         {"UNROLL", std::to_string(t.unroll)},
      {"LOAD_BYTES", std::to_string(t.load_bytes)},
      {"USE_PTX_SHFL", shfl ? "1" : "0"},
      {"UNROLL_HINTS", hints ? "1" : "0"},      {"FUSE_MERGE", t.fuse_merge ? "1" : "0"},
      {"PREFETCH", t.prefetch ? "1" : "0"},     {"MERGE_BATCH", std::to_string(t.merge_batch)}};
  // fp8 rows decoded by bit moves through f32 denormals (exact only where the device keeps
  // them); elsewhere the exact select-based decode.
  if (c.dtype == DType::FP8_E4M3 || c.dtype == DType::FP8_E5M2)
    d["FP8_FAST"] = (t.fp8_fast >= 0 ? t.fp8_fast : denorms) ? "1" : "0";
  if (t.sparse) d["SPARSE"] = std::to_string(t.sparse);
  if (c.dtype == DType::I4) d["QGROUP"] = std::to_string(c.quant_group);
  if (sg.kind) {
    d["USE_SUBGROUP"] = std::to_string(sg.kind);
    d["SG_SIZE"] = std::to_string(sg.size);
    d["SG_SHUFFLE"] = std::to_string(sg.shuffle);
    d["SG_REQD"] = std::to_string(sg.reqd);
    d.insert(sg.emulation.begin(), sg.emulation.end());
  }
  std::string o = rt::make_options(d);
  const std::string std12 = "-cl-std=CL1.2";
  if (!sg.cl_std.empty() && o.rfind(std12, 0) == 0) o = sg.cl_std + o.substr(std12.size());
  return o;
}

std::string cpu_build_options(const DeviceProfile& prof, const KTile& t, const PagedKV& c, bool denorms) {
  std::map<std::string, std::string> d = {{"HEAD_DIM", std::to_string(c.head_dim)},
                                          {"KV_DT", std::to_string(int(c.dtype))},
                                          {"GMAX", std::to_string(t.gmax)},
                                          {"VW", std::to_string(t.unroll)},
                                          {"TOUCH_AHEAD", std::to_string(t.touch_ahead)},
                                          {"PREFETCH_LOCALITY", std::to_string(t.prefetch_locality)},
                                          {"PREFETCH_BUILTIN", ops::prefetch_builtin(prof)}};
  if (t.sparse) d["SPARSE"] = std::to_string(t.sparse);
  if (c.dtype == DType::I4) d["QGROUP"] = std::to_string(c.quant_group);
  if (c.dtype == DType::FP8_E4M3 || c.dtype == DType::FP8_E5M2)
    d["FP8_FAST"] = (t.fp8_fast >= 0 ? t.fp8_fast : denorms) ? "1" : "0";
  return rt::make_options(d);
}

// The tensor-core variant: int8 rows (decode_mma_nv.cl) or int4 rows (decode_mma_i4_nv.cl) on
// mma.sync, or why it does not apply.
ops::Variant mma_variant(const DeviceProfile& prof, const KTile& t, const PagedKV& c) {
  ops::Variant x;
  x.name = "nv_mma_sync";
  const bool i4 = c.dtype == DType::I4;
  x.file = i4 ? "decode_mma_i4_nv.cl" : "decode_mma_nv.cl", x.kernel = "paged_decode_mma";
  x.wg = size_t(t.wg);
  const size_t nw = size_t(t.wg / 32), g = size_t(t.gmax);
  const bool emul = params::emulated(prof, "nv_mma_sync");
  x.local_bytes = (nw * g * size_t(c.head_dim) + 2 * nw * g + (t.fuse_merge ? 1 : 0) + (emul ? 8 * x.wg : 0)) * 4;
  // int4: the warps' key tables (a row offset and the V zero points per key of a step).
  if (i4) x.local_bytes += nw * size_t(t.mma_unroll) * 16 * (8 + 4 * size_t(c.head_dim / c.quant_group));
  // Rows are read in pieces of up to 16 bytes at 16-byte aligned row starts (strides in
  // elements: an int4 element is half a byte).
  const int64_t a = i4 ? 32 : 16;
  // int4: a row's [scale, zero] pairs are read as loads of up to 16 bytes, so the scale
  // strides must keep them aligned: multiples of min(2 D / G, 16 bytes) elements.
  const int64_t sa = i4 ? std::min<int64_t>(2 * (c.head_dim / std::max(1, c.quant_group)),
                                            16 / int64_t(dtype_size(c.scale_dtype)))
                        : 1;
  const bool aligned = c.page_stride() % a == 0 && c.token_stride() % a == 0 && c.head_stride() % a == 0 &&
                       c.scale_page_stride() % sa == 0 && c.scale_token_stride() % sa == 0 &&
                       c.scale_head_stride() % sa == 0;
  if (!t.mma) x.why_not = "MMA = 0";
  else if (c.dtype != DType::I8 && !i4) x.why_not = "int8 and int4 caches only";
  else if (t.sparse) x.why_not = "no sparse page lists";
  else if (c.head_dim != 64 && c.head_dim != 128) x.why_not = "head_dim 64 or 128 only";
  else if (t.gmax > 8) x.why_not = "at most 8 query heads per work-group (GMAX " + std::to_string(t.gmax) + ")";
  else if (t.wg < 32 || t.wg % 32) x.why_not = "WG must be a multiple of 32";
  else if (!aligned) x.why_not = i4 ? "cache strides must be multiples of 16 bytes, scale strides keep a row's pairs aligned"
                                    : "cache strides must be multiples of 16 bytes";
  else x.why_not = params::why_unavailable(prof, x.name);
  if (x.why_not.empty()) {
    std::map<std::string, std::string> d = {{"HEAD_DIM", std::to_string(c.head_dim)},
                                            {"GMAX", std::to_string(t.gmax)},
                                            {"NWARPS", std::to_string(nw)},
                                            {"UNROLL", std::to_string(t.mma_unroll)},
                                            {"FUSE_MERGE", t.fuse_merge ? "1" : "0"},
                                            {"MERGE_BATCH", std::to_string(t.merge_batch)}};
    if (i4) d["QGROUP"] = std::to_string(c.quant_group);
    d["SC_F16"] = c.scale_dtype == DType::F16 ? "1" : "0";
    const int64_t lim = int64_t(1) << 31;
    const bool s32 = c.page_stride() < lim && c.token_stride() < lim && c.head_stride() < lim &&
                     c.scale_page_stride() < lim && c.scale_token_stride() < lim && c.scale_head_stride() < lim;
    d["STRIDE32"] = s32 ? "1" : "0";
    ops::add_emulation(prof, "nv_mma_sync", d);
    x.options = rt::make_options(d);
  }
  return x;
}

// Per-request key ranges in list coordinates (the window applied), and where their page
// ids start.
struct Requests {
  std::vector<int32_t> begin, end, page_base, tok_off;
  int64_t page_ids_needed = 0;
  // Sparse decode (ops::SparseRanges): entry r is a key range of request owner[r] whose
  // list has stride lstride[r]; the plan has `batch` requests. Empty for dense decode.
  std::vector<int32_t> owner, lstride;
  std::vector<int32_t> extra;  // appended to the plan's table (extra_off)
  int batch = 0;
  int sparse = 0;  // SPARSE build: 1 per-KV-head lists, 2 per-query-head lists
};

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

// The OpenCL C version the device compiles ("OpenCL C 2.0 ..." -> 20; 12 when unknown).
int opencl_c_version(const DeviceProfile& p) {
  int major = 0, minor = 0;
  if (std::sscanf(p.opencl_c_version.c_str(), "OpenCL C %d.%d", &major, &minor) == 2) return major * 10 + minor;
  return 12;
}

// A sub-group variant of decode.cl (kind 2: intel_subgroups, 1: khr_subgroups), or why it
// does not apply. A token slot's TPT lanes must lie in one sub-group: TPT divides the
// sub-group size and every sub-group is full (WG a multiple of it). The size checked is the
// one the build fixes (Intel's required size) or the smallest the device may pick (its
// cl_intel_required_subgroup_size sizes, AMD wavefront, NVIDIA warp); emulated: the
// SUBGROUP_SIZE parameter or 32.
ops::Variant subgroup_variant(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms,
                              int kind) {
  ops::Variant x;
  x.name = kind == 2 ? "intel_subgroups" : "khr_subgroups";
  x.file = "decode.cl", x.kernel = "paged_decode";
  x.wg = size_t(tile.wg);
  auto no = [&](const std::string& why) {
    x.why_not = why;
    return x;
  };
  if (!tile.subgroup) return no("SUBGROUP = 0");
  if (!(kind == 2 ? tile.sg_intel : tile.sg_khr)) return no("the plan names the other sub-group variant");
  if (tile.tpt < 2) return no("one lane per token (TPT = 1): no reduction across lanes");
  const std::string why = params::why_unavailable(prof, x.name);
  if (!why.empty()) return no(why);
  const std::string feature = kind == 2 ? "cl_intel_subgroups" : "cl_khr_subgroups";
  const bool emulated = params::emulated(prof, feature);
  const unsigned min_size =
      prof.subgroup_sizes.empty() ? 0u : *std::min_element(prof.subgroup_sizes.begin(), prof.subgroup_sizes.end());
  const std::string size_name = "SUBGROUP_SIZE = " + std::to_string(tile.sg_size);
  SubgroupBuild sg;
  sg.kind = kind;
  if (emulated) {
    sg.size = tile.sg_size > 0 ? tile.sg_size : 32;
    sg.reqd = kind == 2 && tile.sg_size > 0;
    ops::add_emulation(prof, feature, sg.emulation);
  } else if (kind == 2 && tile.sg_size > 0) {
    if (!prof.intel_required_subgroup_size) return no(size_name + " needs cl_intel_required_subgroup_size");
    if (!prof.subgroup_sizes.empty() && std::find(prof.subgroup_sizes.begin(), prof.subgroup_sizes.end(),
                                                  unsigned(tile.sg_size)) == prof.subgroup_sizes.end())
      return no(size_name + " is not a sub-group size of the device");
    sg.size = tile.sg_size, sg.reqd = 1;
  } else {
    sg.size = int(min_size);
  }
  if (sg.size <= 0)
    return no("sub-group size unknown (no required sizes, wavefront or warp size): TPT cannot be checked against it");
  if (kind == 1) {
    const bool has_shuffle = emulated || prof.has_extension("cl_khr_subgroup_shuffle");
    if (tile.sg_shuffle == 1 && !has_shuffle) return no("SUBGROUP_SHUFFLE = 1 needs cl_khr_subgroup_shuffle");
    sg.shuffle = tile.sg_shuffle >= 0 ? tile.sg_shuffle : int(has_shuffle);
    // The khr builtins are OpenCL C 2.0 (cl_khr_subgroups) or 3.0 (__opencl_c_subgroups).
    const int v = opencl_c_version(prof);
    if (!emulated && v >= 20) sg.cl_std = v >= 30 ? "-cl-std=CL3.0" : "-cl-std=CL2.0";
  }
  if (sg.size % tile.tpt)
    return no("TPT = " + std::to_string(tile.tpt) + " lanes per token do not divide the sub-group size " +
              std::to_string(sg.size));
  if (tile.wg % sg.size)
    return no("WG = " + std::to_string(tile.wg) + " is not a multiple of the sub-group size " + std::to_string(sg.size));
  x.local_bytes = local_bytes(tile, cache.head_dim, sg.shuffle != 0);
  x.options = build_options(tile, cache, false, prof.is_cpu, denorms, sg);
  return x;
}

// The decode kernel's variants, best first: the cpu kernel where CPU_KERNEL asks for it, the
// NVIDIA tensor-core kernel for int8 where MMA does, the NVIDIA shfl butterfly where PTX_SHFL does, the sub-group shuffles where SUBGROUP does
// (Intel's, then the standard ones), the local-memory butterfly everywhere.
std::vector<ops::Variant> variants(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms) {
  std::vector<ops::Variant> v;
  {
    ops::Variant x;
    x.name = "cpu";
    x.file = "decode_cpu.cl", x.kernel = "paged_decode_cpu";
    x.wg = 1, x.local_bytes = 0;
    if (!tile.cpu) x.why_not = "CPU_KERNEL = 0";
    else x.why_not = params::why_unavailable(prof, x.name);
    if (x.why_not.empty()) x.options = cpu_build_options(prof, tile, cache, denorms);
    v.push_back(std::move(x));
  }
  v.push_back(mma_variant(prof, tile, cache));
  auto lanes = [&](bool shfl) {
    ops::Variant x;
    x.name = shfl ? "nv_ptx_shfl" : "generic";
    x.file = "decode.cl", x.kernel = "paged_decode";
    x.wg = size_t(tile.wg), x.local_bytes = local_bytes(tile, cache.head_dim, shfl);
    if (shfl && !(tile.ptx_shfl && tile.tpt > 1)) x.why_not = "PTX_SHFL = 0 or one lane per token";
    else if (shfl) x.why_not = params::why_unavailable(prof, x.name);
    if (x.why_not.empty()) x.options = build_options(tile, cache, shfl, prof.is_cpu, denorms);
    return x;
  };
  v.push_back(lanes(true));
  v.push_back(subgroup_variant(prof, tile, cache, denorms, 2));
  v.push_back(subgroup_variant(prof, tile, cache, denorms, 1));
  v.push_back(lanes(false));
  return v;
}

void build_kernels(const Context& ctx, const KTile& tile, const PagedKV& cache, const ops::DecodeCheckCase& k,
                   DecodePlanState& st, DecodePlan& plan) {
  auto& c = rt::impl(ctx);
  const bool denorms = ops::fp32_denorms(c);
  // Variants never run on hardware of their kind are used after this check passes.
  const ops::SelfCheck check = [&](const ops::Variant& v) { return ops::decode_self_check(ctx, k, v); };
  ops::BuiltVariant b = ops::select_and_build(c, "decode", variants(c.profile, tile, cache, denorms), check);
  st.decode_prog = b.program;
  st.decode_k = b.kernel;
  st.wg = b.variant.wg;
  st.cpu = b.variant.name == "cpu";
  plan.variant = b.variant.name;
  plan.kernel_options = b.variant.options;
  auto mp = ops::merge_program(c);
  st.merge_prog = mp.program;
  st.merge_wg = mp.wg;
  st.merge_k = &mp.program->kernel("merge_partials");
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
  fx->max_splits = std::max(1, cfg.max_splits);
  const int64_t c = planner::deterministic_chunk(cfg);
  const bool split = cfg.max_splits > 1 && c < max_keys;
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
  if (r.sparse == 2) tile.gmax = 1, tile.n_hblk = group;
  tile.sparse = r.sparse;

  planner::SplitKVConfig cfg;
  cfg.units_per_item = int64_t(cache.num_kv_heads) * tile.n_hblk;
  cfg.max_concurrent = int64_t(std::max(1u, c.profile.compute_units)) * sp.wgs_per_cu;
  cfg.min_chunk = sp.min_chunk;
  // Sparse: a request's ranges (window, selected pages) share one merge.
  cfg.max_splits = std::min(r.sparse ? kMaxMergeParts / 2 : kMaxMergeParts, opt.max_splits ? opt.max_splits : sp.max_splits);
  cfg.align = std::max(16, tile.cpu ? tile.unroll : (tile.wg / tile.tpt) * tile.unroll);
  cfg.deterministic = opt.deterministic;
  cfg.fixed_chunk = opt.split_tokens ? opt.split_tokens : sp.det_chunk;
  DecodePlanState::Fixed fx;
  fx.window_left = opt.window_left, fx.max_pages = fixed ? fixed->max_pages : 0;
  planner::SplitKVPlan sk = fixed ? fixed_split(*fixed, cache.page_size, cfg, &fx)
                                  : planner::plan_split_kv(r.begin.data(), r.end.data(), NV, cfg);
  std::vector<int32_t> range_of(sk.work.size());  // work item -> its key range
  for (size_t w = 0; w < sk.work.size(); ++w) range_of[w] = sk.work[w].req;
  if (r.sparse) merge_by_owner(sk, r.owner, B);
  // The fused merge only for plans that split: its code slows the unsplit kernel
  // (docs/results-h100.md), and a plan without merges never uses it. A separate program,
  // cached like any other.
  if (sk.merges.empty()) tile.fuse_merge = 0;
  // PREFETCH doubles the K/V registers: it pays where the planner sized a split grid to
  // one wave (each work-group's latency is the time), not for big unsplit batches, which
  // need the occupancy (docs/results-h100.md).
  // (int8 / int4: the scales ride the plain path)
  if (sk.merges.empty() || r.sparse || cache.dtype == DType::I8 || cache.dtype == DType::I4) tile.prefetch = 0;
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

  auto st = std::make_shared<DecodePlanState>();
  DecodePlan plan;
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

  ops::DecodeCheckCase k;
  k.cache = cache, k.group = group, k.q_dtype = opt.q_dtype, k.o_dtype = opt.o_dtype, k.params = opt.params;
  k.split = !sk.merges.empty();
  build_kernels(ctx, tile, cache, k, *st, plan);
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

}  // namespace

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
  const int cb = ops::merge_col_blocks(rt::impl(ctx).profile, st->num_merges, Hq, D);
  size_t mg[2] = {size_t(st->num_merges) * size_t(cb) * st->merge_wg, size_t(Hq)}, ml[2] = {st->merge_wg, 1};
  try {
    st->merge_k->launch(q, 2, mg, ml, 1, &ev1, e.event, st->table, cl_int(st->merge_off), ws,
                        cl_ulong(st->lse_off_floats), b.o, cl_int(st->o_dtype), lse, cl_int(b.lse != nullptr), sinks,
                        cl_int(b.sinks != nullptr), cl_int(Hq), cl_int(D), cl_int(cb));
  } catch (...) {
    clReleaseEvent(ev1);
    throw;
  }
  clReleaseEvent(ev1);
}

}  // namespace ops

void decode_run(const Context& ctx, const DecodePlan& plan, const DecodeBuffers& b, const Enqueue& e) {
  ops::decode_check(plan, b);
  ops::decode_enqueue(ctx, plan, b, e);
}

// ---- plain-data form ----
namespace {
// The variant in a plan vector: 0 generic, 1 nv_ptx_shfl, 2 cpu, 3 intel_subgroups,
// 4 khr_subgroups, 5 nv_mma_sync (versions before the CPU variant wrote 0 or 1 here).
int64_t variant_code(const std::string& v) {
  return v == "nv_ptx_shfl"       ? 1
         : v == "cpu"             ? 2
         : v == "intel_subgroups" ? 3
         : v == "khr_subgroups"   ? 4
         : v == "nv_mma_sync"     ? 5
                                  : 0;
}
}  // namespace

std::vector<int64_t> DecodePlan::to_vector() const {
  if (!state_) rt::invalid("DecodePlan::to_vector: empty plan");
  if (state_->fixed) rt::invalid("DecodePlan::to_vector: a fixed-capacity plan's work list lives on the device");
  const DecodePlanState& st = *state_;
  auto fbits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return int64_t(u);
  };
  std::vector<int64_t> v = {kPlanMagic, kPlanVersion, batch_size, num_qo_heads, num_kv_heads, head_dim, page_size,
                            page_table, page_ids_needed, int64_t(q_dtype), int64_t(o_dtype), cache.num_pages,
                            int64_t(cache.layout), int64_t(cache.dtype), cache.page_stride(), cache.token_stride(),
                            cache.head_stride(), int64_t(cache.scale_dtype), cache.scale_stride_page,
                            cache.scale_stride_token, cache.scale_stride_head, cache.quant_group, num_work, num_partials, num_merges, chunk_tokens, workspace_bytes,
                            tile.wg, tile.tpt, tile.gmax, tile.unroll, tile.load_bytes,
                            tile.head_blocks, variant_code(variant), int64_t(st.fuse), int64_t(st.prefetch), st.group, st.log2_page, fbits(st.q_scale),
                            fbits(st.cap_log2), fbits(st.inv_cap), st.lse_off_floats, st.work_off, st.merge_off,
                            st.sets.base, int64_t(st.host.size())};
  v.insert(v.end(), st.host.begin(), st.host.end());
  return v;
}

namespace {

// A plan vector comes from outside the library: every field the kernels index with is
// checked against the others, so a forged or corrupted vector is rejected, never run.
[[noreturn]] void bad_vector(const std::string& why) { rt::invalid("DecodePlan::from_vector: " + why); }

int vec_int(int64_t x, const char* name) {
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    bad_vector(std::string(name) + " = " + std::to_string(x) + " does not fit int");
  return int(x);
}

void check_vector_tile(const DecodePlan& p, const KTile& t, const DecodePlanState& st) {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) bad_vector(why);
  };
  need(ops::supported_head_dim(p.head_dim), "head_dim = " + std::to_string(p.head_dim) + " unsupported");
  need(is_pow2(p.page_size) && p.page_size <= 256, "page_size = " + std::to_string(p.page_size) + " unsupported");
  need(p.batch_size >= 0 && p.num_kv_heads >= 1 && p.num_qo_heads >= 1 && p.num_qo_heads % p.num_kv_heads == 0,
       "batch_size / num_qo_heads / num_kv_heads inconsistent");
  need(ops::is_float_io(p.q_dtype) && ops::is_float_io(p.o_dtype), "q/o dtype codes unsupported");
  need(int(p.cache.layout) == 0 || int(p.cache.layout) == 1, "cache layout code unsupported");
  need(st.group == p.num_qo_heads / p.num_kv_heads, "group != num_qo_heads / num_kv_heads");
  need(st.log2_page == log2_int(p.page_size), "log2_page does not match page_size");
  need(is_pow2(t.wg) && t.wg <= 1024 && is_pow2(t.tpt) && t.tpt <= 32 && t.tpt <= t.wg, "tile WG/TPT out of range");
  need(t.gmax >= 1 && t.gmax <= 16 && t.unroll >= 1 && t.unroll <= 16, "tile GMAX/UNROLL out of range");
  need(t.load_bytes == 4 || t.load_bytes == 8 || t.load_bytes == 16, "tile LOAD_BYTES out of range");
  need(!t.cpu || ((t.unroll == 4 || t.unroll == 8 || t.unroll == 16) && p.head_dim % t.unroll == 0),
       "CPU tile VW (UNROLL) must be 4, 8 or 16 and divide head_dim");
  need(!t.cpu || !t.fuse_merge, "CPU tile with a fused merge");
  const DType kt = p.cache.dtype;
  need(kv_nbytes(kt, p.cache.page_stride()) % t.load_bytes == 0 && kv_nbytes(kt, p.cache.token_stride()) % t.load_bytes == 0 &&
           kv_nbytes(kt, p.cache.head_stride()) % t.load_bytes == 0 && kv_nbytes(kt, p.head_dim) % t.load_bytes == 0,
       "LOAD_BYTES does not divide the cache strides");
  need(t.n_hblk == (st.group + t.gmax - 1) / t.gmax, "head blocks != ceil(group / GMAX)");
  need(p.num_work >= 0 && p.num_partials >= 0 && p.num_merges >= 0 && p.num_merges <= p.num_partials,
       "work / partial / merge counts out of range");
  need(p.page_ids_needed >= 0, "page_ids_needed < 0");
}

// Work items and merge entries: every index the kernels follow stays inside q/o, the
// page-id list, the partial states and the merge entries.
void check_vector_table(const DecodePlan& p, const DecodePlanState& st) {
  const std::vector<int32_t>& h = st.host;
  if (st.work_off != 0 || int64_t(st.merge_off) != 8 * int64_t(p.num_work) ||
      int64_t(h.size()) != int64_t(st.sets.base) + int64_t(ops::CounterSets::kSets) * st.sets.per_set)
    bad_vector("table layout does not match num_work / num_merges");
  for (size_t k = size_t(st.sets.base); k < h.size(); ++k)
    if (h[k] != 0) bad_vector("merge counters are not zero");
  const int shift = st.log2_page;
  for (int w = 0; w < p.num_work; ++w) {
    const int32_t* e = &h[size_t(8) * w];
    const std::string at = "work item " + std::to_string(w);
    if (e[0] < 0 || e[0] >= p.batch_size) bad_vector(at + ": request outside the batch");
    if (e[1] < 0 || e[2] < e[1]) bad_vector(at + ": bad key range");
    if (e[3] < -1 || e[3] >= p.num_partials) bad_vector(at + ": partial state outside the workspace");
    if (e[4] < 0 || e[5] < 0 || e[5] >= p.page_size) bad_vector(at + ": bad page base / token offset");
    if (e[2] > e[1]) {
      if (p.cache.num_pages < 1) bad_vector(at + ": keys in a cache of 0 pages");
      const int64_t last = int64_t(e[4]) + ((int64_t(e[5]) + e[2] - 1) >> shift);
      if (last >= p.page_ids_needed) bad_vector(at + ": keys past the page-id list");
    }
    if (e[3] >= 0 && st.fuse && (e[6] < 0 || e[6] >= p.num_merges)) bad_vector(at + ": merge entry out of range");
  }
  for (int m = 0; m < p.num_merges; ++m) {
    const int32_t* e = &h[size_t(st.merge_off) + size_t(4) * m];
    if (e[0] < 0 || e[0] >= p.batch_size || e[1] < 0 || e[2] < 1 || e[2] > kMaxMergeParts ||
        int64_t(e[1]) + e[2] > p.num_partials)
      bad_vector("merge entry " + std::to_string(m) + " out of range");
  }
}

}  // namespace

DecodePlan DecodePlan::from_vector(const Context& ctx, const std::vector<int64_t>& v, cl_command_queue queue) {
  constexpr size_t kHeader = 46;
  if (v.size() < kHeader || v[0] != kPlanMagic || v[1] != kPlanVersion)
    bad_vector("not a decode plan vector (magic/version mismatch)");
  auto fval = [](int64_t x) {
    uint32_t u = uint32_t(x);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  size_t i = 2;
  auto next_int = [&](const char* name) { return vec_int(v[i++], name); };
  DecodePlan p;
  p.batch_size = next_int("batch_size"), p.num_qo_heads = next_int("num_qo_heads");
  p.num_kv_heads = next_int("num_kv_heads"), p.head_dim = next_int("head_dim");
  p.page_size = next_int("page_size"), p.page_table = v[i++] != 0, p.page_ids_needed = v[i++];
  p.q_dtype = DType(next_int("q_dtype")), p.o_dtype = DType(next_int("o_dtype"));
  p.cache.num_pages = next_int("num_pages"), p.cache.layout = KVLayout(next_int("layout"));
  p.cache.dtype = DType(next_int("kv dtype"));
  p.cache.stride_page = v[i++], p.cache.stride_token = v[i++], p.cache.stride_head = v[i++];
  p.cache.scale_dtype = DType(next_int("scale dtype"));
  p.cache.scale_stride_page = v[i++], p.cache.scale_stride_token = v[i++], p.cache.scale_stride_head = v[i++];
  p.cache.quant_group = next_int("quant_group");
  p.cache.page_size = p.page_size, p.cache.num_kv_heads = p.num_kv_heads, p.cache.head_dim = p.head_dim;
  p.num_work = next_int("num_work"), p.num_partials = next_int("num_partials");
  p.num_merges = next_int("num_merges"), p.chunk_tokens = next_int("chunk_tokens");
  p.workspace_bytes = v[i++];
  KTile t;
  t.wg = next_int("WG"), t.tpt = next_int("TPT"), t.gmax = next_int("GMAX"), t.unroll = next_int("UNROLL");
  t.load_bytes = next_int("LOAD_BYTES");
  t.n_hblk = next_int("head blocks");
  const int64_t vcode = v[i++];
  if (vcode < 0 || vcode > 5) bad_vector("variant code out of range");
  t.ptx_shfl = vcode == 1;
  t.mma = vcode == 5;
  t.cpu = vcode == 2;
  t.subgroup = vcode == 3 || vcode == 4;
  t.sg_intel = vcode == 3, t.sg_khr = vcode == 4;
  t.fuse_merge = v[i++] != 0;
  t.prefetch = v[i++] != 0;
  auto st = std::make_shared<DecodePlanState>();
  st->fuse = t.fuse_merge != 0;
  st->prefetch = t.prefetch != 0;
  st->group = next_int("group"), st->log2_page = next_int("log2_page");
  st->q_scale = fval(v[i++]), st->cap_log2 = fval(v[i++]), st->inv_cap = fval(v[i++]);
  const int64_t lse_off = v[i++];
  st->work_off = next_int("work_off"), st->merge_off = next_int("merge_off");
  const int64_t counter_base = v[i++];
  const int64_t n = v[i++];
  if (i != kHeader || n < 0 || v.size() - kHeader != uint64_t(n)) bad_vector("table length does not match the vector");
  ops::check_paged_kv(p.cache, "plan cache", true, true);
  check_vector_tile(p, t, *st);
  // The workspace layout and the counter sets are recomputed, not trusted.
  planner::WorkspaceLayout ws = planner::workspace_layout(p.num_partials, p.num_qo_heads, p.head_dim);
  if (ws.bytes != p.workspace_bytes || ws.lse_offset_bytes / 4 != lse_off)
    bad_vector("workspace layout does not match the plan's shape");
  st->lse_off_floats = lse_off;
  st->sets.base = rt::checked::to_i32(int64_t(st->merge_off) + 4 * int64_t(p.num_merges), "merge counters' offset");
  st->sets.per_set =
      st->fuse ? rt::checked::to_i32(int64_t(p.num_merges) * p.num_kv_heads * t.n_hblk, "merge counters") : 0;
  if (counter_base != st->sets.base) bad_vector("merge counters' offset does not match the table layout");
  st->host.reserve(size_t(n));
  for (int64_t k = 0; k < n; ++k) st->host.push_back(int32_t(v[kHeader + size_t(k)]));
  check_vector_table(p, *st);
  st->gmax = t.gmax, st->n_hblk = t.n_hblk, st->wg = size_t(t.wg);
  auto& c = rt::impl(ctx);
  // Speed only (the merge's order is fixed): the device's current entry, not serialised.
  const params::Entry entry = params::lookup(c.profile, "decode", kv_key(p.cache.dtype));
  t.merge_batch = std::clamp(entry.get_or("MERGE_BATCH", 8), 1, 32);
  t.mma_unroll = std::clamp(entry.get_or("MMA_UNROLL", 1), 1, 4);
  // Sub-group size and shuffle form: the device's current entry (the sums are the same bits
  // in every form).
  if (t.subgroup) {
    t.sg_size = entry.get_or("SUBGROUP_SIZE", 0);
    if (t.sg_size < 0 || t.sg_size > 128 || (t.sg_size && !is_pow2(t.sg_size))) t.sg_size = 0;
    t.sg_shuffle = std::clamp(entry.get_or("SUBGROUP_SHUFFLE", -1), -1, 1);
  }
  ops::DecodeCheckCase k;
  k.cache = p.cache, k.group = p.num_qo_heads / std::max(1, p.num_kv_heads), k.q_dtype = p.q_dtype;
  k.o_dtype = p.o_dtype, k.split = p.num_merges > 0;
  build_kernels(ctx, t, p.cache, k, *st, p);
  st->freeze(p);
  p.table_bytes = st->upload_host(c, queue, "decode plan table");
  p.tile = {t.wg, t.tpt, t.gmax, t.unroll, t.load_bytes, t.n_hblk};
  p.state_ = st;
  return p;
}

namespace ops {

// The KV dtype classes (16-bit, fp8, f32) at head dims 64, 80 (chunks that do not divide
// evenly), 128 and 256, GQA groups 1 and 8, each as an unsplit plan and as a split one (fused
// merge and prefetch registers where the rows ask for them); the merge pass.
void catalog_decode(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (DType dt : {DType::BF16, DType::F32, DType::FP8_E4M3})
    for (int d : {64, 80, 128, 256})
      for (int group : {1, 8})
        for (bool split : {false, true}) {
          const std::string shape = std::string(dtype_name(dt)) + " d" + std::to_string(d) + " group " +
                                    std::to_string(group) + (split ? " split" : "");
          catalog_add(out, "decode", shape, [&] {
            PagedKV cache;
            cache.num_pages = 1024, cache.page_size = 16, cache.num_kv_heads = 8, cache.head_dim = d, cache.dtype = dt;
            SplitParams sp;
            KTile tile = choose_tile(t.profile, cache, group, {}, &sp, t.preferred_float_width);
            if (!split) tile.fuse_merge = 0, tile.prefetch = 0;
            return variants(t.profile, tile, cache, t.fp32_denorms);
          });
        }
  // HSA's sparse decode (SPARSE lists per KV head and per query head), split.
  for (int sparse : {1, 2})
    catalog_add(out, "decode", "bf16 d128 group 4 sparse " + std::to_string(sparse), [&] {
      PagedKV cache;
      cache.num_pages = 1024, cache.page_size = 64, cache.num_kv_heads = 8, cache.head_dim = 128;
      SplitParams sp;
      KTile tile = choose_tile(t.profile, cache, sparse == 2 ? 1 : 4, {}, &sp, t.preferred_float_width);
      if (sparse == 2) tile.gmax = 1, tile.n_hblk = 4;
      tile.sparse = sparse, tile.prefetch = 0;
      return variants(t.profile, tile, cache, t.fp32_denorms);
    });
  // int8 KV (row scales) and int4 KV (group 64 scale/zero pairs), split and not.
  for (DType qt : {DType::I8, DType::I4}) {
    for (bool split : {false, true})
      catalog_add(out, "decode", std::string(dtype_name(qt)) + " d128 group 4" + (split ? " split" : ""), [&] {
        PagedKV cache;
        cache.num_pages = 1024, cache.page_size = 16, cache.num_kv_heads = 8, cache.head_dim = 128, cache.dtype = qt;
        if (qt == DType::I4) cache.quant_group = 64;
        SplitParams sp;
        KTile tile = choose_tile(t.profile, cache, 4, {}, &sp, t.preferred_float_width);
        tile.prefetch = 0;
        if (!split) tile.fuse_merge = 0;
        return variants(t.profile, tile, cache, t.fp32_denorms);
      });
  }
  catalog_add(out, "merge", "*", [&] { return std::vector<Variant>{merge_variant(t.profile)}; });
}

}  // namespace ops

}  // namespace clattn
