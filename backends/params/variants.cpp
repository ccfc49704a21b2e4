#include "backends/params/variants.hpp"

#include <algorithm>
#include <mutex>

#include "backends/params/database.hpp"

namespace clattn::params {

const std::vector<std::string>& all_variants() {
  static const std::vector<std::string> v = {"generic",     "tiled",       "cpu",          "khr_subgroups",
                                             "intel_subgroups", "intel_dpas", "amd_wmma", "amd_mfma",
                                             "nv_ptx_shfl", "nv_mma_sync", "nv_wgmma"};
  return v;
}

// Vendor-specific variants carry their vendor's prefix, so one added later is excluded from
// portable-only mode without being listed here.
bool vendor_specific(const std::string& v) {
  static const char* const prefixes[] = {"nv_", "amd_", "intel_", "arm_", "qcom_", "apple_"};
  for (const char* pre : prefixes)
    if (v.rfind(pre, 0) == 0) return true;
  return false;
}

bool amd_has_wmma(const std::string& arch) { return arch.rfind("gfx11", 0) == 0; }

bool amd_has_mfma(const std::string& arch) {
  return arch == "gfx908" || arch == "gfx90a" || arch.rfind("gfx94", 0) == 0 || arch.rfind("gfx95", 0) == 0;
}

bool has_feature(const DeviceProfile& p, const std::string& f) {
  if (f == "cl_khr_subgroups") return p.subgroups;
  if (f == "cl_intel_subgroups") return p.intel_subgroups;
  if (f == "amd_wmma") return p.vendor == "amd" && amd_has_wmma(p.architecture);
  if (f == "amd_mfma") return p.vendor == "amd" && amd_has_mfma(p.architecture);
  if (f == "nv_mma_sync") return p.nv_inline_ptx && p.nv_compute_capability >= 80;
  return p.has_extension(f);
}

bool emulated(const DeviceProfile& p, const std::string& feature) {
  return p.emulates(feature) && !has_feature(p, feature);
}

bool variant_available(const DeviceProfile& p, const std::string& v, std::string* why) {
  auto say = [&](bool ok, const std::string& reason) {
    if (why) *why = reason;
    return ok;
  };
  if (v == "generic") return say(true, "OpenCL C 1.2 and local memory");
  if (v == "tiled") return say(true, "OpenCL C 1.2, local memory, register-blocked");
  if (v == "cpu") return say(true, "OpenCL C 1.2, one work-item per group, vector types (for CPU devices)");
  // A feature the device has, or one emulated for tests (CLATTN_EMULATE).
  auto feature = [&](const std::string& name, const std::string& what) {
    if (has_feature(p, name)) return say(true, what);
    if (p.emulates(name)) return say(true, what + " (emulated: CLATTN_EMULATE=" + name + ")");
    return say(false, "needs " + what);
  };
  if (v == "khr_subgroups") return feature("cl_khr_subgroups", "cl_khr_subgroups sub-group reductions and broadcasts");
  if (p.portable_only && vendor_specific(v)) return say(false, "portable-only mode (CLATTN_VARIANTS=portable)");
  if (v == "intel_subgroups") return feature("cl_intel_subgroups", "cl_intel_subgroups shuffles");
  if (v == "intel_dpas")
    return feature("cl_intel_subgroup_matrix_multiply_accumulate",
                   "cl_intel_subgroup_matrix_multiply_accumulate (DPAS, Xe-HPG / Xe-HPC)");
  if (v == "amd_wmma") return feature("amd_wmma", "AMD WMMA builtins (gfx11, wave32)");
  if (v == "amd_mfma") return feature("amd_mfma", "AMD MFMA builtins (CDNA: gfx908, gfx90a, gfx94x)");
  if (v == "nv_ptx_shfl")
    return p.nv_inline_ptx ? say(true, "NVIDIA inline PTX, sm_" + std::to_string(p.nv_compute_capability))
                           : say(false, "needs NVIDIA's OpenCL compiler (inline PTX)");
  if (v == "nv_mma_sync") {
    if (!p.nv_inline_ptx && p.emulates("nv_mma_sync"))
      return say(true, "mma.sync m16n8k16 f16 (emulated: CLATTN_EMULATE=nv_mma_sync; decode kernels only)");
    if (!p.nv_inline_ptx) return say(false, "needs NVIDIA's OpenCL compiler (inline PTX)");
    if (p.nv_compute_capability < 80)
      return say(false, "needs compute capability >= 8.0, device has " + std::to_string(p.nv_compute_capability));
    return say(true, "mma.sync m16n8k16 f16/bf16 on sm_" + std::to_string(p.nv_compute_capability));
  }
  if (v == "nv_wgmma") {
    // wgmma exists on sm_90a only (not on later architectures' targets); the PTX is rebuilt for
    // it (runtime/ptx_retarget.hpp).
    if (!p.nv_inline_ptx) return say(false, "needs NVIDIA's OpenCL compiler (inline PTX)");
    if (p.nv_compute_capability / 10 != 9)
      return say(false, "needs compute capability 9.x (Hopper), device has " + std::to_string(p.nv_compute_capability));
    return say(true, "wgmma.mma_async f16/bf16 on sm_90a (PTX retargeted from sm_90)");
  }
  return say(false, "unknown variant");
}

std::string why_unavailable(const DeviceProfile& p, const std::string& variant) {
  std::string why;
  return variant_available(p, variant, &why) ? std::string() : why;
}

const std::vector<std::string>& self_validated_variants() {
  // Remove a variant once it has run on hardware of its kind.
  static const std::vector<std::string> v = {"intel_dpas", "amd_wmma", "amd_mfma", "intel_subgroups",
                                             "khr_subgroups"};
  return v;
}

namespace {
std::mutex g_testing_mu;
std::vector<std::string> g_testing;  // add_self_validation_for_testing
}  // namespace

bool needs_self_validation(const std::string& variant) {
  const auto& v = self_validated_variants();
  if (std::find(v.begin(), v.end(), variant) != v.end()) return true;
  std::lock_guard<std::mutex> lock(g_testing_mu);
  return std::find(g_testing.begin(), g_testing.end(), variant) != g_testing.end();
}

void add_self_validation_for_testing(const std::string& variant) {
  std::lock_guard<std::mutex> lock(g_testing_mu);
  if (std::find(g_testing.begin(), g_testing.end(), variant) == g_testing.end()) g_testing.push_back(variant);
}

std::vector<OpChoice> op_choices(const DeviceProfile& p) {
  // Per op, its variants other than "generic" best first, each with the parameters (all
  // non-zero) that ask for it; the ops decide the same way (ops/decode/, extend/, mla/,
  // linear/).
  struct Candidate {
    const char* op;
    const char* key;
    std::vector<const char*> wants;
    const char* variant;
  };
  static const std::vector<Candidate> table = {
      {"decode", "bf16", {"PTX_SHFL"}, "nv_ptx_shfl"},
      {"decode", "bf16", {"SUBGROUP"}, "intel_subgroups"},
      {"decode", "bf16", {"SUBGROUP"}, "khr_subgroups"},
      {"decode", "bf16", {"CPU_KERNEL"}, "cpu"},
      {"extend", "d128", {"WMMA"}, "amd_wmma"},
      {"extend", "d128", {"MFMA"}, "amd_mfma"},
      {"extend", "d128", {"MMA", "MMA_WGMMA"}, "nv_wgmma"},
      {"extend", "d128", {"MMA"}, "nv_mma_sync"},
      {"extend", "d128", {"DPAS"}, "intel_dpas"},
      {"extend", "d128", {"CPU_KERNEL"}, "cpu"},
      {"mla_decode", "*", {"MMA"}, "nv_mma_sync"},
      {"mla_decode", "*", {"CPU_KERNEL"}, "cpu"},
      {"mla_decode", "*", {"TILED"}, "tiled"},
      {"mla_extend", "*", {"MMA"}, "nv_mma_sync"},
      {"mla_extend", "*", {"CPU_KERNEL"}, "cpu"},
      {"mla_extend", "*", {"TILED"}, "tiled"},
      {"linear_decode", "*", {"CPU_KERNEL"}, "cpu"},
      {"linear_prefill", "*", {"PF_MMA"}, "nv_mma_sync"},
      {"linear_prefill", "*", {"CPU_KERNEL"}, "cpu"},
  };
  std::vector<OpChoice> out;
  for (const Candidate& c : table) {
    if (out.empty() || out.back().op != c.op) out.push_back({c.op, "generic"});
    if (out.back().variant != "generic" || !variant_available(p, c.variant)) continue;
    const Entry e = lookup(p, c.op, c.key);
    bool wanted = true;
    for (const char* w : c.wants) wanted = wanted && e.get_or(w, 0) != 0;
    if (wanted) out.back().variant = c.variant;
  }
  return out;
}

}  // namespace clattn::params
