// stream_read: the streaming-read probe that gives benchmarks their bandwidth limit.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_stream_read() {
  static const std::vector<Row> rows = {
      {"stream_read", Level::Generic, "", "*", {{"WG", 256}, {"WGS_PER_CU", 8}, {"CONTIGUOUS", 0}},
       "grid-stride float4 read, 8 work-groups per compute unit (device notes' clbw probe)"},
      {"stream_read", Level::Vendor, "nvidia", "*", {{"WG", 256}, {"WGS_PER_CU", 8}},
       "8 x 256-thread blocks per SM keeps 2048 threads resident (CUDA occupancy guide, sm_80/sm_90)"},
      {"stream_read", Level::Vendor, "amd", "*", {{"WG", 256}, {"WGS_PER_CU", 8}},
       "4 SIMD x wave64 per CU; 8 x 256 work-items = 32 waves per CU (AMD GCN/CDNA occupancy tables)"},
      {"stream_read", Level::Vendor, "intel", "*", {{"WG", 256}, {"WGS_PER_CU", 4}},
       "an Xe core (8 EUs x 8 threads x SIMD8..32) holds 4 x 256 work-items (Intel oneAPI GPU optimization guide)"},
      {"stream_read", Level::Vendor, "cpu", "*", {{"WG", 64}, {"WGS_PER_CU", 4}, {"CONTIGUOUS", 1}},
       "PoCL runs a work-group per core thread; a few per core hide its scheduler (PoCL pthread device docs); "
       "CPUs stream contiguous blocks per work-item (grid-stride measured 2-4 GB/s vs 37 GB/s copy on a 2-core VM)"},
  };
  return rows;
}
}  // namespace clattn::params
