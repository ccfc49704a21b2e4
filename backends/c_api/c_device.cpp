// C ABI: the device profile as a struct, and the device list.
#include <vector>

#include "backends/c_api/c_api_common.hpp"

namespace {

using clattn::capi::copy_str;

void fill(clattn_device_info& d, int index, const clattn::DeviceProfile& p) {
  d = clattn_device_info{};
  d.index = index;
  copy_str(d.vendor, p.vendor);
  copy_str(d.vendor_forced, p.vendor_forced);
  d.portable_only = p.portable_only;
  copy_str(d.device_name, p.device_name);
  copy_str(d.device_vendor, p.device_vendor);
  copy_str(d.driver_version, p.driver_version);
  copy_str(d.device_version, p.device_version);
  copy_str(d.platform_name, p.platform_name);
  copy_str(d.opencl_c_version, p.opencl_c_version);
  copy_str(d.architecture, p.architecture);
  d.is_gpu = p.is_gpu;
  d.is_cpu = p.is_cpu;
  d.compute_units = p.compute_units;
  d.max_work_group_size = p.max_work_group_size;
  d.local_mem_bytes = p.local_mem_bytes;
  d.global_mem_bytes = p.global_mem_bytes;
  d.max_alloc_bytes = p.max_alloc_bytes;
  d.fp16 = p.fp16;
  d.fp64 = p.fp64;
  d.subgroups = p.subgroups;
  const int cap = int(sizeof d.subgroup_sizes / sizeof d.subgroup_sizes[0]);
  d.num_subgroup_sizes = std::min(cap, int(p.subgroup_sizes.size()));
  for (int i = 0; i < d.num_subgroup_sizes; ++i) d.subgroup_sizes[i] = p.subgroup_sizes[size_t(i)];
  d.intel_subgroups = p.intel_subgroups;
  d.intel_required_subgroup_size = p.intel_required_subgroup_size;
  d.integer_dot_product = p.integer_dot_product;
  d.nv_inline_ptx = p.nv_inline_ptx;
  d.nv_compute_capability = p.nv_compute_capability;
  d.amd_wavefront = p.amd_wavefront;
  d.warp_size = p.warp_size;
}

}  // namespace

using clattn::capi::guard;
using clattn::capi::need;

extern "C" {

clattn_status clattn_device_info_get(clattn_context ctx, clattn_device_info* out) {
  return guard([&] {
    need(out, "out");
    const auto& p = need(ctx, "ctx")->ctx.profile();
    // The context's index in the global list, -1 when it is not there (an adopted device
    // of a platform clattn does not enumerate).
    int index = -1;
    for (const auto& e : clattn::list_devices())
      if (e.device == ctx->ctx.cl_device()) index = e.index;
    clattn_device_info d;
    fill(d, index, p);
    *out = d;
  });
}

clattn_status clattn_device_count(int* out) {
  return guard([&] {
    need(out, "out");
    *out = int(clattn::list_devices().size());
  });
}

clattn_status clattn_device_info_at(int index, clattn_device_info* out) {
  return guard([&] {
    need(out, "out");
    auto list = clattn::list_devices();
    if (index < 0 || size_t(index) >= list.size())
      clattn::capi::invalid("index = " + std::to_string(index) + " is out of range [0, " +
                            std::to_string(list.size()) + ")");
    clattn_device_info d;
    fill(d, list[size_t(index)].index, list[size_t(index)].profile);
    *out = d;
  });
}

}  // extern "C"
