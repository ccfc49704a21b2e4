// merge parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
//
// MERGE_WG is the work-group size of cl_kernels/merge_state.cl: one group per (token, head)
// row, its work-items striding over head_dim (64..256), each reading one element of every
// part. The op is a small gather (bytes = parts * head_dim * 4 per row), so the size only
// has to cover a head row in one or two strides with whole SIMD units. Only the H100 device
// row is tuned.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_merge() {
  static const std::vector<Row> rows = {
      // 64 work-items: one AMD wavefront or two NVIDIA warps; covers head_dim 64..256 in 1-4 strides.
      {"merge", Level::Generic, "", "*", {{"MERGE_WG", 64}}, "portable default (by design; not tuned)"},
      // 4 warps per row: the split-K pass has few rows (B x Hq) and many parts, so the parts are
      // spread over 4 lane groups of 32 float4 columns (a 64-lane serial form was latency-bound:
      // docs/results-h100.md).
      {"merge", Level::Vendor, "nvidia", "*", {{"MERGE_WG", 128}},
       "clattn-bench decode (split-K merge pass), NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // One wave64 per row.
      {"merge", Level::Vendor, "amd", "*", {{"MERGE_WG", 64}},
       "vendor guide: AMD GCN/CDNA ISA guide, wavefront size 64"},
      // One wave32 per row: RDNA runs wave32 natively, and the OpenCL compiler picks wave32 for compute.
      {"merge", Level::Arch, "rdna", "*", {{"MERGE_WG", 32}},
       "vendor guide: AMD RDNA / RDNA3 ISA reference guide, 'wave32 and wave64'; not tuned on hardware"},
      // Two SIMD16 sub-groups per row; Xe EUs run many small groups.
      {"merge", Level::Vendor, "intel", "*", {{"MERGE_WG", 32}},
       "vendor guide: Intel oneAPI GPU optimization guide"},
      // PoCL runs a work-group as one vectorised loop on a core thread; 16 lanes = one AVX-512 float vector.
      {"merge", Level::Vendor, "cpu", "*", {{"MERGE_WG", 16}}, "vendor docs: PoCL pthread device"},
      // Tuned on the machine itself (clattn-tune --time-budget 300, docs/tuning.md; the table:
      // docs/results-h100.md).
      {"merge", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"MERGE_WG", 128}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params
