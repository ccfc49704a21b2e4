// decode parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
// Keys are the KV dtype class ("f32", "f16", "bf16", "fp8"); "*" rows apply to all.
//
// Kernel tile (cl_kernels/paged_decode.cl; the dispatcher derives TPT and GMAX from these):
//   WG          work-items per work-group (a power of two; a multiple of 32 for the PTX variant)
//   QREGS       register budget per work-item for one operand: q (and the same again for
//               the output accumulator) holds GMAX * elements-per-lane floats <= QREGS. It
//               sets TPT (lanes per token) = GMAX_bucket * head_dim / QREGS, and splits
//               large GQA groups into blocks when a row cannot be spread wider.
//   UNROLL      tokens per slot per tile step (one softmax rescale per tile)
//   LOAD_BYTES  bytes per K/V load (16 = ld.global.v4; lowered automatically for strides)
//   EARLY_V     1: issue the tile's V loads together with its K loads (more bytes in flight)
//   PTX_SHFL    1: prefer the inline-PTX shfl.sync butterfly (NVIDIA variant "nv_ptx_shfl";
//               only used when the device's compiler takes inline PTX)
//   GMAX_CAP    largest query-head block per work-group
// Split-K planner (backends/planner/split_kv.hpp):
//   WGS_PER_CU  work-groups resident per compute unit: CUs x this = one wave; batches that
//               fill it are never split
//   MIN_CHUNK   never split below this many tokens; MAX_SPLITS chunks per request at most
//   DET_CHUNK   deterministic mode's fixed split tile (tokens)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_decode() {
  static const std::vector<Row> rows = {
      {"decode", Level::Generic, "", "*",
       {{"WG", 128}, {"QREGS", 64}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"EARLY_V", 1}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024}},
       "portable defaults: 128 work-items (4 warps / 2 wave64), 16-byte loads, <= 2x64 live floats of q/acc "
       "per work-item, local-memory butterflies; split-K from 4 groups per CU"},
      {"decode", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"QREGS", 64}, {"UNROLL", 4}, {"LOAD_BYTES", 16}, {"EARLY_V", 1}, {"PTX_SHFL", 1},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 128}, {"DET_CHUNK", 1024}},
       "H100 calibration (DEVICE.md): 8 lanes per token with 16-byte loads and 4 tokens per warp step reached 68% "
       "of stream-read vs 40-54% for a warp per token; QREGS 64 gives exactly that for bf16 D=128 GQA-4. "
       "4 blocks of 128 threads at ~128 registers fill an SM's 64K registers (CUDA occupancy calculator, sm_90); "
       "32 KV splits + merge took B=1 S=32768 from 46 GB/s to 1.35 TB/s"},
      {"decode", Level::Vendor, "nvidia", "fp8",
       {{"UNROLL", 4}, {"EARLY_V", 1}},
       "fp8 rows are half the bytes: same tile as bf16 (16 elements per 16-byte load), not tuned yet"},
      {"decode", Level::Vendor, "amd", "*",
       {{"WG", 256}, {"QREGS", 64}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"EARLY_V", 1}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024}},
       "AMD CDNA/RDNA: 4 x wave64 per group (one per SIMD of a CU), 128 VGPRs per lane keeps 4 waves per SIMD "
       "(AMD Instinct MI200/MI300 ISA and CDNA3 tuning guide, occupancy tables); dwordx4 global loads; "
       "not tuned on hardware"},
      {"decode", Level::Vendor, "intel", "*",
       {{"WG", 128}, {"QREGS", 32}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"EARLY_V", 1}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024}},
       "Intel Xe: 128 GRF x 32 bytes per EU thread at SIMD16 leaves ~48 floats per lane for q/acc after "
       "addressing (oneAPI GPU optimization guide, GRF and occupancy); 16-byte block loads; not tuned on hardware"},
      {"decode", Level::Vendor, "cpu", "*",
       {{"WG", 32}, {"QREGS", 512}, {"UNROLL", 4}, {"LOAD_BYTES", 16}, {"EARLY_V", 1}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 128}, {"MAX_SPLITS", 32}, {"DET_CHUNK", 1024}},
       "PoCL pthread device: a work-group is one loop on one core thread vectorised over work-items, so a token "
       "per work-item (TPT 1, no butterfly barriers) up to 512 floats of q per work-item; 2 groups per core "
       "(PoCL docs; measured with clattn-bench decode --quick on the CI host)"},
  };
  return rows;
}
}  // namespace clattn::params
