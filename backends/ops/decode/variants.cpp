// The decode kernel's variants (cpu, tensor-core, shfl, sub-group, generic), their builds and
// the op's part of the catalog.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include "backends/ops/decode/decode_impl.hpp"

namespace clattn {
namespace ops::decode {

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
    d["FP8_FAST"] = t.fp8_fast != 0 && denorms ? "1" : "0";  // (never where denormals flush)
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
    d["FP8_FAST"] = t.fp8_fast != 0 && denorms ? "1" : "0";  // (never where denormals flush)
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
namespace {

ops::Variant cpu_variant(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms) {
  ops::Variant x;
  x.name = "cpu";
  x.file = "decode_cpu.cl", x.kernel = "paged_decode_cpu";
  x.wg = 1, x.local_bytes = 0;
  if (!tile.cpu) x.why_not = "CPU_KERNEL = 0";
  else x.why_not = params::why_unavailable(prof, x.name);
  if (x.why_not.empty()) x.options = cpu_build_options(prof, tile, cache, denorms);
  return x;
}

ops::Variant lanes_variant(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms, bool shfl) {
  ops::Variant x;
  x.name = shfl ? "nv_ptx_shfl" : "generic";
  x.file = "decode.cl", x.kernel = "paged_decode";
  x.wg = size_t(tile.wg), x.local_bytes = local_bytes(tile, cache.head_dim, shfl);
  if (shfl && !(tile.ptx_shfl && tile.tpt > 1)) x.why_not = "PTX_SHFL = 0 or one lane per token";
  else if (shfl) x.why_not = params::why_unavailable(prof, x.name);
  if (x.why_not.empty()) x.options = build_options(tile, cache, shfl, prof.is_cpu, denorms);
  return x;
}

}  // namespace

// The decode kernel's variants, best first, each a tile that shrinks (work-items first, then
// the head block, then the tokens a slot takes per step; the cpu kernel: its head block, then
// its vector width) where the compiled kernel does not fit the device.
std::vector<ops::Variant> variants(const DeviceProfile& prof, const KTile& tile, const PagedKV& cache, bool denorms) {
  using Make = std::function<ops::Variant(const KTile&)>;
  auto shrinkable = [&](bool cpu, const Make& make, int wg_floor) {
    const KTile base = tile;
    const PagedKV c = cache;
    std::vector<std::pair<std::string, int>> order;
    if (cpu) order = {{"GMAX", 1}, {"VW", 4}};
    else order = {{"WG", wg_floor}, {"GMAX", 1}, {"UNROLL", 1}};
    return ops::shrinkable(tile_of(tile, cpu), [base, c, cpu, make](const ops::Tile& t) {
      std::string why;
      const KTile k = with_tile(base, t, cpu, &why);
      ops::Variant v = make(k);
      if (!why.empty() && v.why_not.empty()) v.why_not = why;
      set_trips(v, k, c);
      return v;
    }, order);
  };
  std::vector<ops::Variant> v;
  v.push_back(shrinkable(true, [&prof, cache, denorms](const KTile& k) { return cpu_variant(prof, k, cache, denorms); }, 1));
  v.push_back(shrinkable(false, [&prof, cache](const KTile& k) { return mma_variant(prof, k, cache); }, 32));
  v.push_back(shrinkable(false, [&prof, cache, denorms](const KTile& k) { return lanes_variant(prof, k, cache, denorms, true); }, 32));
  for (int kind : {2, 1})
    v.push_back(shrinkable(false, [&prof, cache, denorms, kind](const KTile& k) {
      return subgroup_variant(prof, k, cache, denorms, kind);
    }, 1));
  v.push_back(shrinkable(false, [&prof, cache, denorms](const KTile& k) { return lanes_variant(prof, k, cache, denorms, false); }, 1));
  return v;
}

KTile build_kernels(const Context& ctx, const KTile& tile, const PagedKV& cache, const ops::DecodeCheckCase& k,
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
  std::string why;
  KTile built = with_tile(tile, b.variant.tile, st.cpu, &why);
  built.trips_fixed = b.variant.trips_fixed, built.trips_per_key = b.variant.trips_per_key;
  return built;
}

}  // namespace ops::decode

namespace ops {
using namespace decode;
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
