#include "runtime/device_limits.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "runtime/error.hpp"

namespace clattn::rt {

namespace {

unsigned long long parse_value(const std::string& key, const std::string& v, const std::string& from) {
  if (v.empty() || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); }) || v.size() > 15)
    invalid(from + ": " + key + "='" + v + "' is not a non-negative integer");
  return std::stoull(v);
}

bool parse_flag(const std::string& key, const std::string& v, const std::string& from) {
  if (v != "0" && v != "1") invalid(from + ": " + key + "='" + v + "' must be 0 or 1");
  return v == "1";
}

// Drops the extensions whose names start with one of `prefixes` (a constrained device lacks them).
void drop_extensions(DeviceProfile& p, std::initializer_list<const char*> prefixes) {
  auto gone = [&](const std::string& e) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const char* x) { return e.rfind(x, 0) == 0; });
  };
  p.extensions.erase(std::remove_if(p.extensions.begin(), p.extensions.end(), gone), p.extensions.end());
}

template <class T>
void lower_to(T& field, unsigned long long v) {
  if (field == 0 || v < static_cast<unsigned long long>(field)) field = T(v);
}

}  // namespace

void apply_device_limits(DeviceProfile& p, const std::string& spec, const std::string& from) {
  std::istringstream in(spec);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) invalid(from + ": '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (key == "local") {
      const auto n = parse_value(key, v, from);
      if (n < 1024) invalid(from + ": local=" + v + " is below the 1024 bytes OpenCL guarantees");
      lower_to(p.local_mem_bytes, n);
    } else if (key == "wg" || key == "kernel_wg") {
      const auto n = parse_value(key, v, from);
      if (n < 1) invalid(from + ": " + key + "=0: a work-group has at least one work-item");
      if (key == "wg") lower_to(p.max_work_group_size, n);
      else lower_to(p.kernel_work_group_cap, n);
    } else if (key == "private") {
      lower_to(p.private_mem_cap, parse_value(key, v, from));
    } else if (key == "loop_trips") {
      const auto n = parse_value(key, v, from);
      if (n < 1024) invalid(from + ": loop_trips=" + v + " leaves no kernel room to run (at least 1024)");
      lower_to(p.loop_trip_limit, n);
    } else if (key == "cus") {
      const auto n = parse_value(key, v, from);
      if (n < 1) invalid(from + ": cus=0: a device has at least one compute unit");
      lower_to(p.compute_units, n);
    } else if (key == "fp16") {
      if (!parse_flag(key, v, from)) p.fp16 = false, drop_extensions(p, {"cl_khr_fp16"});
    } else if (key == "subgroups") {
      if (!parse_flag(key, v, from)) {
        p.subgroups = false, p.intel_subgroups = false, p.intel_required_subgroup_size = false;
        p.subgroup_sizes.clear();
        drop_extensions(p, {"cl_khr_subgroup", "cl_intel_subgroup", "cl_intel_required_subgroup_size"});
      }
    } else {
      invalid(from + ": unknown key '" + key +
              "' (local, wg, kernel_wg, private, fp16, subgroups, loop_trips, cus)");
    }
    any = true;
  }
  if (any) p.device_limits = spec;
}

std::size_t kernel_work_group_limit(const DeviceProfile& p, std::size_t driver_figure) {
  std::size_t n = driver_figure;
  if (p.kernel_work_group_cap) n = std::min(n, p.kernel_work_group_cap);
  if (p.max_work_group_size) n = std::min(n, p.max_work_group_size);
  return n;
}

}  // namespace clattn::rt
