// hsa parameters (cl_kernels/hsa.cl, the HSA selection; the sparse decode itself takes the
// decode rows). Each says where its numbers come from.
//
// SELECT_WG is the selection's work-group: one group per (request, selection list), its
// work-items striding over the candidate pages (one landmark row each) and then over the
// top-k passes (a 256-bin histogram, prefix sums of SELECT_WG entries).
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_hsa() {
  static const std::vector<Row> rows = {
      // 128 work-items: four NVIDIA warps or two AMD wavefronts; a 32k-token request at page
      // 64 has 512 candidates, four per work-item.
      {"hsa", Level::Generic, "", "*", {{"SELECT_WG", 128}}, "portable default (by design; not tuned)"},
      // PoCL runs a work-group as one vectorised loop on a core: a small group keeps the
      // histogram and prefix-sum loops short.
      {"hsa", Level::Vendor, "cpu", "*", {{"SELECT_WG", 16}}, "vendor docs: PoCL pthread device"},
  };
  return rows;
}
}  // namespace clattn::params
