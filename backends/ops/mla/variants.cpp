// The MLA kernels as candidates (tensor cores, cpu, register-blocked, generic), each a tile
// that shrinks along its declared order; the latent appender; the offline catalog.
#include <map>

#include "backends/ops/mla/mla_impl.hpp"
#include "backends/params/variants.hpp"

namespace clattn {
namespace ops::mla {

using std::to_string;

// The kernel's candidates: the tensor-core variant first when chosen, then the CPU variant,
// then the register-blocked portable kernel, then the generic one (all take the same arguments
// and work entries: mla_run does not care which). sparse: every one built with SPARSE_IDX
// (sparse decode; each supports it, so none is skipped for it).
std::vector<ops::Variant> variants(const DeviceProfile& prof, const Tile& tile, const MlaCache& cache, bool extend,
                                   bool sparse) {
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
// 64: append_latent_i8's local maxima). A launch choice, not a build option: fewer where the
// compiled kernel allows fewer.
ops::Variant append_variant(const DeviceProfile& prof, const std::string& kernel) {
  return ops::wg_variant("generic", "mla_append.cl", kernel, "WG", prof.is_cpu ? 16 : 64, 1,
                         [](int) { return rt::make_options({}); });
}

}  // namespace ops::mla

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
          const auto tile = mla::choose_tile(t.profile, cache, opt, extend, t.preferred_float_width, t.fp32_denorms);
          return mla::variants(t.profile, tile, cache, extend, sparse);
        });
      }
  catalog_add(out, "mla_append", "*", [&] { return std::vector<Variant>{mla::append_variant(t.profile)}; });
}

}  // namespace ops

}  // namespace clattn
