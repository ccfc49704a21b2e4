// The linear-attention kernels' candidates: the tensor-core prefill (linear_prefill_mma_nv.cl,
// nv_mma_sync, PF_MMA), the cpu kernels (linear_gdn_cpu.cl / linear_gla_cpu.cl, CPU_KERNEL) and
// the portable ones (linear_gdn.cl / linear_gla.cl: both ops' kernels in one program), each a
// tile that shrinks where the compiled kernel or a device's loop-trip limit asks for it.
#include <algorithm>

#include "backends/ops/linear/linear_impl.hpp"

namespace clattn::ops::linear {

namespace {

// The rows of both ops with the caller's overrides (LinearConfig::params): PF_* names go to
// linear_prefill, CPU_KERNEL and VW (the cpu variant's switch and vector width) to both, the
// rest to linear_decode.
struct LinParams {
  params::Entry dec, pf;
};
LinParams lookup_params(const DeviceProfile& prof, const LinearConfig& cfg) {
  LinParams p{params::lookup(prof, "linear_decode"), params::lookup(prof, "linear_prefill")};
  for (auto& [name, val] : cfg.params) {
    if (name == "CPU_KERNEL" || name == "VW") p.dec.values[name] = p.pf.values[name] = val;
    else (name.rfind("PF_", 0) == 0 ? p.pf : p.dec).values[name] = val;
  }
  return p;
}

// A loop-trip bound per token for kernels whose work-items share a state slice of dk x dvt
// and chunks of c tokens, `par` work-items (or vector lanes) at a time: the state update and
// its reads (3 passes), the chunk's k / q rows and its D rows, ten times over (rusticl's
// llvmpipe ran the cpu prefill right when planned for twice its limit at 4x, not at 2x).
void prefill_trips(ops::Variant& v, int dk, int dvt, int c, int par) {
  const int64_t work = 10 * (3 * int64_t(dk) * dvt + int64_t(c) * dk + int64_t(c) * dvt);
  v.trips_per_key = (work + par - 1) / std::max(1, par) + 16;
  v.trips_fixed = 4 * int64_t(dk) * dvt / std::max(1, par) + 1024;
}

// The portable program's tile: decode DEC_DVT x DEC_ROWS (threads DEC_DVT / DEC_VEC x
// DEC_ROWS), prefill PF_C tokens a chunk, PF_DVT state columns and PF_WG work-items a group,
// PF_DKT a K/Q tile.
struct Portable {
  int dec_dvt, dec_rows, dec_vec, pf_c, pf_dvt, pf_wg, pf_dkt;
  int dec_threads() const { return dec_dvt / dec_vec * dec_rows; }
};

// The prefill's local arrays: S slice [DK][DVT], D [C][DVT], A/P [C][C+1], 4 x [C] scalars, K
// and Q tiles [C][DKT+1].
uint64_t portable_prefill_local_bytes(int dk, const Portable& v) {
  return 4ull * (uint64_t(dk) * v.pf_dvt + uint64_t(v.pf_c) * v.pf_dvt + uint64_t(v.pf_c) * (v.pf_c + 1) +
                 4ull * v.pf_c + 2ull * v.pf_c * (v.pf_dkt + 1));
}

// Parameters from the database, clamped to the shape and the device: the decode work-group to
// the device's limit (DV slice first, which keeps the registers per work-item, then the row
// groups, then the vector), the prefill's slice and chunk to its local memory (1 KiB spare).
Portable portable_tile(const DeviceProfile& prof, const LinearConfig& cfg, const LinParams& lp) {
  const int DK = cfg.head_dim_k, DV = cfg.head_dim_v;
  const int maxwg = int(std::max<size_t>(1, prof.max_work_group_size));
  Portable v{};
  v.dec_vec = std::min(pow2_floor(std::clamp(lp.dec.get_or("DEC_VEC", 1), 1, 4)), DV);
  v.dec_dvt = std::clamp(pow2_floor(std::max(1, lp.dec.get("DEC_DVT"))), v.dec_vec, DV);
  v.dec_rows = std::min(pow2_floor(std::max(1, lp.dec.get("DEC_ROWS"))), DK);
  while (v.dec_threads() > maxwg) {
    if (v.dec_dvt > v.dec_vec) v.dec_dvt /= 2;
    else if (v.dec_rows > 1) v.dec_rows /= 2;
    else if (v.dec_vec > 1) v.dec_vec /= 2, v.dec_dvt = v.dec_vec;
    else break;
  }
  v.pf_c = pow2_floor(std::clamp(lp.pf.get("PF_C"), 2, 256));  // bounded: the local-memory estimate squares it
  v.pf_dvt = std::min(pow2_floor(std::max(1, lp.pf.get("PF_DVT"))), DV);
  v.pf_wg = std::min(pow2_floor(std::max(1, lp.pf.get("PF_WG"))), pow2_floor(maxwg));
  v.pf_dkt = std::min(pow2_floor(std::max(1, lp.pf.get_or("PF_DKT", 32))), DK);
  const unsigned long long local = prof.local_mem_bytes ? prof.local_mem_bytes : 32768;
  while (portable_prefill_local_bytes(DK, v) + 1024 > local && v.pf_dvt > 4) v.pf_dvt /= 2;
  while (portable_prefill_local_bytes(DK, v) + 1024 > local && v.pf_c > 8) v.pf_c /= 2;
  return v;
}

// The portable program (both ops' kernels) for tile `t`, as the decode (prefill false) or the
// prefill kernel: knobs DEC_DVT, DEC_ROWS, DEC_VEC (decode) or PF_WG, PF_DVT, PF_C (prefill).
ops::Variant portable_variant(const LinearConfig& cfg, const LinearStatePool& pool, bool gdn, bool prefill,
                              const Portable& base, const ops::Tile& t) {
  Portable v = base;
  if (prefill) {
    v.pf_wg = ops::knob(t, "PF_WG"), v.pf_dvt = ops::knob(t, "PF_DVT"), v.pf_c = ops::knob(t, "PF_C");
  } else {
    v.dec_dvt = ops::knob(t, "DEC_DVT"), v.dec_rows = ops::knob(t, "DEC_ROWS"), v.dec_vec = ops::knob(t, "DEC_VEC");
  }
  ops::Variant x;
  x.name = "generic", x.file = gdn ? "linear_gdn.cl" : "linear_gla.cl";
  if (v.pf_wg < 1 || v.pf_dvt < 1 || v.pf_c < 2 || v.dec_vec < 1 || v.dec_dvt < v.dec_vec || v.dec_rows < 1)
    x.why_not = "tile values out of range";
  const std::map<std::string, std::string> d = {
      {"DK", num(cfg.head_dim_k)}, {"DV", num(cfg.head_dim_v)}, {"IO_DT", num(dt_code(cfg.dtype))},
      {"ST_DT", num(dt_code(pool.dtype))}, {"PF_C", num(v.pf_c)}, {"PF_DVT", num(v.pf_dvt)},
      {"PF_WG", num(v.pf_wg)}, {"PF_DKT", num(v.pf_dkt)}, {"DEC_DVT", num(v.dec_dvt)},
      {"DEC_ROWS", num(v.dec_rows)}, {"DEC_VEC", num(v.dec_vec)}};
  x.options = rt::make_options(d);
  x.tile = t;
  if (prefill) {
    x.kernel = gdn ? "gdn_prefill" : "gla_prefill";
    x.wg = size_t(v.pf_wg), x.local_bytes = portable_prefill_local_bytes(cfg.head_dim_k, v);
    x.tile["DVT"] = v.pf_dvt, x.tile["WG"] = v.pf_wg;
    prefill_trips(x, cfg.head_dim_k, v.pf_dvt, v.pf_c, v.pf_wg);
  } else {
    x.kernel = gdn ? "gdn_decode" : "gla_decode";
    x.wg = size_t(v.dec_threads());
    x.tile["DVT"] = v.dec_dvt, x.tile["WG"] = v.dec_threads(), x.tile["VEC"] = v.dec_vec, x.tile["ROWS"] = v.dec_rows;
  }
  return x;
}

// Local arrays of linear_prefill_mma_nv.cl (32-bit words): K and Q tiles [MC][DK+8] halves,
// P [MC][MC+8] and D^T, D'^T [DVT][MC+8] halves, 5 x [MC] scalars; GDN adds A [MC][MC+1] and
// D [MC][DVT+4] in f32.
size_t mma_local_bytes(int dk, int mc, int dvt, bool gdn) {
  size_t words = size_t(mc) * (dk + 8) + size_t(mc + 8) / 2 * (mc + 2 * dvt) + 5 * size_t(mc);
  if (gdn) words += size_t(mc) * (mc + 1) + size_t(mc) * (dvt + 4);
  return 4 * words;
}

// The tensor-core prefill, chosen where the parameters ask for it (PF_MMA = 1), the device runs
// inline PTX mma.sync (variant nv_mma_sync) and the shapes suit it: q/k/v/o in f16 or bf16 (the
// MMA operand type; f32 inputs keep f32 math), Dk <= 128 (each work-item holds Dk/2 f32 state
// values in registers), tiles within local memory. PF_MMA_C tokens per chunk, PF_MMA_DVT state
// columns per work-group (16 per warp), PF_MMA_SPLIT 1: the state operand as hi + lo parts.
ops::Variant mma_prefill_variant(const DeviceProfile& prof, const LinearConfig& cfg, const LinearStatePool& pool,
                                 bool gdn, const params::Entry& pf) {
  ops::Variant v;
  v.name = "nv_mma_sync", v.file = "linear_prefill_mma_nv.cl", v.kernel = "lin_prefill_mma";
  if (pf.get_or("PF_MMA", 0) == 0) {
    v.why_not = "PF_MMA = 0";
    return v;
  }
  if (!params::variant_available(prof, "nv_mma_sync", &v.why_not)) return v;
  v.why_not.clear();
  if (cfg.dtype == DType::F32) {
    v.why_not = "f32 q/k/v keep f32 math (tensor cores take f16/bf16)";
    return v;
  }
  if (cfg.head_dim_k > 128) {
    v.why_not = "head_dim_k = " + num(cfg.head_dim_k) + " > 128 (state registers per work-item)";
    return v;
  }
  const int DV = cfg.head_dim_v;
  int dvt = std::clamp(pow2_floor(std::max(16, pf.get_or("PF_MMA_DVT", 64))), 16, std::min(128, DV));
  int mc = std::clamp(pow2_floor(std::max(16, pf.get_or("PF_MMA_C", 32))), 16, 64);
  const size_t local = prof.local_mem_bytes ? size_t(prof.local_mem_bytes) : size_t(32768);
  while (mma_local_bytes(cfg.head_dim_k, mc, dvt, gdn) + 1024 > local && dvt > 16) dvt /= 2;
  while (mma_local_bytes(cfg.head_dim_k, mc, dvt, gdn) + 1024 > local && mc > 16) mc /= 2;
  if (mma_local_bytes(cfg.head_dim_k, mc, dvt, gdn) + 1024 > local) {
    v.why_not = "tiles need " + num(int64_t(mma_local_bytes(cfg.head_dim_k, mc, dvt, gdn))) +
                " bytes of local memory, device has " + num(int64_t(local));
    return v;
  }
  const std::map<std::string, std::string> d = {
      {"DK", num(cfg.head_dim_k)}, {"DV", num(DV)},      {"IO_DT", num(dt_code(cfg.dtype))},
      {"ST_DT", num(dt_code(pool.dtype))}, {"LIN_GDN", gdn ? "1" : "0"}, {"MC", num(mc)},
      {"MDVT", num(dvt)}, {"S_SPLIT", pf.get_or("PF_MMA_SPLIT", 1) ? "1" : "0"}};
  v.options = rt::make_options(d), v.wg = size_t(2 * dvt), v.local_bytes = mma_local_bytes(cfg.head_dim_k, mc, dvt, gdn);
  v.tile = {{"C", mc}, {"DVT", dvt}, {"WG", 2 * dvt}};  // 32 work-items per 16 columns
  return v;
}

// The prefill's local arrays of the cpu kernel (floats): state slice [DK][DVT], q/k rows
// [C][DK] x 2, K^T [DK][C], D and O [C][DVT], A and P [C][C], per-token G and e^G [C] (GDN:
// and beta).
uint64_t cpu_prefill_local_bytes(int dk, int c, int dvt, bool gdn) {
  return 4ull * (uint64_t(dk) * dvt + 3ull * c * dk + 2ull * c * dvt + 2ull * c * c + (gdn ? 3ull : 2ull) * c);
}

// The cpu kernels (one work-item per work-group, which owns (request, v-head, slice of Dv
// columns); vectors of VW floats, 0 = the device's preferred width). Decode: DEC_CPU_DVT state
// columns per work-item. Prefill: PF_CPU_C tokens per chunk, PF_CPU_DVT columns per work-item,
// PF_CPU_MR x PF_CPU_MV vectors per register tile. A slice is halved (down to one register
// tile) while the batch has fewer work-groups than the device has cores (decode: 4 per core,
// since each streams only its slice); the prefill's slice and chunk are halved until its local
// arrays fit. Knobs: DVT (decode and prefill) and C (prefill), shrunk in that order.
ops::Variant cpu_variant(const DeviceProfile& prof, int preferred_width, const LinearConfig& cfg,
                         const LinearStatePool& pool, bool gdn, bool prefill, int64_t batch, const char* op,
                         const params::Entry& e) {
  ops::Variant none;
  none.name = "cpu";
  if (e.get_or("CPU_KERNEL", 0) == 0) {
    none.why_not = "CPU_KERNEL = 0";
    return none;
  }
  const int DK = cfg.head_dim_k, DV = cfg.head_dim_v;
  // (head dims 64, 128, 256: every width divides them)
  const int vw = ops::cpu_vector_width(int(e.get_or("VW", 0)), preferred_width, 0, op);
  const int64_t cores = std::max<int64_t>(1, prof.compute_units);
  auto groups = [&](int dvt) { return batch * cfg.num_v_heads * (DV / dvt); };
  std::map<std::string, std::string> d = {{"DK", num(DK)}, {"DV", num(DV)}, {"IO_DT", num(dt_code(cfg.dtype))},
                                          {"ST_DT", num(dt_code(pool.dtype))}, {"VW", num(vw)},
                                          {"PREFETCH_BUILTIN", ops::prefetch_builtin(prof)}};
  ops::Tile tile;
  if (!prefill) {
    int dvt = std::clamp(pow2_floor(std::max(1, e.get_or("DEC_CPU_DVT", 256))), vw, DV);
    while (dvt > vw && groups(dvt) < 4 * cores) dvt /= 2;
    tile = {{"DVT", dvt}};
  } else {
    int cc = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_C", 16))), std::max(vw, 8), 128);
    const int mv = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_MV", 2))), 1, DV / vw);
    // PF_CPU_MR 0: 8 rows with 16-wide vectors (16 accumulators of AVX-512's 32 vector
    // registers), else 4 (AVX2 has 16).
    int mr = e.get_or("PF_CPU_MR", 0);
    mr = mr <= 0 ? (vw >= 16 ? 8 : 4) : std::min(pow2_floor(mr), 8);
    int dvt = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_DVT", 128))), vw * mv, DV);
    while (dvt > vw * mv && groups(dvt) < cores) dvt /= 2;
    const uint64_t local = prof.local_mem_bytes ? prof.local_mem_bytes : 32768;
    while (cpu_prefill_local_bytes(DK, cc, dvt, gdn) > local && dvt > vw * mv) dvt /= 2;
    while (cpu_prefill_local_bytes(DK, cc, dvt, gdn) > local && cc > std::max(vw, 8)) cc /= 2;
    d["PF_MR"] = num(mr);
    tile = {{"DVT", dvt}, {"C", cc}, {"MV", mv}, {"VW", vw}};
  }
  rt::log().debug("{}: cpu variant, VW={} {} ({})", op, vw, ops::tile_text(tile), e.source);
  return ops::shrinkable(
      tile,
      [cfg, gdn, prefill, d, vw0 = vw](const ops::Tile& t) {
        ops::Variant v;
        v.name = "cpu", v.file = gdn ? "linear_gdn_cpu.cl" : "linear_gla_cpu.cl", v.wg = 1;
        // (A narrower slice takes narrower vectors and register tiles with it.)
        const int dvt = ops::knob(t, "DVT"), cc = ops::knob(t, "C");
        const int vw = std::min(ops::knob(t, "VW", vw0), std::max(4, dvt));
        const int mv = std::max(1, std::min(ops::knob(t, "MV", 1), dvt / vw));
        auto defs = d;
        defs["VW"] = num(vw);
        if (vw != 4 && vw != 8 && vw != 16) v.why_not = "VW 4, 8 or 16";
        if (!prefill) {
          if (dvt < vw || cfg.head_dim_v % dvt) v.why_not = "DVT a multiple of VW dividing head_dim_v";
          defs["DEC_DVT"] = num(dvt), defs["LIN_CPU_OP"] = "1";
          v.kernel = gdn ? "gdn_decode_cpu" : "gla_decode_cpu";
        } else {
          if (dvt < vw * mv || cfg.head_dim_v % dvt || cc < std::max(vw, 8) || mv < 1)
            v.why_not = "DVT >= VW x MV, C >= VW";
          defs["PF_C"] = num(cc), defs["PF_DVT"] = num(dvt), defs["PF_MV"] = num(mv), defs["LIN_CPU_OP"] = "2";
          v.kernel = gdn ? "gdn_prefill_cpu" : "gla_prefill_cpu";
          v.local_bytes = cpu_prefill_local_bytes(cfg.head_dim_k, cc, dvt, gdn);
          prefill_trips(v, cfg.head_dim_k, dvt, cc, vw);
        }
        v.options = rt::make_options(defs);
        v.tile = t;
        v.tile["WG"] = 1;
        if (prefill) v.tile["VW"] = vw, v.tile["MV"] = mv;
        return v;
      },
      prefill ? std::vector<std::pair<std::string, int>>{{"DVT", 4}, {"C", 8}}
              : std::vector<std::pair<std::string, int>>{{"DVT", 4}});
}

}  // namespace

std::vector<ops::Variant> candidates(const DeviceProfile& prof, int preferred_width, const LinearConfig& cfg,
                                     const LinearStatePool& pool, bool gdn, bool prefill, int64_t batch,
                                     const char* op) {
  const LinParams lp = lookup_params(prof, cfg);
  std::vector<ops::Variant> out;
  if (prefill) out.push_back(mma_prefill_variant(prof, cfg, pool, gdn, lp.pf));
  out.push_back(cpu_variant(prof, preferred_width, cfg, pool, gdn, prefill, batch, op, prefill ? lp.pf : lp.dec));
  const Portable base = portable_tile(prof, cfg, lp);
  const ops::Tile tile = prefill ? ops::Tile{{"PF_WG", base.pf_wg}, {"PF_DVT", base.pf_dvt}, {"PF_C", base.pf_c}}
                                 : ops::Tile{{"DEC_DVT", base.dec_dvt}, {"DEC_ROWS", base.dec_rows},
                                             {"DEC_VEC", base.dec_vec}};
  out.push_back(ops::shrinkable(
      tile, [cfg, pool, gdn, prefill, base](const ops::Tile& t) { return portable_variant(cfg, pool, gdn, prefill, base, t); },
      prefill ? std::vector<std::pair<std::string, int>>{{"PF_WG", 1}, {"PF_DVT", 4}, {"PF_C", 8}}
              : std::vector<std::pair<std::string, int>>{{"DEC_DVT", 1}, {"DEC_ROWS", 1}, {"DEC_VEC", 1}}));
  rt::log().debug("linear {}: DK={} DV={} io={} state={} portable tile {} ({})", gdn ? "gdn" : "gla", cfg.head_dim_k,
                  cfg.head_dim_v, dtype_name(cfg.dtype), dtype_name(pool.dtype), ops::tile_text(tile),
                  prefill ? lp.pf.source : lp.dec.source);
  return out;
}

}  // namespace clattn::ops::linear

namespace clattn::ops {

// GDN and GLA, decode and prefill, 16-bit and f32 q/k/v (f32 state), head dims 64 / 128 / 256,
// a batch of 64 requests with 16 v-heads.
void catalog_linear(const CatalogTarget& t, std::vector<CatalogEntry>& out) {
  for (bool gdn : {true, false})
    for (bool prefill : {false, true})
      for (DType dt : {DType::BF16, DType::F32})
        for (int d : {64, 128, 256}) {
          const char* op = gdn ? (prefill ? "gdn_prefill" : "gdn_decode") : (prefill ? "gla_prefill" : "gla_decode");
          catalog_add(out, op, std::string(dtype_name(dt)) + " d" + std::to_string(d), [&] {
            LinearConfig cfg;
            cfg.num_qk_heads = 16, cfg.num_v_heads = 16, cfg.head_dim_k = d, cfg.head_dim_v = d, cfg.dtype = dt;
            LinearStatePool pool;
            pool.num_slots = 64;
            return linear::candidates(t.profile, t.preferred_float_width, cfg, pool, gdn, prefill, 64, op);
          });
        }
}

}  // namespace clattn::ops
