// MLA parameters (ops "mla_decode", "mla_extend"): generic, vendor rows. Each says where its
// numbers come from. Keys: "*" (all latent dtypes).
//
// Kernel tile (cl_kernels/mla.cl): a work-group = QB query vectors (head x row) of one
// request x LANES lanes each; LANES is also the tile (tokens per online-softmax step).
//   QB          query vectors per work-group (decode: min(QB, H) rounded to a power of two)
//   LANES       lanes per query vector = tokens per tile (4, 8 or 16; must divide the row's
//               32-bit words: fp8 kpe has 16 words); each lane holds 512/LANES accumulators
//               and 576/LANES q values in registers
//   LOAD_BYTES  latent load width (16 = one 128-bit load; lowered automatically for strides)
// Split-K (decode only; backends/planner/split_kv.hpp):
//   WGS_PER_CU  work-groups resident per compute unit (one wave = CUs x this)
//   MIN_CHUNK   never split below this many tokens; MAX_SPLITS chunks per request at most
// Local memory per group: LANES x 576 x dtype bytes (latent tile) + QB x LANES x (LANES+3) x 4.
// Tensor-core kernel (cl_kernels/mla_mma_nv.cl, where variant_available("nv_mma_sync")):
//   MMA         1: prefer it (16 query vectors per group = one mma m-tile)
//   MMA_WARPS   warps per group (2 or 4): warp w owns 512 / MMA_WARPS latent dims of S and the
//               same output columns of O (2 warps: 128 accumulator registers per lane)
//   MMA_KEYS    tokens per tile (16 or 32); local = KEYS x 1024 + MMA_WARPS x KEYS x 128 bytes;
//               the latent of the next tile sits in registers (36 per lane per 16 tokens at 4
//               warps), so 32 costs 72 more registers
//   FUSE_MERGE  decode split-K: 1 = the group that finishes a request's last part merges the
//               parts (no merge pass; deterministic: parts summed in order), 0 = merge pass
//   FUSE_MAX_PARTS  fuse only when no request has more parts than this (the merging group
//               reads all of them alone; B=1 at 128 parts is faster with the merge pass)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_mla() {
  static const std::vector<Row> rows = {
      {"mla_decode", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "portable default: 256 work-items (16 heads x 16 lanes), 16-token tiles, 128-bit loads; ~38 KB local "
       "memory for a bf16 tile (fits the 48 KB OpenCL minimum of GPUs); 2 groups per CU; not tuned"},
      {"mla_decode", Level::Vendor, "nvidia", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}},
       "H100 by design, not measured yet: 256 threads at <= 128 registers (2 groups per SM by the register file, "
       "CUDA occupancy calculator sm_90); 18 KB of bf16 latent in flight per group through the register "
       "prefetch; 32 splits + merge took GQA decode at B=1 S=32k from 46 GB/s to 1.35 TB/s (DEVICE.md). "
       "MMA=1: mla_mma_nv.cl where nv_inline_ptx and sm_80+ (4 warps, 16-token tiles, 24 KB local, merge fused; "
       "docs/mla.md; H100 2026-11-22, fifth session: H=16 0.125 ms = 82% of stream-read, H=128 128 TFLOP/s)"},
      {"mla_decode", Level::Vendor, "amd", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "4 x wave64 per group, 64 KB LDS per CU holds one bf16 group plus change (AMD CDNA3 ISA / tuning guide, "
       "LDS and occupancy); dwordx4 loads; split-K thresholds as the generic row; not tuned on hardware"},
      {"mla_decode", Level::Vendor, "intel", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "Xe: 256 work-items per group is the common maximum, 64 KB SLM per Xe-core (oneAPI GPU optimization guide, "
       "SLM); 16 lanes = one SIMD16 sub-group per query vector (cl_intel_required_subgroup_size offers 8/16/32); "
       "split-K thresholds as the generic row; not tuned on hardware"},
      {"mla_decode", Level::Vendor, "cpu", "*",
       {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 128}, {"MAX_SPLITS", 16}},
       "PoCL pthread device: a group is one vectorised loop per core; 64 work-items keep the per-barrier "
       "work-item loops short (PoCL docs); 2 groups per core; chosen so the CI suite stays fast"},
      {"mla_extend", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "same tile as mla_decode: query vectors are (row, head) pairs of one request"},
      {"mla_extend", Level::Vendor, "nvidia", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}},
       "as mla_decode (by design, not measured)"},
      {"mla_extend", Level::Vendor, "amd", "*", {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "as mla_decode (vendor docs, not tuned)"},
      {"mla_extend", Level::Vendor, "intel", "*", {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "as mla_decode (vendor docs, not tuned)"},
      {"mla_extend", Level::Vendor, "cpu", "*", {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}},
       "as mla_decode's cpu row (PoCL docs; CI speed)"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"mla_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MAX_SPLITS", 128}, {"MIN_CHUNK", 256}, {"MMA", 1}, {"MMA_KEYS", 16}, {"MMA_WARPS", 4}, {"QB", 16}, {"WGS_PER_CU", 2}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 240): 604.2 GB/s = 20% of stream-read 2982 GB/s; vendor default 584.7, generic 581.4 (geomean over B=64 S=4096 H=16 P=64 bf16; B=1 S=32768 H=16 P=64 bf16; B=64 S=4096 H=128 P=64 bf16); 18 candidates, 0 rejected as wrong"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"mla_extend", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_KEYS", 32}, {"MMA_WARPS", 4}, {"QB", 16}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 240): 84.05 TFLOP/s; vendor default 77.42, generic 77.39 (geomean over B=4 qo=512 kv=2048 H=16 P=64 bf16 causal); 13 candidates, 0 rejected as wrong"},
  };
  return rows;
}
}  // namespace clattn::params
