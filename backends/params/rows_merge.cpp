// merge parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
//
// MERGE_WG is the work-group size of cl_kernels/merge_state.cl: one group per (token, head)
// row, its work-items striding over head_dim (64..256), each reading one element of every
// part. The op is a small gather (bytes = parts * head_dim * 4 per row), so the size only
// has to cover a head row in one or two strides with whole SIMD units. Not tuned yet.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_merge() {
  static const std::vector<Row> rows = {
      {"merge", Level::Generic, "", "*", {{"MERGE_WG", 64}},
       "64 work-items: one AMD wavefront or two NVIDIA warps; covers head_dim 64..256 in 1-4 strides"},
      {"merge", Level::Vendor, "nvidia", "*", {{"MERGE_WG", 128}},
       "4 warps per row: the split-K pass has few rows (B x Hq) and many parts, so the parts are spread over "
       "4 lane groups of 32 float4 columns (H100, 2026-11-22: the 64-lane serial form took 18-100 us for "
       "32-128 parts)"},
      {"merge", Level::Vendor, "amd", "*", {{"MERGE_WG", 64}},
       "one wave64 per row (AMD GCN/CDNA ISA guide, wavefront size 64)"},
      {"merge", Level::Arch, "rdna", "*", {{"MERGE_WG", 32}},
       "one wave32 per row: RDNA runs wave32 natively (AMD RDNA / RDNA3 ISA reference guide, 'wave32 and "
       "wave64'; the OpenCL compiler picks wave32 for compute); not tuned on hardware"},
      {"merge", Level::Vendor, "intel", "*", {{"MERGE_WG", 32}},
       "two SIMD16 sub-groups per row; Xe EUs run many small groups (Intel oneAPI GPU optimization guide)"},
      {"merge", Level::Vendor, "cpu", "*", {{"MERGE_WG", 16}},
       "PoCL runs a work-group as one vectorised loop on a core thread; 16 lanes = one AVX-512 float vector "
       "(PoCL pthread device docs)"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"merge", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"MERGE_WG", 128}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 199.9 GB/s = 7% of stream-read 2993 GB/s; vendor default 199.9, generic 157.4 (geomean over T=1 states=128 H=32 D=128 f32; T=256 states=8 H=32 D=128 f32); 5 candidates, 0 rejected as wrong"},
  };
  return rows;
}
}  // namespace clattn::params
