#include "runtime/quirks.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runtime/error.hpp"

namespace clattn::rt {

std::pair<int, int> mesa_version(const std::string& v) {
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

namespace {

// Mesa's llvmpipe through rusticl or Clover (their CL_PLATFORM_NAME; llvmpipe names its device
// "llvmpipe (LLVM x.y.z, N bits)").
bool is_llvmpipe(const DeviceProfile& p) {
  return p.device_name.rfind("llvmpipe", 0) == 0 && (p.platform_name == "rusticl" || p.platform_name == "Clover");
}

// gallivm's loop limiter (LP_MAX_TGSI_LOOP_ITERATIONS = 65535, one counter per invocation
// shared by all its loops) ends a work-item's loops silently. Seen on Mesa 22.3.6; the
// limiter is still in gallivm's source in Mesa 24, so no release is known without it:
// kLoopLimitFixedIn stays {0, 0} (none) until one is, then versions from it on are exempt.
constexpr long long kLlvmpipeLoopTrips = 65535;
constexpr std::pair<int, int> kLoopLimitFixedIn = {0, 0};
// rusticl's kernel local-memory figure: seen doubled on Mesa 22.3.6; no release known to report
// the declared size yet.
constexpr std::pair<int, int> kLocalMemFixedIn = {0, 0};

}  // namespace

const std::vector<Quirk>& known_quirks() {
  static const std::vector<Quirk> q = {
      {"llvmpipe_loop_limit",
       "a work-item's loops stop after 65535 iterations in all (gallivm's shared loop limiter); results go wrong "
       "silently",
       "dev/llvmpipe_loop_limit.c",
       [](const DeviceProfile& p) {
         return is_llvmpipe(p) && (kLoopLimitFixedIn.first == 0 || mesa_version(p.driver_version) < kLoopLimitFixedIn);
       },
       [](DeviceProfile& p) {
         if (p.loop_trip_limit == 0 || p.loop_trip_limit > kLlvmpipeLoopTrips) p.loop_trip_limit = kLlvmpipeLoopTrips;
       }},
      {"rusticl_local_mem_doubled",
       "CL_KERNEL_LOCAL_MEM_SIZE reports twice the __local bytes a kernel declares; kernels that fit are refused",
       "dev/rusticl_local_mem_size.c",
       [](const DeviceProfile& p) {
         return p.platform_name == "rusticl" &&
                (kLocalMemFixedIn.first == 0 || mesa_version(p.driver_version) < kLocalMemFixedIn);
       },
       [](DeviceProfile& p) { p.kernel_local_mem_overcount = 2; }},
  };
  return q;
}

void apply_quirks(DeviceProfile& p, const std::string& setting) {
  std::vector<std::string> off;
  bool all_off = false;
  std::istringstream in(setting);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    if (item == "off") {
      all_off = true;
      continue;
    }
    const std::string name = item[0] == '-' ? item.substr(1) : item;
    const auto& k = known_quirks();
    if (item[0] != '-' || std::none_of(k.begin(), k.end(), [&](const Quirk& x) { return name == x.name; })) {
      std::string names;
      for (const Quirk& x : k) names += std::string(names.empty() ? "" : ", ") + "-" + x.name;
      invalid("CLATTN_QUIRKS: '" + item + "' is neither 'off' nor a known quirk turned off (" + names + ")");
    }
    off.push_back(name);
  }
  for (const Quirk& x : known_quirks()) {
    if (all_off || std::find(off.begin(), off.end(), x.name) != off.end() || !x.applies(p)) continue;
    x.apply(p);
    p.quirks.push_back(x.name);
  }
}

}  // namespace clattn::rt
