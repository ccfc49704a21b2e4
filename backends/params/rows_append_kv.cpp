// append_kv parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_append_kv() {
  static const std::vector<Row> rows = {
  };
  return rows;
}
}  // namespace clattn::params
