// Capability-gated kernel variants. Capabilities decide; a forced vendor (CLATTN_FORCE_VENDOR)
// can only select variants the device at hand can actually run. In portable-only mode
// (DeviceProfile::portable_only, CLATTN_VARIANTS=portable) every vendor-specific variant is
// unavailable, so no op compiles vendor code: each op's choice goes through
// variant_available().
#pragma once
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::params {

// The variants some kernel has (a variant is listed only once a kernel implements it):
// "generic"        : OpenCL 1.2, local memory only
// "tiled"          : OpenCL 1.2, register-blocked local-memory tiles (MLA)
// "cpu"            : OpenCL 1.2, one work-item per group over vector types, for CPU devices
//                    (decode; chosen by the cpu rows' CPU_KERNEL)
// "khr_subgroups"  : cl_khr_subgroups sub-group butterflies instead of work-group-wide ones:
//                    cl_khr_subgroup_shuffle xor shuffles where the device has them, else
//                    local memory fenced by sub_group_barrier (decode)
// "intel_subgroups": cl_intel_subgroups xor shuffles, optionally at a required sub-group size
//                    (cl_intel_required_subgroup_size) (decode)
// "intel_dpas"     : cl_intel_subgroup_matrix_multiply_accumulate, DPAS systolic arrays (extend)
// "amd_wmma"       : AMD WMMA builtins, RDNA3 gfx11 wave32 (extend)
// "amd_mfma"       : AMD MFMA builtins, CDNA gfx908/gfx90a/gfx94x wave64 (extend)
// "nv_ptx_shfl"    : NVIDIA inline PTX shfl.sync warp reductions (decode)
// "nv_mma_sync"    : NVIDIA inline PTX mma.sync tensor cores, compute capability >= 8.0
//                    (extend, MLA, linear-attention prefill)
// "nv_wgmma"       : NVIDIA wgmma + TMA, compute capability 9.x, PTX rebuilt for sm_90a (extend)
const std::vector<std::string>& all_variants();
// True for variants that use vendor-specific code (inline PTX, vendor extensions or builtins):
// those named after their vendor (nv_*, amd_*, intel_*, arm_*, qcom_*, apple_*). Portable
// kernels and standard cl_khr_* paths have other names.
bool vendor_specific(const std::string& variant);
// AMD matrix instructions by ISA: WMMA on gfx11, MFMA on CDNA (gfx908, gfx90a, gfx94x, gfx95x).
bool amd_has_wmma(const std::string& architecture);
bool amd_has_mfma(const std::string& architecture);
// Whether the device itself has `feature` (one CLATTN_EMULATE can name: a cl_ extension, or
// amd_wmma / amd_mfma by architecture), and whether the feature is emulated here for tests
// (named in DeviceProfile::emulated while the device lacks it: kernels then build with its
// emulation header, ops::add_emulation).
bool has_feature(const DeviceProfile& p, const std::string& feature);
bool emulated(const DeviceProfile& p, const std::string& feature);
bool variant_available(const DeviceProfile& p, const std::string& variant, std::string* why = nullptr);
// "" when the device can run `variant`, else why not.
std::string why_unavailable(const DeviceProfile& p, const std::string& variant);

// Variants that have never run on hardware of their kind: written against the vendor's
// documentation and checked only through emulation headers (CLATTN_EMULATE, on PoCL) and
// offline compilers. An op uses one on a device only after it matched the portable kernel
// there on a small case (backends/dispatch/self_validation.hpp): intel_dpas, amd_wmma, amd_mfma,
// intel_subgroups, khr_subgroups. Remove a variant from this list once it has run on
// hardware of its kind.
bool needs_self_validation(const std::string& variant);
const std::vector<std::string>& self_validated_variants();
// Tests: treat `variant` as listed too (a deliberately wrong candidate must be rejected).
void add_self_validation_for_testing(const std::string& variant);

// What each op with several variants would choose on this device for its usual call (decode of
// bf16 KV, extend at head dim 128, MLA, linear-attention prefill): the first variant its
// parameters ask for that the device can run, else "generic". A call's dtypes, strides or
// shapes can still send it to the generic kernel. (clattn-probe prints this.)
struct OpChoice {
  std::string op, variant;
};
std::vector<OpChoice> op_choices(const DeviceProfile& p);

}  // namespace clattn::params
