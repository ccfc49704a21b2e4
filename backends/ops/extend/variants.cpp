// The extend kernels' variants (AMD matrix, NVIDIA tensor-core, Intel DPAS, cpu, generic) and
// the op's part of the catalog.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>

#include "backends/ops/extend/extend_impl.hpp"

namespace clattn {
namespace ops::extend {

using ops::param;

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

namespace {

// The fixed-tile candidates in order of preference (AMD matrix instructions, the NVIDIA
// tensor-core kernels, Intel DPAS) where the parameters or the caller ask for them and the device
// and shapes allow it.
std::vector<Tile> fixed_candidates(const DeviceProfile& prof, const KVDesc& kv, const ExtendOptions& opt,
                                   const params::Entry& e, const std::string& tma_why_not, std::string* why_not_mma) {
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

  return out;
}

// A tile of the fixed-tile kernels (AMD matrix, tensor-core, DPAS) as a variant: its tile
// carries the geometry the plan reads back (WG, ROWS, KEYS, TMA).
ops::Variant variant_of(const Tile& t) {
  ops::Variant v;
  v.name = t.variant, v.file = t.file, v.options = t.options, v.wg = size_t(t.wg), v.local_bytes = t.local_bytes;
  v.kernel = !t.kernel.empty() ? t.kernel : "extend_mma";
  // (A register-capped nv_wgmma build: the driver's limit is for the uncapped count.)
  v.check_wg = t.options.find(rt::kPtxMaxnregDefine) == std::string::npos;
  v.tile = {{"WG", t.wg}, {"ROWS", t.rows}, {"KEYS", t.keys}, {"TMA", t.tma ? 1 : 0}};
  return v;
}

// The CPU kernel (extend_cpu.cl): knobs RV and BK, shrunk keys first (down to one micro-tile),
// then row vectors; KEY_SPLIT for plans that split keys.
ops::Variant cpu_variant(const KVDesc& kv, const CpuTile& asked) {
  const ops::Tile tile = {{"RV", asked.rv}, {"BK", asked.bk}, {"KEY_SPLIT", 0}};
  return ops::shrinkable(tile, [kv, asked](const ops::Tile& t) {
    CpuTile ct = asked;
    ct.rv = ops::knob(t, "RV"), ct.bk = ops::knob(t, "BK");
    ops::Variant v;
    v.name = "cpu", v.file = "extend_cpu.cl", v.kernel = "extend_cpu", v.wg = 1;
    if (ct.rv < 1 || ct.bk < ct.sk || ct.bk % ct.sk != 0) v.why_not = "RV >= 1 and BK a multiple of SK";
    std::map<std::string, std::string> d = {{"HEAD_DIM", to_string(kv.head_dim)}, {"KV_DT", to_string(int(kv.dtype))},
                                            {"VW", to_string(ct.vw)},             {"RV", to_string(ct.rv)},
                                            {"BK", to_string(ct.bk)},             {"SK", to_string(ct.sk)},
                                            {"PD", to_string(ct.pd)}};
    if (ops::knob(t, "KEY_SPLIT")) d["KEY_SPLIT"] = "1";
    add_quant_defs(kv, d);
    v.options = rt::make_options(d);
    v.local_bytes = cpu_local_bytes(ct, kv.head_dim);
    v.tile = t;
    v.tile["WG"] = 1, v.tile["ROWS"] = ct.rows(), v.tile["KEYS"] = ct.bk;
    ops::bound_trips(v, ct.rows(), kv.head_dim, kv.head_dim, 1, ct.vw);
    return v;
  }, {{"BK", 1}, {"RV", 1}});
}

// The portable kernel (extend.cl): knobs ROWS, TX (work-items across a row block: WG = ROWS /
// TM x TX), KEYS and QRES. Shrunk: Q staged per chunk instead of resident, then fewer keys per
// tile (down to one per tx), then fewer rows, then fewer work-items across them.
ops::Variant generic_variant(const DeviceProfile& prof, const KVDesc& kv, const GenericTile& asked, int sub_tx,
                             int sunroll, int punroll) {
  const ops::Tile tile = {{"ROWS", asked.rows}, {"TX", asked.tx()}, {"KEYS", asked.keys}, {"QRES", asked.qres},
                          {"KEY_SPLIT", 0}};
  const bool cpu = prof.is_cpu;
  return ops::shrinkable(tile, [kv, asked, sub_tx, sunroll, punroll, cpu](const ops::Tile& t) {
    GenericTile g = asked;
    g.rows = ops::knob(t, "ROWS"), g.keys = ops::knob(t, "KEYS"), g.qres = ops::knob(t, "QRES");
    g.wg = std::max(1, g.rows / std::max(1, g.tm)) * ops::knob(t, "TX");
    g.vc = std::min(asked.vc, g.keys);
    ops::Variant v;
    v.name = "generic", v.file = "extend.cl", v.kernel = "extend_generic", v.wg = size_t(g.wg);
    v.why_not = generic_unfit(g, kv.head_dim);
    std::map<std::string, std::string> d = {
        {"HEAD_DIM", to_string(kv.head_dim)}, {"KV_DT", to_string(int(kv.dtype))}, {"WG", to_string(g.wg)},
        {"ROWS", to_string(g.rows)},         {"KEYS", to_string(g.keys)},        {"TM", to_string(g.tm)},
        {"DC", to_string(g.dc)},             {"VC", to_string(g.vc)},            {"QRES", to_string(g.qres)},
        {"SUB_TX", to_string(sub_tx)},        {"SUNROLL", to_string(sunroll)},     {"PUNROLL", to_string(std::min(punroll, g.vc))},
        {"UNROLL_HINTS", cpu ? "0" : "1"}};
    if (ops::knob(t, "KEY_SPLIT")) d["KEY_SPLIT"] = "1";
    add_quant_defs(kv, d);
    v.options = rt::make_options(d);
    v.local_bytes = generic_local_bytes(g, kv.head_dim, kv_meta(kv));
    v.tile = t;
    v.tile["WG"] = g.wg;
    ops::bound_trips(v, g.rows, kv.head_dim, kv.head_dim, g.wg, 4);
    return v;
  }, {{"QRES", 0}, {"KEYS", 1}, {"ROWS", 1}, {"TX", 1}});
}

}  // namespace

// Candidates in order of preference: the matrix-instruction kernels when the parameters (or
// the caller) ask for them and the device and shapes allow it, the cpu kernel where asked for,
// then the portable kernel.
std::vector<ops::Variant> candidates(const DeviceProfile& prof, const KVDesc& kv, const ExtendOptions& opt,
                                     const std::string& tma_why_not, int preferred_width, std::string* why_not_mma) {
  const std::string key = kv.head_dim <= 128 ? "d128" : "d256";
  params::Entry e = params::lookup(prof, "extend", key);
  const auto& over = opt.params;
  std::vector<ops::Variant> out;
  for (const Tile& t : fixed_candidates(prof, kv, opt, e, tma_why_not, why_not_mma)) out.push_back(variant_of(t));

  // The CPU kernel where the parameters (the cpu rows) or the caller ask for it.
  if (opt.variant.empty() ? ops::param_or(e, over, "CPU_KERNEL", 0) != 0 : opt.variant == "cpu")
    out.push_back(cpu_variant(kv, cpu_tile(e, over, kv.head_dim, preferred_width)));

  GenericTile gt{param(e, over, "WG"), param(e, over, "ROWS"), param(e, over, "KEYS"),
                 param(e, over, "TM"),  param(e, over, "DC"),   param(e, over, "VC"),
                 ops::param_or(e, over, "QRES", 1)};
  // Integer caches (int8, int4): KEYS_I8 keys per tile where a row asks for fewer (the Intel
  // rows: 64 keys spill at int8, and at int4 group 32 D 128 in ocloc's pvc build).
  if ((kv.dtype == DType::I8 || kv.dtype == DType::I4) && !over.count("KEYS"))
    gt.keys = std::max(1, ops::param_or(e, over, "KEYS_I8", gt.keys));
  // A head-dim chunk that does not divide head_dim (80, 96, 192) becomes the largest
  // multiple of 4 below it that does.
  if (gt.dc >= 4 && kv.head_dim % gt.dc != 0 && !over.count("DC"))
    while (gt.dc > 4 && (kv.head_dim % gt.dc != 0 || gt.dc % 4 != 0)) --gt.dc;
  const std::string unfit = generic_unfit(gt, kv.head_dim);
  if (!unfit.empty())
    rt::invalid("extend parameters WG = " + to_string(gt.wg) + ", ROWS = " + to_string(gt.rows) + ", KEYS = " +
                to_string(gt.keys) + ", TM = " + to_string(gt.tm) + ", DC = " + to_string(gt.dc) + ", VC = " +
                to_string(gt.vc) + ": " + unfit);
  // A QRES the caller set stays (the others shrink where the device asks for it).
  if (over.count("QRES") && gt.qres == 1 && generic_local_bytes(gt, kv.head_dim, kv_meta(kv)) >
                                               (prof.local_mem_bytes ? prof.local_mem_bytes : 32768))
    throw Error(Status::Unsupported, "extend parameter QRES = 1: the resident Q rows need more local memory than "
                                     "the device has");
  // (SUB_TX only shapes the grid inside 32 work-items: a power of two up to 32.)
  const int sub_tx = ops::param_or(e, over, "SUB_TX", 8);
  const int sunroll = ops::param_or(e, over, "SUNROLL", gt.dc / 4), punroll = ops::param_or(e, over, "PUNROLL", gt.vc);
  if (sub_tx < 1 || sub_tx > 32 || (sub_tx & (sub_tx - 1)) != 0)
    rt::invalid("extend parameter SUB_TX = " + to_string(sub_tx) + " must be a power of two 1..32");
  if (sunroll < 1 || punroll < 1)
    rt::invalid("extend parameters SUNROLL = " + to_string(sunroll) + ", PUNROLL = " + to_string(punroll) +
                ": unroll counts must be >= 1");
  out.push_back(generic_variant(prof, kv, gt, sub_tx, sunroll, punroll));
  return out;
}

std::mutex g_test_mu;
std::optional<ops::ExtendTestCandidate> g_test_candidate;

// ops::set_extend_test_candidate's candidate first, unless the caller forces a variant: a
// copy of the generic tile (the last) with one define changed, as it is (no shrinking).
void add_test_candidate(const ExtendOptions& opt, std::vector<ops::Variant>& cands) {
  std::lock_guard<std::mutex> lock(g_test_mu);
  if (!g_test_candidate || !opt.variant.empty() || cands.empty() || cands.back().name != "generic") return;
  ops::Variant t = cands.back();
  t.name = g_test_candidate->name, t.realize = nullptr, t.shrink.clear();
  const std::string def = "-D" + g_test_candidate->define + "=";
  const size_t at = t.options.find(def);
  if (at == std::string::npos) return;
  const size_t end = t.options.find(' ', at);
  t.options.replace(at + def.size(), end == std::string::npos ? std::string::npos : end - at - def.size(),
                    g_test_candidate->value);
  cands.insert(cands.begin(), t);
}

}  // namespace ops::extend

namespace ops {
using namespace extend;

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
        return candidates(t.profile, kv, opt, tma_unfit(kv, {0}), t.preferred_float_width, &why);
      });
    }
}

}  // namespace ops
}  // namespace clattn
