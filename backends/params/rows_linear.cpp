// linear attention parameters (GDN / simple GLA, cl_kernels/linear_common.clh). Each row
// says where its numbers come from. The nvidia linear_decode row is an H100 sweep; the
// others are not tuned: `clattn-bench linear` gives the numbers to tune against.
//
// linear_decode: (DEC_DVT / DEC_VEC) x DEC_ROWS work-items per (request, v-head, Dv slice of
//   DEC_DVT columns); a work-item holds DEC_VEC adjacent columns (one 4/8/16-byte load per
//   row, DEC_VEC in {1, 2, 4}, default 1) at Dk / DEC_ROWS rows in registers. DEC_DVT is the
//   width of one coalesced row segment; DEC_ROWS splits the key dim. The host halves the
//   slice, then the row groups, when the device or the compiled kernel allows fewer
//   work-items.
// linear_prefill: PF_C tokens per chunk, PF_DVT state columns per work-group (more slices
//   = more work-groups for small batches, but the C x C products are repeated per slice),
//   PF_WG work-items. The host shrinks PF_DVT, then PF_C, to fit local memory.
//   Tensor-core prefill (cl_kernels/linear_prefill_mma_nv.cl, where variant_available("nv_mma_sync")
//   and q/k/v are f16/bf16 with Dk <= 128): PF_MMA 1 = prefer it; PF_MMA_C tokens per chunk,
//   PF_MMA_DVT state columns per work-group (16 per warp), PF_MMA_SPLIT (default 1) state operand
//   as hi + lo parts. Its own names, so rows tuned for the f32 kernel do not steer it.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_linear() {
  static const std::vector<Row> rows = {
      {"linear_decode", Level::Generic, "", "*", {{"DEC_DVT", 32}, {"DEC_VEC", 1}, {"DEC_ROWS", 4}},
       "128 work-items: 32 consecutive f32 state columns = one 128-byte segment per row, 4 row groups "
       "(32 state registers per work-item at Dk=128); below every listed driver's work-group limit; scalar "
       "loads need no vector alignment. On an H100 (clattn-bench linear, B=256 H=16 Dk=Dv=128 bf16, f32 state, "
       "2026-11-22) this shape ran at 85/84 % of stream-read (gdn/gla), vs 90/91 for the nvidia row"},
      {"linear_decode", Level::Vendor, "nvidia", "*", {{"DEC_DVT", 128}, {"DEC_VEC", 4}, {"DEC_ROWS", 8}},
       "measured with clattn-bench linear on an H100 (NVIDIA OpenCL, driver 580, B=256 H=16 Dk=Dv=128 bf16 q/k/v/o, "
       "f32 state, 2026-11-22): sweep of 16 (DVT, VEC, ROWS) points, gdn/gla % of stream-read: 128/4/8 90/91 "
       "(0.199 ms; 89-91 in three more processes), 64/4/16 89/91, 128/2/8 88/91, 64/4/8 88/88, 128/4/16 87/87, "
       "64/1/1 (one column per work-item) 87/87, 32/1/4 85/84, 128/4/32 69/82. 256 work-items: a warp reads one "
       "whole 512-byte state row with float4 loads, 16 rows x 4 columns = 64 state registers per work-item, one "
       "work-group per (request, head) = 64 KiB of state"},
      {"linear_decode", Level::Vendor, "amd", "*", {{"DEC_DVT", 64}, {"DEC_ROWS", 4}},
       "wave64 spans one row segment of 64 columns; 4 waves per work-group, one per SIMD of a CU "
       "(AMD GCN/CDNA ISA guide, wavefront size 64)"},
      {"linear_decode", Level::Arch, "rdna", "*", {{"DEC_DVT", 32}, {"DEC_ROWS", 4}},
       "wave32 spans one 128-byte row segment of 32 f32 columns; 4 waves per work-group (AMD RDNA3 ISA reference "
       "guide, wave32 native; 128-byte cache lines); not tuned on hardware"},
      {"linear_decode", Level::Vendor, "intel", "*", {{"DEC_DVT", 16}, {"DEC_ROWS", 8}},
       "SIMD16 spans 16 columns (64 bytes); 8 row groups = 128 work-items "
       "(Intel oneAPI GPU optimization guide, sub-groups and thread mapping)"},
      {"linear_decode", Level::Vendor, "cpu", "*", {{"DEC_DVT", 16}, {"DEC_ROWS", 4}},
       "PoCL vectorises across dim 0: 16 f32 = one AVX-512 vector; 4 row groups keep the per-group barrier "
       "loops short (PoCL pthread device docs)"},

      {"linear_prefill", Level::Generic, "", "*", {{"PF_C", 64}, {"PF_DVT", 16}, {"PF_WG", 128}, {"PF_DKT", 32}},
       "chunk 64 is FLA's default for chunk_gated_delta_rule / chunk_simple_gla (fla/ops/common/chunk_*.py "
       "BT=64); 16 state columns per work-group keeps local memory (S 128x16 + A 64x65 + D 64x16 + K/Q tiles "
       "2 x 64x33 f32 = 46 KiB) under 48 KiB at Dk=128 (the host halves the slice at Dk=256); K/Q tiles of 32 "
       "dims = 64-byte bf16 row segments; 128 work-items = 4 warps / 2 wave64"},
      {"linear_prefill", Level::Vendor, "nvidia", "*",
       {{"PF_C", 32}, {"PF_DVT", 32}, {"PF_WG", 256}, {"PF_MMA", 1}, {"PF_MMA_C", 32}, {"PF_MMA_DVT", 64}},
       "measured with clattn-bench linear on an H100 (NVIDIA OpenCL, driver 580, B=8x4096 H=16 Dk=Dv=128 bf16): "
       "C=32/DVT=32 22.1 ms vs C=64/DVT=16 51.4 ms (GDN), 14.3 vs 29.9 ms (GLA): half the chunk halves the "
       "repeated C x C work and the sequential substitution; 48 KiB shared memory per block without opt-in "
       "(CUDA programming guide, cc 9.0); 8 warps per block. Hand sweep of 5 points, not a tuner run. "
       "PF_MMA*: tensor-core prefill, 4 warps x 16 state columns (64 f32 state registers per work-item at "
       "Dk=128), chunk 32 so that its tiles (43 KiB at Dk=128) fit 48 KiB; by arithmetic, not measured"},
      {"linear_prefill", Level::Vendor, "amd", "*", {{"PF_C", 64}, {"PF_DVT", 16}, {"PF_WG", 256}},
       "chunk 64 (FLA default); 64 KiB LDS per CU (AMD CDNA ISA guide); 4 x wave64"},
      {"linear_prefill", Level::Vendor, "intel", "*", {{"PF_C", 64}, {"PF_DVT", 16}, {"PF_WG", 128}},
       "chunk 64 (FLA default); 64 KiB SLM per Xe core (Intel oneAPI GPU optimization guide); 8 x SIMD16"},
      {"linear_prefill", Level::Vendor, "cpu", "*", {{"PF_C", 32}, {"PF_DVT", 16}, {"PF_WG", 16}},
       "PoCL runs a work-group as loops on one core: small groups and a 32-token chunk keep the C x C "
       "products and the sequential substitution short; 16 f32 = one AVX-512 vector (PoCL pthread docs)"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"linear_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"DEC_DVT", 64}, {"DEC_ROWS", 8}, {"DEC_VEC", 4}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 2699 GB/s = 90% of stream-read 2993 GB/s; vendor default 2634, generic 2545 (geomean over gdn B=256 H=16 Dk=128 Dv=128 bf16, f32 state; gla B=256 H=16 Dk=128 Dv=128 bf16, f32 state); 11 candidates, 0 rejected as wrong"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"linear_prefill", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"PF_C", 32}, {"PF_DKT", 32}, {"PF_DVT", 32}, {"PF_MMA", 1}, {"PF_MMA_C", 32}, {"PF_MMA_DVT", 64}, {"PF_WG", 128}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 240): 24.2 TFLOP/s; vendor default 23.64, generic 23.54 (geomean over gdn B=4 L=2048 H=16 Dk=128 Dv=128 bf16; gla B=4 L=2048 H=16 Dk=128 Dv=128 bf16); 16 candidates, 0 rejected as wrong"},
  };
  return rows;
}
}  // namespace clattn::params
