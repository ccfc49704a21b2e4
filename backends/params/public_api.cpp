// Public view of the parameter database and of the capability-gated variants.
#include "backends/params/database.hpp"
#include "backends/params/variants.hpp"
#include "clattn/diagnostics.hpp"

namespace clattn {

ParamEntry parameters(const DeviceProfile& profile, const std::string& op, const std::string& key) {
  params::Entry e = params::lookup(profile, op, key);
  return ParamEntry{e.values, params::level_name(e.level), e.source, e.origins};
}

std::vector<std::string> parameter_ops() { return params::known_ops(); }

std::vector<VariantInfo> variants(const DeviceProfile& p) {
  std::vector<VariantInfo> out;
  for (auto& v : params::all_variants()) {
    std::string why;
    bool ok = params::variant_available(p, v, &why);
    out.push_back({v, ok, why});
  }
  return out;
}

}  // namespace clattn
