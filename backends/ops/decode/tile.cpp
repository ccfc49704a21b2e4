// The decode tile from the parameter rows and the device, and its local-memory size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backends/ops/decode/decode_impl.hpp"

namespace clattn {
namespace ops::decode {

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
  t.group = group;
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
  t.tpt_max = std::min(pow2_ceil(nchunk), 32);
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

ops::Tile tile_of(const KTile& t, bool cpu) {
  if (cpu) return {{"GMAX", t.gmax}, {"VW", t.unroll}};
  return {{"WG", t.wg}, {"TPT", t.tpt}, {"GMAX", t.gmax}, {"UNROLL", t.unroll}};
}

KTile with_tile(const KTile& base, const ops::Tile& t, bool cpu, std::string* why_not) {
  KTile k = base;
  k.gmax = ops::knob(t, "GMAX", base.gmax);
  if (cpu) {
    k.unroll = ops::knob(t, "VW", base.unroll);
    if (k.unroll != 4 && k.unroll != 8 && k.unroll != 16) *why_not = "VW must be 4, 8 or 16";
  } else {
    k.wg = ops::knob(t, "WG", base.wg), k.tpt = ops::knob(t, "TPT", base.tpt);
    k.unroll = ops::knob(t, "UNROLL", base.unroll);
    k.tpt = std::min({k.tpt, k.wg, base.tpt_max});  // a token's lanes lie in one group
    if (!is_pow2(k.wg) || !is_pow2(k.tpt) || k.unroll < 1) *why_not = "WG and TPT must be powers of two, UNROLL >= 1";
  }
  if (base.sparse == 2) k.gmax = 1;  // per-query-head lists: one head per work-group
  if (k.gmax < 1) *why_not = "GMAX must be >= 1";
  k.n_hblk = int(rt::checked::ceil_div(base.group, std::max(1, k.gmax)));
  return k;
}

void set_trips(ops::Variant& v, const KTile& t, const PagedKV& c) {
  // Loop iterations counted as if no loop were unrolled (an upper bound; docs/portability.md).
  const int64_t D = c.head_dim, G = t.gmax;
  if (v.name == "cpu") {
    // decode_cpu.cl per block of VW tokens: row offsets and prefetch rows (2 VW), K rows
    // (VW x NV), q.k micro-tiles, the softmax (a rescale of NV vectors per head) and P.V.
    const int64_t vw = t.unroll, nv = D / vw, racc = vw >= 16 ? 16 : 8;
    const int64_t hb = std::min<int64_t>(G, racc / 4), hp = std::min<int64_t>(G, 4);
    const int64_t pcm = std::min<int64_t>(racc / hp, 4), pc = nv % pcm == 0 ? pcm : nv % 2 == 0 && pcm >= 2 ? 2 : 1;
    const int64_t block = 3 * vw + vw * nv + (vw / 4) * ((G + hb - 1) / hb) * (5 * hb + nv * (4 + 4 * hb)) +
                          G * (2 + nv) + ((G + hp - 1) / hp) * (nv / pc) * (2 * hp * pc + vw * (1 + pc + hp * (1 + pc)));
    v.trips_per_key = (block + vw - 1) / vw;
    v.trips_fixed = 4 * G * nv + 64;
    return;
  }
  if (v.name == "nv_mma_sync") return;  // NVIDIA's driver has no loop limit
  // decode.cl per tile step (UNROLL tokens a slot): loads of K and V, the scores and P.V over
  // the lane's elements, the butterfly, the softmax; counted twice for the helpers' loops.
  const int64_t vec = load_elems(c.dtype, t.load_bytes), nchunk = D / vec;
  const int64_t nch = (nchunk + t.tpt - 1) / t.tpt, el = nch * vec, lw = t.load_bytes / 4;
  const int64_t nslot = std::max(1, t.wg / t.tpt);
  const int64_t step = t.unroll * (1 + 2 * nch * lw + 2 * G * el + G * (2 * log2_int(t.tpt) + 4) + 2 * nch) + G * el + 8;
  v.trips_per_key = (2 * step + nslot * t.unroll - 1) / (nslot * t.unroll);
  // q rows, the slots' merge through local memory, the fused merge's parts (at most 256).
  v.trips_fixed = 2 * (3 * G * el + nslot * G * el + 2 * G * D) + 256 + (t.fuse_merge ? 2 * 256 * G * (D / t.wg + 1) : 0);
}

}  // namespace ops::decode
}  // namespace clattn
