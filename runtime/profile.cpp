#include "runtime/profile.hpp"

#include <algorithm>
#include <sstream>

#include "runtime/device_limits.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"
#include "runtime/quirks.hpp"
#include "runtime/recording.hpp"

// Vendor extension enums (cl_ext.h names; spelled out so older headers still build).
#define CLATTN_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CLATTN_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#define CLATTN_DEVICE_WARP_SIZE_NV 0x4003
#define CLATTN_DEVICE_BOARD_NAME_AMD 0x4038
#define CLATTN_DEVICE_WAVEFRONT_WIDTH_AMD 0x4043
#define CLATTN_DEVICE_GFXIP_MAJOR_AMD 0x404A
#define CLATTN_DEVICE_IP_VERSION_INTEL 0x4250  // cl_intel_device_attribute_query: a cl_version
#define CLATTN_DEVICE_SUB_GROUP_SIZES_INTEL 0x4108
#define CLATTN_DEVICE_MAX_NUM_SUB_GROUPS 0x105C

namespace clattn {

bool DeviceProfile::has_extension(const std::string& e) const {
  return std::find(extensions.begin(), extensions.end(), e) != extensions.end();
}

bool DeviceProfile::emulates(const std::string& f) const {
  return std::find(emulated.begin(), emulated.end(), f) != emulated.end();
}

namespace rt {

const std::vector<std::string>& emulatable_features() {
  static const std::vector<std::string> f = {"cl_khr_subgroups", "cl_intel_subgroups",
                                             "cl_intel_subgroup_matrix_multiply_accumulate", "amd_wmma", "amd_mfma",
                                             "nv_mma_sync"};
  return f;
}

std::vector<std::string> parse_emulated(const std::string& value, const std::string& from) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(value);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    const auto& known = emulatable_features();
    if (std::find(known.begin(), known.end(), item) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      invalid(from + ": '" + item + "' is not an emulated feature (" + list + ")");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return s;
}

template <class T>
bool device_info(cl_device_id d, cl_device_info what, T& out) {
  return clGetDeviceInfo(d, what, sizeof(T), &out, nullptr) == CL_SUCCESS;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// Intel GPU generation from the marketing name; a coarse key for the parameter database.
std::string intel_architecture(const std::string& name) {
  std::string n = lower(name);
  if (n.find("data center gpu max") != std::string::npos) return "xe-hpc";
  if (n.find("arc") != std::string::npos) return "xe-hpg";
  if (n.find("iris xe") != std::string::npos || n.find("uhd graphics 7") != std::string::npos) return "xe-lp";
  if (n.find("graphics") != std::string::npos) return "gen";
  return "";
}

// Intel GPU generation from CL_DEVICE_IP_VERSION_INTEL (cl_intel_device_attribute_query,
// a cl_version major.minor.revision of the graphics IP: 9 = Gen9, 11 = Gen11, 12.0-12.10 =
// Xe-LP (Tiger Lake, DG1), 12.55-12.59 = Xe-HPG (Arc A / DG2), 12.60 = Xe-HPC (Data Center
// GPU Max), 12.70-12.74 = Xe-LPG (Meteor/Arrow Lake), 20 = Xe2 (Battlemage, Lunar Lake);
// Intel's extension spec and the compute-runtime's hardware tables). "" when unknown.
std::string intel_ip_architecture(cl_uint ip) {
  const unsigned major = ip >> 22, minor = (ip >> 12) & 0x3ff;
  if (major >= 20) return "xe2";
  if (major == 12) {
    if (minor >= 70 && minor <= 74) return "xe-lpg";
    if (minor == 60) return "xe-hpc";
    if (minor >= 55 && minor <= 59) return "xe-hpg";
    if (minor <= 10) return "xe-lp";
    return "";
  }
  if (major == 11) return "gen11";
  if (major == 9) return "gen9";
  return "";
}

}  // namespace

std::string device_info_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  return trim(s);
}

std::string platform_info_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  return trim(s);
}

bool is_known_vendor(const std::string& v) {
  static const char* known[] = {"nvidia", "amd", "intel", "apple", "arm", "qualcomm", "cpu", "generic"};
  return std::any_of(std::begin(known), std::end(known), [&](const char* k) { return v == k; });
}

bool parse_portable_only(const std::string& value, const std::string& from) {
  const std::string v = lower(value);
  if (v.empty() || v == "all") return false;
  if (v == "portable") return true;
  invalid(from + "='" + value + "' is not a variants mode (all, portable)");
}

std::string normalise_vendor(const std::string& vendor, bool is_cpu) {
  if (is_cpu) return "cpu";
  std::string v = lower(vendor);
  if (v.find("nvidia") != std::string::npos) return "nvidia";
  if (v.find("advanced micro") != std::string::npos || v.find("amd") != std::string::npos) return "amd";
  if (v.find("intel") != std::string::npos) return "intel";
  if (v.find("apple") != std::string::npos) return "apple";
  if (v.find("arm") != std::string::npos) return "arm";
  if (v.find("qualcomm") != std::string::npos) return "qualcomm";
  return "generic";
}

DeviceProfile query_profile(cl_platform_id platform, cl_device_id d, const ContextOptions& options) {
  DeviceProfile p;
  p.device_name = device_info_string(d, CL_DEVICE_NAME);
  p.device_vendor = device_info_string(d, CL_DEVICE_VENDOR);
  p.driver_version = device_info_string(d, CL_DRIVER_VERSION);
  p.device_version = device_info_string(d, CL_DEVICE_VERSION);
  p.opencl_c_version = device_info_string(d, CL_DEVICE_OPENCL_C_VERSION);
  p.platform_name = platform_info_string(platform, CL_PLATFORM_NAME);
  p.platform_vendor = platform_info_string(platform, CL_PLATFORM_VENDOR);
  p.platform_version = platform_info_string(platform, CL_PLATFORM_VERSION);

  cl_device_type type = 0;
  device_info(d, CL_DEVICE_TYPE, type);
  p.is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
  p.is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  cl_uint cu = 0;
  device_info(d, CL_DEVICE_MAX_COMPUTE_UNITS, cu);
  p.compute_units = cu;
  size_t wg = 0;
  device_info(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, wg);
  p.max_work_group_size = wg;
  // Every clattn launch spreads its work-group along dimension 0 only, so that dimension's
  // limit (CL_DEVICE_MAX_WORK_ITEM_SIZES[0], below the group limit on some embedded GPUs)
  // bounds it too.
  size_t items[3] = {0, 0, 0};
  if (clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, nullptr) == CL_SUCCESS && items[0])
    p.max_work_group_size = std::min(p.max_work_group_size ? p.max_work_group_size : items[0], items[0]);
  cl_ulong v = 0;
  if (device_info(d, CL_DEVICE_LOCAL_MEM_SIZE, v)) p.local_mem_bytes = v;
  if (device_info(d, CL_DEVICE_GLOBAL_MEM_SIZE, v)) p.global_mem_bytes = v;
  if (device_info(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, v)) p.max_alloc_bytes = v;

  std::istringstream ext(device_info_string(d, CL_DEVICE_EXTENSIONS));
  for (std::string e; ext >> e;) p.extensions.push_back(e);
  p.fp16 = p.has_extension("cl_khr_fp16");
  p.fp64 = p.has_extension("cl_khr_fp64");
  p.intel_subgroups = p.has_extension("cl_intel_subgroups");
  p.intel_required_subgroup_size = p.has_extension("cl_intel_required_subgroup_size");
  p.integer_dot_product = p.has_extension("cl_khr_integer_dot_product");
  if (p.has_extension("cl_khr_command_buffer")) p.command_buffer = command_buffer_version(d);
  cl_uint max_sg = 0;
  bool sg_query = device_info(d, CLATTN_DEVICE_MAX_NUM_SUB_GROUPS, max_sg);
  p.subgroups = p.has_extension("cl_khr_subgroups") || (sg_query && max_sg > 0);

  p.vendor = normalise_vendor(p.device_vendor + " " + p.platform_vendor, p.is_cpu);
  if (p.vendor == "nvidia" && p.has_extension("cl_nv_device_attribute_query")) {
    cl_uint maj = 0, min = 0, warp = 0;
    if (device_info(d, CLATTN_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, maj) &&
        device_info(d, CLATTN_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, min)) {
      p.nv_compute_capability = int(maj * 10 + min);
      p.architecture = "sm_" + std::to_string(maj) + std::to_string(min);
    }
    if (device_info(d, CLATTN_DEVICE_WARP_SIZE_NV, warp)) p.warp_size = warp;
  }
  // NVIDIA's OpenCL compiler accepts inline PTX asm(); no other platform does.
  p.nv_inline_ptx = p.vendor == "nvidia" && p.nv_compute_capability > 0;
  if (p.vendor == "nvidia" && p.warp_size == 0) p.warp_size = 32;
  if (p.vendor == "amd") {
    cl_uint wave = 0;
    if (p.has_extension("cl_amd_device_attribute_query") && device_info(d, CLATTN_DEVICE_WAVEFRONT_WIDTH_AMD, wave))
      p.amd_wavefront = wave;
    p.warp_size = p.amd_wavefront;
    // AMD's ROCm runtime reports the gfx target as the device name, with target features
    // after a colon ("gfx90a:sramecc+:xnack-", "gfx1100"). Older drivers name the chip
    // ("Ellesmere"); there the GFXIP major version of cl_amd_device_attribute_query gives
    // the family ("gfx8", "gfx9", "gfx10", ...). The board name (CL_DEVICE_BOARD_NAME_AMD)
    // is marketing only and not used.
    std::string n = lower(p.device_name);
    cl_uint gfx_major = 0;
    if (n.rfind("gfx", 0) == 0) p.architecture = n.substr(0, n.find(':'));
    else if (p.has_extension("cl_amd_device_attribute_query") &&
             device_info(d, CLATTN_DEVICE_GFXIP_MAJOR_AMD, gfx_major) && gfx_major > 0)
      p.architecture = "gfx" + std::to_string(gfx_major);
    if (p.amd_wavefront) p.subgroup_sizes.push_back(p.amd_wavefront);
  }
  if (p.intel_subgroups || p.intel_required_subgroup_size) {
    size_t n = 0;
    if (clGetDeviceInfo(d, CLATTN_DEVICE_SUB_GROUP_SIZES_INTEL, 0, nullptr, &n) == CL_SUCCESS && n) {
      std::vector<size_t> sizes(n / sizeof(size_t));
      if (clGetDeviceInfo(d, CLATTN_DEVICE_SUB_GROUP_SIZES_INTEL, n, sizes.data(), nullptr) == CL_SUCCESS)
        for (size_t s : sizes) p.subgroup_sizes.push_back(unsigned(s));
    }
  }
  if (p.vendor == "intel" && p.is_gpu) {
    cl_uint ip = 0;
    if (p.has_extension("cl_intel_device_attribute_query") && device_info(d, CLATTN_DEVICE_IP_VERSION_INTEL, ip))
      p.architecture = intel_ip_architecture(ip);
    if (p.architecture.empty()) p.architecture = intel_architecture(p.device_name);  // older drivers: the name
  }
  if (p.vendor == "nvidia" && p.warp_size) p.subgroup_sizes.push_back(p.warp_size);
  if (p.is_cpu && p.architecture.empty()) {
    // PoCL names its CPU device "pthread-<llvm cpu>-<vendor string>".
    std::string n = p.device_name;
    if (n.rfind("pthread-", 0) == 0 || n.rfind("cpu-", 0) == 0) {
      n = n.substr(n.find('-') + 1);
      p.architecture = n.substr(0, n.find('-'));
    }
  }

  std::string forced = lower(env("CLATTN_FORCE_VENDOR"));
  if (!forced.empty()) {
    if (!is_known_vendor(forced))
      invalid("CLATTN_FORCE_VENDOR='" + forced +
              "' is not a known vendor (nvidia, amd, intel, apple, arm, qualcomm, cpu, generic)");
    p.vendor_forced = forced;
  }
  p.portable_only = options.variants.empty() ? parse_portable_only(env("CLATTN_VARIANTS"), "CLATTN_VARIANTS")
                                             : parse_portable_only(options.variants, "options.variants");
  p.emulated = parse_emulated(env("CLATTN_EMULATE"), "CLATTN_EMULATE");
  apply_quirks(p, env("CLATTN_QUIRKS"));
  if (!options.device_limits.empty()) apply_device_limits(p, options.device_limits, "options.device_limits");
  else apply_device_limits(p, env("CLATTN_DEVICE_LIMITS"), "CLATTN_DEVICE_LIMITS");
  return p;
}

}  // namespace rt
}  // namespace clattn
