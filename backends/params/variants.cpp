#include "backends/params/variants.hpp"

namespace clattn::params {

const std::vector<std::string>& all_variants() {
  static const std::vector<std::string> v = {"generic", "nv_ptx_shfl", "nv_mma_sync", "nv_wgmma"};
  return v;
}

bool variant_available(const DeviceProfile& p, const std::string& v, std::string* why) {
  auto say = [&](bool ok, const std::string& reason) {
    if (why) *why = reason;
    return ok;
  };
  if (v == "generic") return say(true, "OpenCL C 1.2 and local memory");
  if (v == "nv_ptx_shfl")
    return p.nv_inline_ptx ? say(true, "NVIDIA inline PTX, sm_" + std::to_string(p.nv_compute_capability))
                           : say(false, "needs NVIDIA's OpenCL compiler (inline PTX)");
  if (v == "nv_mma_sync") {
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

}  // namespace clattn::params
