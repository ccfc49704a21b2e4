// hsa parameters (cl_kernels/hsa.cl, the HSA selection; the sparse decode itself takes the
// decode rows). Each says where its numbers come from.
//
// SELECT_WG is the selection's work-group: one group per (request, selection list), its
// work-items striding over the candidate pages (one landmark row each) and then over the
// top-k passes (a 256-bin histogram, prefix sums of SELECT_WG entries); TOPK_CHUNKS picks
// topk.clh's compaction (0: blocks, coalesced, for GPUs; 1: contiguous chunks, for CPUs).
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_hsa() {
  static const std::vector<Row> rows = {
      // 128 work-items: four NVIDIA warps or two AMD wavefronts; a 32k-token request at page
      // 64 has 512 candidates, four per work-item.
      {"hsa", Level::Generic, "", "*", {{"SELECT_WG", 128}, {"TOPK_CHUNKS", 0}}, "portable default (by design; not tuned)"},
      // PoCL runs a work-group as one vectorised loop on a core: a small group keeps the
      // histogram and prefix-sum loops short.
      // TOPK_CHUNKS: the top-k's compaction in contiguous per-work-item chunks, two prefix
      // sums in all (PoCL, head lists of B=4 S=4096: selection 0.70 vs 0.75 ms; on the H100
      // the blocked form is faster: 0.49 vs 0.61 ms for B=64 S=32k head lists).
      {"hsa", Level::Vendor, "cpu", "*", {{"SELECT_WG", 16}, {"TOPK_CHUNKS", 1}},
       "vendor docs: PoCL pthread device; TOPK_CHUNKS: clattn-bench sparse --quick, PoCL 5.0 on the 2-core dev VM, 2026-11-26"},
  };
  return rows;
}
}  // namespace clattn::params
