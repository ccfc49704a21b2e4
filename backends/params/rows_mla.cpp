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
      // 256 work-items (16 heads x 16 lanes), 16-token tiles, 128-bit loads; ~38 KB local memory
      // for a bf16 tile (fits the 48 KB OpenCL minimum of GPUs); 2 groups per CU.
      {"mla_decode", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "portable default (by design; not tuned)"},
      // Generic kernel: 256 threads at <= 128 registers (2 groups per SM by the register file);
      // 18 KB of bf16 latent in flight per group through the register prefetch; split-K
      // thresholds as the generic row. MMA=1: mla_mma_nv.cl where nv_inline_ptx and sm_80+ (4
      // warps, 16-token tiles, 24 KB local, merge fused; docs/mla.md). H100 figures:
      // docs/results-h100.md.
      {"mla_decode", Level::Vendor, "nvidia", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}},
       "by design: CUDA occupancy calculator (sm_90); the MMA tile by docs/mla.md's arithmetic"},
      // 4 x wave64 per group; 64 KB LDS per CU holds one bf16 group plus change; dwordx4 loads;
      // split-K thresholds as the generic row.
      {"mla_decode", Level::Vendor, "amd", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "vendor guide: AMD CDNA3 ISA / tuning guide, LDS and occupancy; not tuned on hardware"},
      // Xe: 256 work-items per group is the common maximum, 64 KB SLM per Xe-core; 16 lanes = one
      // SIMD16 sub-group per query vector (cl_intel_required_subgroup_size offers 8/16/32);
      // split-K thresholds as the generic row.
      {"mla_decode", Level::Vendor, "intel", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}},
       "vendor guide: Intel oneAPI GPU optimization guide, SLM; not tuned on hardware"},
      // PoCL pthread device: a group is one vectorised loop per core; 64 work-items keep the
      // per-barrier work-item loops short; 2 groups per core; small so the CI suite stays fast.
      {"mla_decode", Level::Vendor, "cpu", "*",
       {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 128}, {"MAX_SPLITS", 16}},
       "vendor docs: PoCL pthread device; sized for CI speed"},
      // The same tile as mla_decode: query vectors are (row, head) pairs of one request.
      {"mla_extend", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "portable default (by design, as mla_decode; not tuned)"},
      {"mla_extend", Level::Vendor, "nvidia", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}},
       "by design, as mla_decode"},
      {"mla_extend", Level::Vendor, "amd", "*", {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "vendor guide, as mla_decode; not tuned on hardware"},
      {"mla_extend", Level::Vendor, "intel", "*", {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}},
       "vendor guide, as mla_decode; not tuned on hardware"},
      {"mla_extend", Level::Vendor, "cpu", "*", {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}},
       "vendor docs: PoCL pthread device, as mla_decode; sized for CI speed"},
      // Tuned on the machine itself with the tensor-core kernel (clattn-tune --time-budget 240,
      // docs/tuning.md; the figures: docs/results-h100.md).
      {"mla_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MAX_SPLITS", 128}, {"MIN_CHUNK", 256}, {"MMA", 1}, {"MMA_KEYS", 16}, {"MMA_WARPS", 4}, {"QB", 16}, {"WGS_PER_CU", 2}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // Tuned on the machine itself with the tensor-core kernel (clattn-tune --time-budget 240,
      // docs/tuning.md; the figures: docs/results-h100.md).
      {"mla_extend", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_KEYS", 32}, {"MMA_WARPS", 4}, {"QB", 16}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params
