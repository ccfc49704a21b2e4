// merge parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_merge() {
  static const std::vector<Row> rows = {
  };
  return rows;
}
}  // namespace clattn::params
