// stream_read: the streaming-read probe that gives benchmarks their bandwidth limit.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_stream_read() {
  static const std::vector<Row> rows = {
      // Grid-stride float4 read, 8 work-groups per compute unit.
      {"stream_read", Level::Generic, "", "*", {{"WG", 256}, {"WGS_PER_CU", 8}, {"CONTIGUOUS", 0}},
       "the shared DEVICE notes' clbw probe"},
      // 8 x 256-thread blocks per SM keep 2048 threads resident.
      {"stream_read", Level::Vendor, "nvidia", "*", {{"WG", 256}, {"WGS_PER_CU", 8}},
       "vendor guide: CUDA occupancy guide, sm_80/sm_90"},
      // 4 SIMD x wave64 per CU; 8 x 256 work-items = 32 waves per CU.
      {"stream_read", Level::Vendor, "amd", "*", {{"WG", 256}, {"WGS_PER_CU", 8}},
       "vendor guide: AMD GCN/CDNA occupancy tables"},
      // An Xe core (8 EUs x 8 threads x SIMD8..32) holds 4 x 256 work-items.
      {"stream_read", Level::Vendor, "intel", "*", {{"WG", 256}, {"WGS_PER_CU", 4}},
       "vendor guide: Intel oneAPI GPU optimization guide"},
      // PoCL runs a work-group per core thread; a few per core hide its scheduler. CPUs stream
      // contiguous blocks per work-item far faster than a grid-stride read (docs/results-h100.md).
      {"stream_read", Level::Vendor, "cpu", "*", {{"WG", 64}, {"WGS_PER_CU", 4}, {"CONTIGUOUS", 1}},
       "vendor docs: PoCL pthread device; CONTIGUOUS: clattn-bench limits, PoCL on a 2-core VM, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params
