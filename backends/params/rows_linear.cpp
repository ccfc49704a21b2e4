// linear attention parameters (GDN / simple GLA, cl_kernels/linear_common.clh). Each row
// says where its numbers come from: the nvidia rows from H100 sweeps with `clattn-bench
// linear`, the device rows from clattn-tune, the other vendors' rows from vendor guides.
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
// CPU variant (cl_kernels/linear_cpu.clh, both ops): CPU_KERNEL 1 = use it; VW floats per
//   vector (0 = the device's preferred width); one work-item per (request, v-head, Dv slice).
//   linear_decode: DEC_CPU_DVT state columns per work-item. linear_prefill: PF_CPU_C tokens per
//   chunk, PF_CPU_DVT columns per work-item, register tiles of PF_CPU_MR rows (0 = by vector
//   width) x PF_CPU_MV vectors. The host halves the slices for small batches and the prefill's
//   slice, then chunk, to fit local memory. Own names again, so the portable rows do not steer it.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_linear() {
  static const std::vector<Row> rows = {
      // 128 work-items: 32 consecutive f32 state columns = one 128-byte segment per row, 4 row
      // groups (32 state registers per work-item at Dk=128); below every listed driver's
      // work-group limit; scalar loads need no vector alignment.
      // CPU_KERNEL 0 here (the portable kernel) also makes the generic parameters, clattn-tune's
      // correctness oracle, run the portable kernel on CPU devices.
      {"linear_decode", Level::Generic, "", "*", {{"DEC_DVT", 32}, {"DEC_VEC", 1}, {"DEC_ROWS", 4}, {"CPU_KERNEL", 0}},
       "portable default (by design; not tuned)"},
      // 256 work-items: a warp reads one whole 512-byte state row with float4 loads, 16 rows x 4
      // columns = 64 state registers per work-item, one work-group per (request, head) = 64 KiB
      // of state. The sweep of 16 (DVT, VEC, ROWS) points: docs/results-h100.md.
      {"linear_decode", Level::Vendor, "nvidia", "*", {{"DEC_DVT", 128}, {"DEC_VEC", 4}, {"DEC_ROWS", 8}},
       "clattn-bench linear, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // wave64 spans one row segment of 64 columns; 4 waves per work-group, one per SIMD of a CU.
      {"linear_decode", Level::Vendor, "amd", "*", {{"DEC_DVT", 64}, {"DEC_ROWS", 4}},
       "vendor guide: AMD GCN/CDNA ISA guide, wavefront size 64"},
      // wave32 spans one 128-byte row segment of 32 f32 columns; 8 waves per work-group (Dk / 8
      // state rows a work-item: 4 row groups spill at Dk = 256 on gfx1100, clattn-kernel-report).
      {"linear_decode", Level::Arch, "rdna", "*", {{"DEC_DVT", 32}, {"DEC_ROWS", 8}},
       "vendor guide: AMD RDNA3 ISA reference guide, wave32 native, 128-byte cache lines; not tuned on hardware"},
      // SIMD16 spans 16 columns (64 bytes); 8 row groups = 128 work-items.
      {"linear_decode", Level::Vendor, "intel", "*", {{"DEC_DVT", 16}, {"DEC_ROWS", 8}},
       "vendor guide: Intel oneAPI GPU optimization guide, sub-groups and thread mapping"},
      // CPU devices: the cpu variant (linear_cpu.clh), one work-item per (request, v-head, up to
      // 256 state columns = whole rows at Dv <= 256: one contiguous stream per head; the host
      // halves it for small batches) with vectors of the device's preferred width (VW 0).
      // The portable tile behind it: PoCL vectorises across dim 0, 16 f32 = one AVX-512
      // vector; 4 row groups keep the per-group barrier loops short.
      {"linear_decode", Level::Vendor, "cpu", "*",
       {{"CPU_KERNEL", 1}, {"VW", 0}, {"DEC_CPU_DVT", 256}, {"DEC_DVT", 16}, {"DEC_ROWS", 4}},
       "vendor docs: PoCL pthread device; DEC_CPU_DVT: clattn-bench --device cpu linear -B 64/256 -L 0 -H 16 "
       "(Dk = Dv = 128 and 256), 2-core AMD EPYC VM, PoCL 3.1, 2026-11-26 (whole rows 10-20 % faster than 64)"},

      // Chunk 64 is FLA's default (BT=64); 16 state columns per work-group keep local memory
      // (S 128x16 + A 64x65 + D 64x16 + K/Q tiles 2 x 64x33 f32 = 46 KiB) under 48 KiB at Dk=128
      // (the host halves the slice at Dk=256); K/Q tiles of 32 dims = 64-byte bf16 row segments;
      // 128 work-items = 4 warps / 2 wave64.
      {"linear_prefill", Level::Generic, "", "*",
       {{"PF_C", 64}, {"PF_DVT", 16}, {"PF_WG", 128}, {"PF_DKT", 32}, {"CPU_KERNEL", 0}},
       "FLA chunk_gated_delta_rule / chunk_simple_gla (fla/ops/common/chunk_*.py, BT=64); rest by design"},
      // f32 kernel: half the chunk halves the repeated C x C work and the sequential
      // substitution; 48 KiB shared memory per block without opt-in (CUDA programming guide,
      // cc 9.0); 8 warps per block. PF_MMA*: tensor-core prefill, 4 warps x 16 state columns
      // (64 f32 state registers per work-item at Dk=128), chunk 32 so that its tiles (43 KiB at
      // Dk=128) fit 48 KiB. The hand sweep of 5 points: docs/results-h100.md.
      {"linear_prefill", Level::Vendor, "nvidia", "*",
       {{"PF_C", 32}, {"PF_DVT", 32}, {"PF_WG", 256}, {"PF_MMA", 1}, {"PF_MMA_C", 32}, {"PF_MMA_DVT", 64}},
       "clattn-bench linear, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; PF_MMA_*: by design (local-memory fit)"},
      // Chunk 64 (FLA default); 64 KiB LDS per CU; 4 x wave64.
      {"linear_prefill", Level::Vendor, "amd", "*", {{"PF_C", 64}, {"PF_DVT", 16}, {"PF_WG", 256}},
       "vendor guide: AMD CDNA ISA guide, LDS size; chunk: FLA default"},
      // RDNA: chunk 32 and K / Q tiles of 16 dims (chunk 64 and the unrolled tile loop of 32
      // spill on gfx1100's 128 VGPRs, clattn-kernel-report).
      {"linear_prefill", Level::Arch, "rdna", "*", {{"PF_C", 32}, {"PF_DKT", 16}},
       "register budget from clattn-kernel-report (clang-15 gfx1100, 2026-11-26); not tuned on hardware"},
      // Chunk 32 (as the nvidia row); 64 KiB SLM per Xe core; 16 x SIMD16: each work-item keeps 4
      // of the chunk's C x C entries of K K^T and Q K^T in registers (PF_E), K / Q tiles of 16
      // dims: chunk 64 (16 or 32 entries) spills 2-4 KB per thread, 32-dim tiles 1 KB at f32
      // Dk = 64 (clattn-kernel-report, tgllp / pvc).
      {"linear_prefill", Level::Vendor, "intel", "*", {{"PF_C", 32}, {"PF_DVT", 16}, {"PF_WG", 256}, {"PF_DKT", 16}},
       "vendor guide: Intel oneAPI GPU optimization guide, SLM; PF_C / PF_WG: register budget from "
       "clattn-kernel-report (ocloc 22.43 tgllp / pvc builds, 2026-11-26); not tuned on hardware"},
      // CPU devices: the cpu variant (linear_cpu.clh), one work-item per (request, v-head, up to
      // 128 state columns: C x C work not repeated across slices at Dv = 128), chunks of 16
      // tokens, register tiles of MR x 2 vectors (MR 0: 8 with 16-wide vectors, 4 with
      // narrower). The portable tile behind it: PoCL runs a work-group as loops on one core,
      // small groups and a 32-token chunk keep the C x C products and the sequential
      // substitution short; 16 f32 = one AVX-512 vector.
      {"linear_prefill", Level::Vendor, "cpu", "*",
       {{"CPU_KERNEL", 1}, {"VW", 0}, {"PF_CPU_C", 16}, {"PF_CPU_DVT", 128}, {"PF_CPU_MR", 0}, {"PF_CPU_MV", 2},
        {"PF_C", 32}, {"PF_DVT", 16}, {"PF_WG", 16}},
       "vendor docs: PoCL pthread device; PF_CPU_*: clattn-bench --device cpu linear -B 2 -L 1024 -H 8 and "
       "-B 8 -L 512 -H 16 (Dk = Dv = 128), 2-core AMD EPYC VM, PoCL 3.1, 2026-11-26"},
      // Tuned on the machine itself (clattn-tune --time-budget 300, docs/tuning.md; the table:
      // docs/results-h100.md).
      {"linear_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"DEC_DVT", 64}, {"DEC_ROWS", 8}, {"DEC_VEC", 4}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // Tuned on the machine itself with the tensor-core kernel (clattn-tune --time-budget 240,
      // docs/tuning.md; the figures: docs/results-h100.md). Its axes are the f32 kernel's.
      {"linear_prefill", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"PF_C", 32}, {"PF_DKT", 32}, {"PF_DVT", 32}, {"PF_MMA", 1}, {"PF_MMA_C", 32}, {"PF_MMA_DVT", 64}, {"PF_WG", 128}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params
