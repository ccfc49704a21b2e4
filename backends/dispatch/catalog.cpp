#include "backends/dispatch/catalog.hpp"

#include "runtime/program_cache.hpp"

namespace clattn::ops {

std::vector<CatalogEntry> catalog(const CatalogTarget& target) {
  std::vector<CatalogEntry> out;
  catalog_decode(target, out);
  catalog_extend(target, out);
  catalog_mla(target, out);
  catalog_dsa_index(target, out);
  catalog_linear(target, out);
  catalog_append_kv(target, out);
  catalog_rope(target, out);
  catalog_metadata(target, out);
  catalog_hsa(target, out);
  // The tile the dispatcher would build first, with the options as the program cache builds
  // them (ProgramCache::get).
  for (CatalogEntry& e : out)
    for (Variant& v : e.variants) {
      if (v.why_not.empty()) v = fit_estimate(target.profile, v);
      v.options = rt::with_device_options(target.profile, v.options);
    }
  return out;
}

}  // namespace clattn::ops
