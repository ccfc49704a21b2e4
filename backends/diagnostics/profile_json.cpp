// A DeviceProfile as JSON: clinfo-style CL_* keys for what OpenCL reports, clattn_* for
// what clattn derives. Shared by clattn-probe --json and the C ABI.
#include <nlohmann/json.hpp>

#include "clattn/diagnostics.hpp"

namespace clattn {

std::string profile_json(const DeviceProfile& p) {
  nlohmann::json j{{"CL_DEVICE_NAME", p.device_name},
                   {"CL_DEVICE_VENDOR", p.device_vendor},
                   {"CL_DRIVER_VERSION", p.driver_version},
                   {"CL_DEVICE_VERSION", p.device_version},
                   {"CL_DEVICE_OPENCL_C_VERSION", p.opencl_c_version},
                   {"CL_PLATFORM_NAME", p.platform_name},
                   {"CL_PLATFORM_VENDOR", p.platform_vendor},
                   {"CL_PLATFORM_VERSION", p.platform_version},
                   {"CL_DEVICE_TYPE", p.is_gpu ? "GPU" : p.is_cpu ? "CPU" : "OTHER"},
                   {"CL_DEVICE_MAX_COMPUTE_UNITS", p.compute_units},
                   {"CL_DEVICE_MAX_WORK_GROUP_SIZE", p.max_work_group_size},
                   {"CL_DEVICE_LOCAL_MEM_SIZE", p.local_mem_bytes},
                   {"CL_DEVICE_GLOBAL_MEM_SIZE", p.global_mem_bytes},
                   {"CL_DEVICE_MAX_MEM_ALLOC_SIZE", p.max_alloc_bytes},
                   {"CL_DEVICE_EXTENSIONS", p.extensions},
                   {"clattn_vendor", p.vendor},
                   {"clattn_vendor_forced", p.vendor_forced},
                   {"clattn_portable_only", p.portable_only},
                   {"clattn_architecture", p.architecture},
                   {"clattn_fp16", p.fp16},
                   {"clattn_fp64", p.fp64},
                   {"clattn_subgroups", p.subgroups},
                   {"clattn_subgroup_sizes", p.subgroup_sizes},
                   {"clattn_intel_subgroups", p.intel_subgroups},
                   {"clattn_intel_required_subgroup_size", p.intel_required_subgroup_size},
                   {"clattn_integer_dot_product", p.integer_dot_product},
                   {"clattn_command_buffer", p.command_buffer},
                   {"clattn_nv_inline_ptx", p.nv_inline_ptx},
                   {"clattn_nv_compute_capability", p.nv_compute_capability},
                   {"clattn_amd_wavefront", p.amd_wavefront},
                   {"clattn_warp_size", p.warp_size},
                   {"clattn_kernel_work_group_cap", p.kernel_work_group_cap},
                   {"clattn_private_mem_cap", p.private_mem_cap},
                   {"clattn_loop_trip_limit", p.loop_trip_limit},
                   {"clattn_kernel_local_mem_overcount", p.kernel_local_mem_overcount},
                   {"clattn_device_limits", p.device_limits},
                   {"clattn_quirks", p.quirks}};
  return j.dump();
}

}  // namespace clattn
