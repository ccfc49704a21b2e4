// The "# variants:" header line of clattn-bench (bench.hpp, note_variant_mode).
#include <cstdio>

#include "bench/bench.hpp"

namespace clattn::bench {

void note_variant_mode(Harness& h) {
  static bool printed = false;
  if (printed) return;
  printed = true;
  const DeviceProfile& p = h.ctx().profile();
  std::string unavailable;
  for (const VariantInfo& v : variants(p))
    if (!v.available) unavailable += (unavailable.empty() ? "" : ", ") + v.name;
  std::printf("# variants: %s%s%s\n",
              p.portable_only ? "portable-only (CLATTN_VARIANTS=portable)" : "all the device can run",
              unavailable.empty() ? "" : "; not available here: ", unavailable.c_str());
}

}  // namespace clattn::bench
