// The tile the parameter rows (and the caller's overrides) ask for: every variant's knobs,
// validated, and which variants the device and the cache allow; variants.cpp turns it into
// candidates that shrink where the compiled kernel does not fit.
#include <algorithm>

#include "backends/ops/mla/mla_impl.hpp"
#include "backends/params/database.hpp"
#include "backends/params/variants.hpp"

namespace clattn::ops::mla {

using std::to_string;

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

}  // namespace clattn::ops::mla
