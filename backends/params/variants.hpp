// Capability-gated kernel variants. Capabilities decide; a forced vendor (CLATTN_FORCE_VENDOR)
// can only select variants the device at hand can actually run.
#pragma once
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::params {

// "generic"        : OpenCL 1.2, local memory only
// "khr_subgroups"  : cl_khr_subgroups / OpenCL 3.0 sub-group functions
// "intel_subgroups": cl_intel_subgroups + cl_intel_required_subgroup_size
// "nv_ptx_shfl"    : NVIDIA inline PTX shfl.sync warp reductions
// "nv_mma_sync"    : NVIDIA inline PTX mma.sync tensor cores (compute capability >= 8.0)
const std::vector<std::string>& all_variants();
bool variant_available(const DeviceProfile& p, const std::string& variant, std::string* why = nullptr);

}  // namespace clattn::params
