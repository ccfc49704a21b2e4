// Reads a DeviceProfile off an OpenCL device.
#pragma once
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::rt {

// Queries the device; applies CLATTN_FORCE_VENDOR, CLATTN_VARIANTS, CLATTN_EMULATE, the
// driver quirks (CLATTN_QUIRKS) and the constrained-device limits (CLATTN_DEVICE_LIMITS), the
// options' variants and device_limits winning over the environment's (unknown value ->
// InvalidArgument).
DeviceProfile query_profile(cl_platform_id platform, cl_device_id device, const ContextOptions& options = {});

// A variants mode (CLATTN_VARIANTS, ContextOptions::variants): true for "portable", false for
// "" or "all" (any case); anything else is InvalidArgument naming `from`.
bool parse_portable_only(const std::string& value, const std::string& from);

// Features CLATTN_EMULATE may name (DeviceProfile::emulated), and its parser: a
// comma-separated list of them; an unknown name is InvalidArgument naming `from`.
const std::vector<std::string>& emulatable_features();
std::vector<std::string> parse_emulated(const std::string& value, const std::string& from);

// "NVIDIA Corporation" -> "nvidia", ...; CPU devices are "cpu" whatever their vendor.
std::string normalise_vendor(const std::string& vendor, bool is_cpu);

// The vendors CLATTN_FORCE_VENDOR accepts.
bool is_known_vendor(const std::string& v);

std::string device_info_string(cl_device_id d, cl_device_info what);
std::string platform_info_string(cl_platform_id p, cl_platform_info what);

}  // namespace clattn::rt
