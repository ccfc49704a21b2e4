// Capability-gated kernel variants. Capabilities decide; a forced vendor (CLATTN_FORCE_VENDOR)
// can only select variants the device at hand can actually run.
#pragma once
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::params {

// The variants some kernel has (a variant is listed only once a kernel implements it):
// "generic"        : OpenCL 1.2, local memory only
// "nv_ptx_shfl"    : NVIDIA inline PTX shfl.sync warp reductions (decode)
// "nv_mma_sync"    : NVIDIA inline PTX mma.sync tensor cores, compute capability >= 8.0
//                    (extend, MLA, linear-attention prefill)
// "nv_wgmma"       : NVIDIA wgmma + TMA, compute capability 9.x, PTX rebuilt for sm_90a (extend)
const std::vector<std::string>& all_variants();
bool variant_available(const DeviceProfile& p, const std::string& variant, std::string* why = nullptr);
// "" when the device can run `variant`, else why not.
std::string why_unavailable(const DeviceProfile& p, const std::string& variant);

}  // namespace clattn::params
