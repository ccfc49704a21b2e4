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
      {"merge", Level::Vendor, "nvidia", "*", {{"MERGE_WG", 64}},
       "2 warps per row; rows are independent, so many small blocks keep the SMs busy (CUDA Best Practices, "
       "execution configuration)"},
      {"merge", Level::Vendor, "amd", "*", {{"MERGE_WG", 64}},
       "one wave64 per row (AMD GCN/CDNA ISA guide, wavefront size 64)"},
      {"merge", Level::Vendor, "intel", "*", {{"MERGE_WG", 32}},
       "two SIMD16 sub-groups per row; Xe EUs run many small groups (Intel oneAPI GPU optimization guide)"},
      {"merge", Level::Vendor, "cpu", "*", {{"MERGE_WG", 16}},
       "PoCL runs a work-group as one vectorised loop on a core thread; 16 lanes = one AVX-512 float vector "
       "(PoCL pthread device docs)"},
  };
  return rows;
}
}  // namespace clattn::params
