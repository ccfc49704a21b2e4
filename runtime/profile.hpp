// Reads a DeviceProfile off an OpenCL device.
#pragma once
#include "clattn/context.hpp"

namespace clattn::rt {

// Queries the device; applies CLATTN_FORCE_VENDOR (unknown value -> InvalidArgument).
DeviceProfile query_profile(cl_platform_id platform, cl_device_id device);

// "NVIDIA Corporation" -> "nvidia", ...; CPU devices are "cpu" whatever their vendor.
std::string normalise_vendor(const std::string& vendor, bool is_cpu);

// The vendors CLATTN_FORCE_VENDOR accepts.
bool is_known_vendor(const std::string& v);

std::string device_info_string(cl_device_id d, cl_device_info what);
std::string platform_info_string(cl_platform_id p, cl_platform_info what);

}  // namespace clattn::rt
