#include "backends/ops/catalog.hpp"

namespace clattn::ops {

std::vector<CatalogEntry> catalog(const CatalogTarget& target) {
  std::vector<CatalogEntry> out;
  catalog_decode(target, out);
  catalog_extend(target, out);
  catalog_mla(target, out);
  catalog_linear(target, out);
  catalog_append_kv(target, out);
  catalog_metadata(target, out);
  return out;
}

}  // namespace clattn::ops
