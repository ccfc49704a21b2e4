// DSA indexer parameters (op "dsa_index"): generic and cpu rows. Each says where its numbers
// come from. Key "*" (every key dtype and index dim).
//
// Scoring kernel (cl_kernels/dsa_index.cl dsa_index_scores; backends/ops/dsa_index.cpp):
//   TT          tokens per work-group (one work entry)
//   TM, TH      the work-item's micro-tile: TM tokens x TH heads of S = K Q^T in registers
//               (work-group = TT / TM x HP / TH work-items)
//   HP          heads per pass (Hi > HP: several passes over the tile; lowered to the head
//               count rounded up to a power of two)
//   DK          index dims per staged chunk (lowered until it divides the index dim)
//   local = 4 DK (TT + HP) + 4 TT HP / TH bytes (18 KB at the generic row)
// Top-k kernel (dsa_index_topk, cl_kernels/topk.clh):
//   TOPK_WG     work-items per request (a power of two): the radix select's histogram passes
//               and the ordered compaction stride over the request's scores by this many
//   TOPK_CHUNKS the compaction's form (topk.clh): 0 blocks (GPUs), 1 contiguous chunks per
//               work-item (CPUs; PoCL B=4 S=4096: top-k kernel 218 vs 328 us)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_dsa_index() {
  static const std::vector<Row> rows = {
      // 128 work-items (4 warps / 2 wave64): 16 token columns x 8 head rows of 4 x 8 micro-tiles,
      // 64 heads (DeepSeek-V3.2's index heads) in one pass, 32-dim chunks; per dim a work-item
      // reads 4 keys and 8 (broadcast) q values for 32 FMAs. 18 KB of local memory, inside the
      // 32 KB floor of OpenCL 1.2's full profile. Top-k: 256 work-items, one request each.
      {"dsa_index", Level::Generic, "", "*",
       {{"TT", 64}, {"TM", 4}, {"TH", 8}, {"HP", 64}, {"DK", 32}, {"TOPK_WG", 256}, {"TOPK_CHUNKS", 0}},
       "portable default (by design; not tuned)"},
      // PoCL pthread device: a work-group is one vectorised loop per core and every barrier
      // splits it, so few work-items with big micro-tiles (4 x 4 of 16 tokens x 16 heads: 16
      // work-items) and a 64-wide top-k group.
      {"dsa_index", Level::Vendor, "cpu", "*",
       {{"TT", 64}, {"TM", 16}, {"TH", 16}, {"HP", 64}, {"DK", 32}, {"TOPK_WG", 64}, {"TOPK_CHUNKS", 1}},
       "by design for PoCL's pthread device (docs/sparse.md); not tuned"},
      // A sweep of 8 tiles (`clattn-bench sparse --dsa --index-param ...`, B=64 S=32768 Hi=64
      // Di=128 bf16): 2.59 ms at TT 128 x TM 4 x TH 8 against 2.87 ms at the generic row; every
      // tile sat at 11-13 TFLOP/s (docs/results-h100.md), the FP32 scoring is not tile-bound.
      {"dsa_index", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"TT", 128}, {"TM", 4}, {"TH", 8}, {"HP", 64}, {"DK", 32}, {"TOPK_WG", 256}},
       "clattn-bench sparse --dsa --index-param sweep, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-26"},
  };
  return rows;
}
}  // namespace clattn::params
