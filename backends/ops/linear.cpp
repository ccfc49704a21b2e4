// Linear attention (GDN, simple GLA): argument and batch validation on the host, then one
// launch of cl_kernels/linear_gdn.cl or linear_gla.cl (or, for the prefill on NVIDIA tensor
// cores, linear_prefill_mma_nv.cl: variant nv_mma_sync, parameter PF_MMA; on CPU devices
// linear_gdn_cpu.cl / linear_gla_cpu.cl: variant cpu, parameter CPU_KERNEL). Nothing blocks;
// a rejected call enqueues nothing. Kernel maths: cl_kernels/linear_common.clh,
// linear_cpu.clh; docs/linear.md.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "clattn/linear.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace {

enum Flags { kL2Norm = 1, kBetaLogits = 2 };  // cl_kernels/linear_common.clh LIN_*

std::string num(int64_t v) { return std::to_string(v); }

[[noreturn]] void bad(const std::string& op, const std::string& what) { rt::invalid(op + ": " + what); }

bool io_dtype_ok(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
bool head_dim_ok(int d) { return d == 64 || d == 128 || d == 256; }

size_t mem_bytes(cl_mem m, const std::string& what) {
  size_t n = 0;
  rt::check_cl(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof n, &n, nullptr), "clGetMemObjectInfo", what);
  return n;
}

void need(const std::string& op, cl_mem m, int64_t bytes, const std::string& field) {
  if (!m) bad(op, field + ": null buffer");
  int64_t have = int64_t(mem_bytes(m, op + " " + field));
  if (have < bytes) bad(op, field + ": buffer has " + num(have) + " bytes, needs " + num(bytes));
}

void check_config(const std::string& op, const LinearConfig& c, const LinearStatePool& p, bool gdn) {
  if (!c.params.empty())  // (the ops have no plan: this runs on every call, and builds strings only here)
    params::check_param_names({"linear_decode", "linear_prefill"}, c.params, op + ": LinearConfig::params");
  if (c.num_qk_heads < 1) bad(op, "num_qk_heads = " + num(c.num_qk_heads) + ", must be >= 1");
  if (c.num_v_heads < 1 || c.num_v_heads % c.num_qk_heads != 0)
    bad(op, "num_v_heads = " + num(c.num_v_heads) + ", must be a positive multiple of num_qk_heads = " +
                num(c.num_qk_heads));
  if (!head_dim_ok(c.head_dim_k)) bad(op, "head_dim_k = " + num(c.head_dim_k) + " unsupported (64, 128, 256)");
  if (!head_dim_ok(c.head_dim_v)) bad(op, "head_dim_v = " + num(c.head_dim_v) + " unsupported (64, 128, 256)");
  if (!io_dtype_ok(c.dtype)) bad(op, std::string("dtype = ") + dtype_name(c.dtype) + " unsupported (f32, f16, bf16)");
  if (!io_dtype_ok(p.dtype))
    bad(op, std::string("state pool dtype = ") + dtype_name(p.dtype) + " unsupported (f32, f16, bf16)");
  if (!std::isfinite(c.scale) || c.scale < 0.f) bad(op, "scale = " + std::to_string(c.scale) + ", must be >= 0");
  if (p.num_slots < 0) bad(op, "num_slots = " + num(p.num_slots) + ", must be >= 0");
  if (!gdn && c.l2norm_qk) bad(op, "l2norm_qk is a Gated DeltaNet option");
  if (!gdn && c.beta_is_logits) bad(op, "beta_is_logits is a Gated DeltaNet option");
}

int64_t slot_bytes(const LinearConfig& c, const LinearStatePool& p) {
  return rt::checked::product({c.num_v_heads, c.head_dim_k, c.head_dim_v, int64_t(dtype_size(p.dtype))},
                              "state slot bytes");
}

void check_indices(const std::string& op, const LinearBatch& b, const LinearStatePool& p) {
  if (b.batch_size < 0) bad(op, "batch_size = " + num(b.batch_size) + ", must be >= 0");
  if (b.batch_size == 0) return;
  if (!b.state_indices) bad(op, "state_indices: null host array");
  std::vector<int> owner(size_t(std::max(p.num_slots, 0)), -1);
  for (int i = 0; i < b.batch_size; ++i) {
    int s = b.state_indices[i];
    if (s == -1) continue;
    if (s < 0 || s >= p.num_slots)
      bad(op, "state_indices[" + num(i) + "] = " + num(s) + " out of range [0, num_slots = " + num(p.num_slots) +
                  ") (-1 = no state)");
    if (owner[size_t(s)] >= 0)
      bad(op, "state_indices[" + num(i) + "] = " + num(s) + " duplicates state_indices[" + num(owner[size_t(s)]) +
                  "]");
    owner[size_t(s)] = i;
  }
  need(op, b.state_indices_dev, int64_t(b.batch_size) * 4, "state_indices_dev");
}

int check_cu_seqlens(const std::string& op, const LinearBatch& b) {
  if (!b.cu_seqlens) bad(op, "cu_seqlens: null host array");
  if (b.cu_seqlens[0] != 0) bad(op, "cu_seqlens[0] = " + num(b.cu_seqlens[0]) + ", must be 0");
  for (int i = 0; i < b.batch_size; ++i)
    if (b.cu_seqlens[i + 1] < b.cu_seqlens[i])
      bad(op, "cu_seqlens[" + num(i + 1) + "] = " + num(b.cu_seqlens[i + 1]) + " < cu_seqlens[" + num(i) +
                  "] = " + num(b.cu_seqlens[i]) + " (request " + num(i) + " has a negative length)");
  if (b.cu_seqlens[b.batch_size] != b.num_tokens)
    bad(op, "cu_seqlens[" + num(b.batch_size) + "] = " + num(b.cu_seqlens[b.batch_size]) + " != num_tokens = " +
                num(b.num_tokens));
  need(op, b.cu_seqlens_dev, (int64_t(b.batch_size) + 1) * 4, "cu_seqlens_dev");
  return b.num_tokens;
}

void check_tensors(const std::string& op, const LinearConfig& c, const LinearTensors& t, const LinearStatePool& p,
                   int64_t T, bool gdn) {
  namespace ck = rt::checked;
  const int64_t es = int64_t(dtype_size(c.dtype));
  const int64_t qk = ck::product({T, c.num_qk_heads, c.head_dim_k, es}, "q/k bytes");
  const int64_t vo = ck::product({T, c.num_v_heads, c.head_dim_v, es}, "v/o bytes");
  need(op, t.q, qk, "q");
  need(op, t.k, qk, "k");
  need(op, t.v, vo, "v");
  need(op, t.o, vo, "o");
  need(op, t.g, ck::product({c.constant_decay ? 1 : T, c.num_v_heads, 4}, "g bytes"),
       c.constant_decay ? "g (constant, [Hv])" : "g");
  if (gdn) need(op, t.beta, ck::product({T, c.num_v_heads, 4}, "beta bytes"), "beta");
  if (p.num_slots > 0) need(op, p.state, ck::mul(p.num_slots, slot_bytes(c, p), "state pool bytes"), "state");
}

int dt_code(DType d) { return d == DType::F16 ? 1 : d == DType::BF16 ? 2 : 0; }

int pow2_floor(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

struct Variant {
  std::shared_ptr<rt::Program> prog;
  int dec_dvt, dec_rows, dec_vec, pf_c, pf_dvt, pf_wg, pf_dkt;
  std::map<std::string, std::string> defines;
  int dec_threads() const { return dec_dvt / dec_vec * dec_rows; }
};

// Halves the decode work-group (the DV slice first, which keeps the registers per
// work-item, then the row groups) so that it has at most `limit` work-items. False when it
// cannot shrink further.
bool shrink_decode(Variant& v, int limit) {
  bool changed = false;
  while (v.dec_threads() > limit) {
    if (v.dec_dvt > v.dec_vec) v.dec_dvt /= 2;
    else if (v.dec_rows > 1) v.dec_rows /= 2;
    else if (v.dec_vec > 1) v.dec_vec /= 2, v.dec_dvt = v.dec_vec;
    else return changed;
    changed = true;
  }
  return changed;
}

// The portable program (both ops' kernels) as `v` builds it.
ops::Variant portable_variant(Variant& v, bool gdn) {
  v.defines["DEC_DVT"] = num(v.dec_dvt);
  v.defines["DEC_ROWS"] = num(v.dec_rows);
  v.defines["DEC_VEC"] = num(v.dec_vec);
  ops::Variant x;
  x.name = "generic", x.file = gdn ? "linear_gdn.cl" : "linear_gla.cl", x.kernel = gdn ? "gdn_decode" : "gla_decode";
  x.options = rt::make_options(v.defines), x.wg = size_t(v.dec_threads());
  return x;
}

void build(detail::ContextImpl& c, Variant& v, bool gdn) {
  const ops::Variant x = portable_variant(v, gdn);
  v.prog = c.programs.get(x.file, x.options);
}

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

// Parameters from the database, clamped to the shape and the device.
Variant portable_tile(const DeviceProfile& prof, const LinearConfig& cfg, const LinearStatePool& pool, bool gdn) {
  const int DK = cfg.head_dim_k, DV = cfg.head_dim_v;
  auto [dec, pf] = lookup_params(prof, cfg);
  const int maxwg = int(std::max<size_t>(1, prof.max_work_group_size));
  Variant v{};
  v.dec_vec = std::min(pow2_floor(std::clamp(dec.get_or("DEC_VEC", 1), 1, 4)), DV);
  v.dec_dvt = std::clamp(pow2_floor(std::max(1, dec.get("DEC_DVT"))), v.dec_vec, DV);
  v.dec_rows = std::min(pow2_floor(std::max(1, dec.get("DEC_ROWS"))), DK);
  shrink_decode(v, maxwg);
  v.pf_c = pow2_floor(std::clamp(pf.get("PF_C"), 2, 256));  // bounded: the local-memory estimate squares it
  v.pf_dvt = std::min(pow2_floor(std::max(1, pf.get("PF_DVT"))), DV);
  v.pf_wg = std::min(pow2_floor(std::max(1, pf.get("PF_WG"))), pow2_floor(maxwg));
  v.pf_dkt = std::min(pow2_floor(std::max(1, pf.get_or("PF_DKT", 32))), DK);
  // The prefill's local arrays: S slice [DK][DVT], D [C][DVT], A/P [C][C+1], 4 x [C]
  // scalars, K and Q tiles [C][DKT+1]. Shrink the slice, then the chunk, until they fit
  // (keep 1 KiB spare).
  auto bytes = [&] {
    return 4ull * (DK * v.pf_dvt + v.pf_c * v.pf_dvt + v.pf_c * (v.pf_c + 1) + 4 * v.pf_c +
                   2 * v.pf_c * (v.pf_dkt + 1));
  };
  const unsigned long long local = prof.local_mem_bytes ? prof.local_mem_bytes : 32768;
  while (bytes() + 1024 > local && v.pf_dvt > 4) v.pf_dvt /= 2;
  while (bytes() + 1024 > local && v.pf_c > 8) v.pf_c /= 2;
  v.defines = {{"DK", num(DK)}, {"DV", num(DV)}, {"IO_DT", num(dt_code(cfg.dtype))},
               {"ST_DT", num(dt_code(pool.dtype))}, {"PF_C", num(v.pf_c)}, {"PF_DVT", num(v.pf_dvt)},
               {"PF_WG", num(v.pf_wg)}, {"PF_DKT", num(v.pf_dkt)}};
  rt::log().debug("linear {}: DK={} DV={} io={} state={} decode DVT={} VEC={} ROWS={} ({}), prefill C={} DVT={} WG={} ({})",
                  gdn ? "gdn" : "gla", DK, DV, dtype_name(cfg.dtype), dtype_name(pool.dtype), v.dec_dvt, v.dec_vec,
                  v.dec_rows, dec.source, v.pf_c, v.pf_dvt, v.pf_wg, pf.source);
  return v;
}

// The same, with the program built unless `build_now` is false.
Variant variant(detail::ContextImpl& c, const LinearConfig& cfg, const LinearStatePool& pool, bool gdn,
                bool build_now = true) {
  Variant v = portable_tile(c.profile, cfg, pool, gdn);
  if (build_now) build(c, v, gdn);
  return v;
}

// The tensor-core prefill (cl_kernels/linear_prefill_mma_nv.cl), chosen where the parameters
// ask for it (PF_MMA = 1), the device runs inline PTX mma.sync (variant nv_mma_sync) and the
// shapes suit it: q/k/v/o in f16 or bf16 (the MMA operand type; f32 inputs keep f32 math),
// Dk <= 128 (each work-item holds Dk/2 f32 state values in registers), tiles within local
// memory. PF_MMA_C tokens per chunk, PF_MMA_DVT state columns per work-group (16 per warp),
// PF_MMA_SPLIT 1: the state operand as hi + lo parts. A null program = not chosen (why says
// why); a failed build falls back to the f32 kernel.
struct MmaPrefill {
  std::shared_ptr<rt::Program> prog;
  int mc = 0, dvt = 0;
  int wg() const { return 2 * dvt; }  // 32 work-items per 16 columns
};

// Local arrays of linear_prefill_mma_nv.cl (32-bit words): K and Q tiles [MC][DK+8] halves,
// P [MC][MC+8] and D^T, D'^T [DVT][MC+8] halves, 5 x [MC] scalars; GDN adds A [MC][MC+1] and
// D [MC][DVT+4] in f32.
size_t mma_local_bytes(int dk, int mc, int dvt, bool gdn) {
  size_t words = size_t(mc) * (dk + 8) + size_t(mc + 8) / 2 * (mc + 2 * dvt) + 5 * size_t(mc);
  if (gdn) words += size_t(mc) * (mc + 1) + size_t(mc) * (dvt + 4);
  return 4 * words;
}

// The tensor-core prefill's candidate (why_not set where it is not chosen); *mc and *dvt its tile.
ops::Variant mma_prefill_variant(const DeviceProfile& prof, const LinearConfig& cfg, const LinearStatePool& pool,
                                 bool gdn, int* mc_out, int* dvt_out) {
  ops::Variant v;
  v.name = "nv_mma_sync", v.file = "linear_prefill_mma_nv.cl", v.kernel = "lin_prefill_mma";
  const params::Entry pf = lookup_params(prof, cfg).pf;
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
  *mc_out = mc, *dvt_out = dvt;
  return v;
}

MmaPrefill mma_prefill(detail::ContextImpl& c, const LinearConfig& cfg, const LinearStatePool& pool, bool gdn,
                       const char* op, std::string* why) {
  MmaPrefill m;
  int mc = 0, dvt = 0;
  const ops::Variant v = mma_prefill_variant(c.profile, cfg, pool, gdn, &mc, &dvt);
  if (!v.why_not.empty()) {
    *why = v.why_not;
    return m;
  }
  try {
    m.prog = ops::select_and_build(c, op, {v}).program;  // the f32 prefill (another program) is the fallback
  } catch (const Error& e) {
    if (e.status() != Status::BuildFailed && e.status() != Status::Unsupported) throw;
    *why = e.what();
    return m;
  }
  m.mc = mc, m.dvt = dvt;
  return m;
}

// The CPU kernels (cl_kernels/linear_cpu.clh through linear_gdn_cpu.cl / linear_gla_cpu.cl),
// chosen where the parameters ask for them (CPU_KERNEL = 1: the cpu vendor rows;
// LinearConfig::params overrides). One work-item per work-group, which owns (request, v-head,
// slice of Dv columns); vectors of VW floats (0 = the device's preferred float width).
// Decode: DEC_CPU_DVT state columns per work-item. Prefill: PF_CPU_C tokens per chunk,
// PF_CPU_DVT columns per work-item, PF_CPU_MR x PF_CPU_MV vectors per register tile. A slice
// is halved (down to one register tile) while the batch has fewer work-groups than the device
// has cores (decode: 4 per core, since each streams only its slice); the prefill's slice and
// chunk are halved until its local arrays fit. Not chosen (CPU_KERNEL = 0), not fitting or
// failing to build: the portable kernels run (a null program).
struct CpuKernel {
  std::shared_ptr<rt::Program> prog;
  rt::Kernel* kernel = nullptr;
  int dvt = 0;  // state columns per work-item
};

// The prefill's local arrays (floats): state slice [DK][DVT], q/k rows [C][DK] x 2, K^T
// [DK][C], D and O [C][DVT], A and P [C][C], per-token G and e^G [C] (GDN: and beta).
uint64_t cpu_prefill_local_bytes(int dk, int c, int dvt, bool gdn) {
  return 4ull * (uint64_t(dk) * dvt + 3ull * c * dk + 2ull * c * dvt + 2ull * c * c + (gdn ? 3ull : 2ull) * c);
}

// The CPU kernel's candidate (why_not "CPU_KERNEL = 0" where not asked for); *dvt_out its slice.
ops::Variant cpu_variant(const DeviceProfile& prof, int preferred_width, const LinearConfig& cfg,
                         const LinearStatePool& pool, bool gdn, bool prefill, int64_t batch, const char* op,
                         int* dvt_out) {
  const LinParams lp = lookup_params(prof, cfg);
  const params::Entry& e = prefill ? lp.pf : lp.dec;
  ops::Variant v;
  v.name = "cpu", v.file = gdn ? "linear_gdn_cpu.cl" : "linear_gla_cpu.cl", v.wg = 1;
  if (e.get_or("CPU_KERNEL", 0) == 0) {
    v.why_not = "CPU_KERNEL = 0";
    return v;
  }
  const int DK = cfg.head_dim_k, DV = cfg.head_dim_v;
  // (head dims 64, 128, 256: every width divides them)
  const int vw = ops::cpu_vector_width(int(e.get_or("VW", 0)), preferred_width, 0, op);
  const int64_t cores = std::max<int64_t>(1, prof.compute_units);
  auto groups = [&](int dvt) { return batch * cfg.num_v_heads * (DV / dvt); };
  std::map<std::string, std::string> d = {{"DK", num(DK)}, {"DV", num(DV)}, {"IO_DT", num(dt_code(cfg.dtype))},
                                          {"ST_DT", num(dt_code(pool.dtype))}, {"VW", num(vw)},
                                          {"PREFETCH_BUILTIN", ops::prefetch_builtin(prof)}};
  int dvt = 0, cc = 0, mr = 0, mv = 0;
  if (!prefill) {
    dvt = std::clamp(pow2_floor(std::max(1, e.get_or("DEC_CPU_DVT", 256))), vw, DV);
    while (dvt > vw && groups(dvt) < 4 * cores) dvt /= 2;
    d["DEC_DVT"] = num(dvt), d["LIN_CPU_OP"] = "1";
    v.kernel = gdn ? "gdn_decode_cpu" : "gla_decode_cpu";
  } else {
    cc = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_C", 16))), std::max(vw, 8), 128);
    mv = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_MV", 2))), 1, DV / vw);
    // PF_CPU_MR 0: 8 rows with 16-wide vectors (16 accumulators of AVX-512's 32 vector
    // registers), else 4 (AVX2 has 16).
    mr = e.get_or("PF_CPU_MR", 0);
    mr = mr <= 0 ? (vw >= 16 ? 8 : 4) : std::min(pow2_floor(mr), 8);
    dvt = std::clamp(pow2_floor(std::max(1, e.get_or("PF_CPU_DVT", 128))), vw * mv, DV);
    while (dvt > vw * mv && groups(dvt) < cores) dvt /= 2;
    const uint64_t local = prof.local_mem_bytes ? prof.local_mem_bytes : 32768;
    while (cpu_prefill_local_bytes(DK, cc, dvt, gdn) > local && dvt > vw * mv) dvt /= 2;
    while (cpu_prefill_local_bytes(DK, cc, dvt, gdn) > local && cc > std::max(vw, 8)) cc /= 2;
    d["PF_C"] = num(cc), d["PF_DVT"] = num(dvt), d["PF_MR"] = num(mr), d["PF_MV"] = num(mv), d["LIN_CPU_OP"] = "2";
    v.kernel = gdn ? "gdn_prefill_cpu" : "gla_prefill_cpu";
    v.local_bytes = cpu_prefill_local_bytes(DK, cc, dvt, gdn);
  }
  v.options = rt::make_options(d);
  *dvt_out = dvt;
  if (prefill) rt::log().debug("{}: cpu variant, VW={} C={} DVT={} MR={} MV={} ({})", op, vw, cc, dvt, mr, mv, e.source);
  else rt::log().debug("{}: cpu variant, VW={} DVT={} ({})", op, vw, dvt, e.source);
  return v;
}

CpuKernel cpu_kernel(detail::ContextImpl& c, const LinearConfig& cfg, const LinearStatePool& pool, bool gdn,
                     bool prefill, int64_t batch, const char* op) {
  CpuKernel k;
  int dvt = 0;
  const ops::Variant v = cpu_variant(c.profile, ops::preferred_float_width(c), cfg, pool, gdn, prefill, batch, op, &dvt);
  if (!v.why_not.empty()) return k;
  try {
    ops::BuiltVariant b = ops::select_and_build(c, op, {v});  // the portable kernels are the fallback
    k.prog = b.program, k.kernel = b.kernel;
  } catch (const Error& err) {
    if (err.status() != Status::BuildFailed && err.status() != Status::Unsupported) throw;
    rt::log().info("{}: cpu variant not used ({}); using the portable kernel", op, err.what());
    return k;
  }
  k.dvt = dvt;
  return k;
}

void check_wg(rt::Kernel& k, cl_device_id dev, size_t wg) {
  size_t lim = k.max_work_group_size(dev);
  if (lim < wg)
    rt::fail(Status::Unsupported, k.name() + ": work-group of " + num(int64_t(wg)) +
                                      " exceeds the compiled kernel's limit " + num(int64_t(lim)) +
                                      " (lower DEC_ROWS/PF_WG in the parameter database)");
}

int flags_of(const LinearConfig& c) { return (c.l2norm_qk ? kL2Norm : 0) | (c.beta_is_logits ? kBetaLogits : 0); }
float scale_of(const LinearConfig& c) { return c.scale > 0.f ? c.scale : 1.0f / std::sqrt(float(c.head_dim_k)); }

void run(const char* op, bool gdn, bool prefill, const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
         const LinearStatePool& pool, const LinearBatch& b, cl_command_queue queue) {
  check_config(op, cfg, pool, gdn);
  check_indices(op, b, pool);
  int64_t T = b.batch_size;
  if (prefill) {
    if (b.batch_size > 0 || b.cu_seqlens) T = check_cu_seqlens(op, b);
    else T = 0;
  }
  if (b.batch_size == 0 || T == 0) return;
  check_tensors(op, cfg, t, pool, T, gdn);

  auto& c = rt::impl(ctx);
  cl_command_queue q = queue ? queue : c.queue;
  std::string why_not_mma;
  MmaPrefill mma;
  if (prefill) mma = mma_prefill(c, cfg, pool, gdn, op, &why_not_mma);
  if (prefill && !mma.prog) rt::log().debug("{}: nv_mma_sync not used ({})", op, why_not_mma);
  CpuKernel cpu;
  if (!mma.prog) cpu = cpu_kernel(c, cfg, pool, gdn, prefill, b.batch_size, op);
  Variant v = variant(c, cfg, pool, gdn, !mma.prog && !cpu.prog);
  // An unused beta/state argument still needs a valid buffer: alias one we have.
  cl_mem beta = gdn ? t.beta : t.g;
  cl_mem state = pool.state ? pool.state : t.o;
  const int Hqk = cfg.num_qk_heads, Hv = cfg.num_v_heads;
  const int g_stride = cfg.constant_decay ? 0 : Hv;
  const float scale = scale_of(cfg);
  const int flags = flags_of(cfg);
  if (cpu.prog) {
    // One work-item per group; grid (Dv slice, request x v-head).
    rt::Kernel& k = *cpu.kernel;
    const size_t gws[2] = {size_t(cfg.head_dim_v / cpu.dvt), size_t(b.batch_size) * Hv};
    const size_t lws[2] = {1, 1};
    if (prefill)
      k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev,
               b.cu_seqlens_dev, Hqk, Hv, g_stride, scale, flags, cl_int(pool.num_slots), cl_int(T), c.faults);
    else
      k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev, Hqk,
               Hv, g_stride, scale, flags, cl_int(pool.num_slots), c.faults);
  } else if (!prefill) {
    const char* name = gdn ? "gdn_decode" : "gla_decode";
    // A compiled kernel can allow fewer work-items than the device (registers): shrink the
    // work-group and rebuild rather than fail.
    for (;;) {
      size_t lim = v.prog->kernel(name).max_work_group_size(c.device);
      if (size_t(v.dec_threads()) <= lim || !shrink_decode(v, int(lim))) break;
      rt::log().debug("linear {}: kernel limit {} work-items, decode shrunk to DVT={} VEC={} ROWS={}", name, lim,
                      v.dec_dvt, v.dec_vec, v.dec_rows);
      build(c, v, gdn);
    }
    rt::Kernel& k = v.prog->kernel(name);
    check_wg(k, c.device, size_t(v.dec_threads()));
    const size_t gws[3] = {size_t(cfg.head_dim_v / v.dec_vec), size_t(v.dec_rows), size_t(b.batch_size) * Hv};
    const size_t lws[3] = {size_t(v.dec_dvt / v.dec_vec), size_t(v.dec_rows), 1};
    k.launch(q, 3, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev, Hqk, Hv,
             g_stride, scale, flags, cl_int(pool.num_slots), c.faults);
  } else if (mma.prog) {
    rt::Kernel& k = mma.prog->kernel("lin_prefill_mma");
    rt::log().debug("{}: nv_mma_sync prefill, C={} DVT={}", op, mma.mc, mma.dvt);
    const size_t gws[2] = {size_t(mma.wg()) * (cfg.head_dim_v / mma.dvt), size_t(b.batch_size) * Hv};
    const size_t lws[2] = {size_t(mma.wg()), 1};
    k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev,
             b.cu_seqlens_dev, Hqk, Hv, g_stride, scale, flags, cl_int(pool.num_slots), cl_int(T), c.faults);
  } else {
    rt::Kernel& k = v.prog->kernel(gdn ? "gdn_prefill" : "gla_prefill");
    check_wg(k, c.device, size_t(v.pf_wg));
    const size_t gws[2] = {size_t(v.pf_wg) * (cfg.head_dim_v / v.pf_dvt), size_t(b.batch_size) * Hv};
    const size_t lws[2] = {size_t(v.pf_wg), 1};
    k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev,
             b.cu_seqlens_dev, Hqk, Hv, g_stride, scale, flags, cl_int(pool.num_slots), cl_int(T), c.faults);
  }
}

void check_slot(const char* op, const LinearStatePool& p, int s, const std::string& field) {
  if (s < 0 || s >= p.num_slots)
    bad(op, field + " = " + num(s) + " out of range [0, num_slots = " + num(p.num_slots) + ")");
}

}  // namespace

void gdn_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                const LinearBatch& b, cl_command_queue queue) {
  run("gdn_decode", true, false, ctx, cfg, t, pool, b, queue);
}
void gdn_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                 const LinearBatch& b, cl_command_queue queue) {
  run("gdn_prefill", true, true, ctx, cfg, t, pool, b, queue);
}
void gla_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                const LinearBatch& b, cl_command_queue queue) {
  run("gla_decode", false, false, ctx, cfg, t, pool, b, queue);
}
void gla_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                 const LinearBatch& b, cl_command_queue queue) {
  run("gla_prefill", false, true, ctx, cfg, t, pool, b, queue);
}

void linear_zero_slots(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool, const int32_t* slots,
                       int n, cl_command_queue queue) {
  const char* op = "linear_zero_slots";
  check_config(op, cfg, pool, true);
  if (n < 0) bad(op, "n = " + num(n) + ", must be >= 0");
  if (n == 0) return;
  if (!slots) bad(op, "slots: null host array");
  for (int i = 0; i < n; ++i) check_slot(op, pool, slots[i], "slots[" + num(i) + "]");
  const int64_t sb = slot_bytes(cfg, pool);
  need(op, pool.state, rt::checked::mul(pool.num_slots, sb, "state pool bytes"), "state");
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  const cl_uchar zero = 0;  // +0.0 is all-zero bits in f32, f16 and bf16
  for (int i = 0; i < n; ++i)
    rt::check_cl(clEnqueueFillBuffer(q, pool.state, &zero, 1, size_t(slots[i] * sb), size_t(sb), 0, nullptr, nullptr),
                 "clEnqueueFillBuffer", std::string(op) + " slot " + num(slots[i]));
}

void linear_copy_slot(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool, int src, int dst,
                      cl_command_queue queue) {
  const char* op = "linear_copy_slot";
  check_config(op, cfg, pool, true);
  check_slot(op, pool, src, "src");
  check_slot(op, pool, dst, "dst");
  const int64_t sb = slot_bytes(cfg, pool);
  need(op, pool.state, rt::checked::mul(pool.num_slots, sb, "state pool bytes"), "state");
  if (src == dst) return;
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  rt::check_cl(clEnqueueCopyBuffer(q, pool.state, pool.state, size_t(src * sb), size_t(dst * sb), size_t(sb), 0,
                                   nullptr, nullptr),
               "clEnqueueCopyBuffer", std::string(op) + " " + num(src) + " -> " + num(dst));
}

namespace ops {

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
            std::vector<Variant> vs;
            int mc = 0, dvt = 0;
            if (prefill) vs.push_back(mma_prefill_variant(t.profile, cfg, pool, gdn, &mc, &dvt));
            vs.push_back(cpu_variant(t.profile, t.preferred_float_width, cfg, pool, gdn, prefill, 64, op, &dvt));
            auto v = portable_tile(t.profile, cfg, pool, gdn);
            vs.push_back(portable_variant(v, gdn));
            if (prefill) vs.back().kernel = gdn ? "gdn_prefill" : "gla_prefill", vs.back().wg = size_t(v.pf_wg);
            return vs;
          });
        }
}

}  // namespace ops

}  // namespace clattn
