// extend / prefill parameters: generic, vendor and device rows. Each says where its numbers
// come from. Keys: "d128" (head_dim <= 128), "d256" (192, 256); "*" rows apply to both.
//
// Portable kernel (variant "generic", cl_kernels/extend.cl):
//   WG    work-items per group
//   ROWS  packed query rows (tokens x GQA group) per group; WG / ROWS lanes share a row
//   KEYS  keys per step; local memory = (ROWS*D + KEYS*(D+1) + ROWS*KEYS) floats + KEYS
//         longs (the dispatcher halves KEYS, then ROWS, while it exceeds the device's)
// Tensor-core kernel (variant "nv_mma_sync", cl_kernels/extend_mma_nv.cl; the files of both
// tensor-core kernels are listed in cl_kernels/extend_defs_nv.clh):
//   MMA        1: prefer the tensor-core kernels where variant_available() says the device
//              runs them (NVIDIA inline PTX, compute capability >= 8.0), else generic (logged)
//   MMA_WARPS  warps per group, 16 packed query rows each (FlashAttention-2 layout)
//   MMA_KEYS   keys per tile (32, 64 or 128); local memory = K tile (KEYS x D halves, rows
//              padded for D = 80) + transposed V tile (D x KEYS halves) + KEYS row offsets
//              (halved while it exceeds the device's local memory; below 32 -> generic)
//   MMA_ASYNC  1: 16-bit K and V tiles by cp.async into two stage buffers (row-major V, P V's
//              B fragments by ldmatrix.trans; twice the tile memory, so 32 keys at D = 128
//              and register staging at D >= 192); one barrier per tile, no staging registers
// Hopper warpgroup-MMA kernel (variant "nv_wgmma", cl_kernels/extend_wgmma_nv.cl; compute
// capability 9.x, 16-bit KV, MMA_ASYNC, head dims 64 and 128):
//   MMA_WGMMA  1: prefer it where variant_available() says the device has sm_90a (the PTX is
//              rebuilt for sm_90a, runtime/ptx_retarget.hpp); nv_mma_sync stays the fallback
//   MMA_WARPS  4, 8 or 12 for this kernel (12 = three warpgroups, 192 rows per group,
//              registers capped at 168 by PTX .maxnreg so that 384 work-items fit)
//   MMA_TMA    1: K and V by Hopper TMA tensor copies (maps built on the device,
//              tma_maps_nv.cl) where every box of 16 keys stays in a page (page size and
//              start offsets multiples of 16; ragged KV always), else cp.async
//   MMA_PINGPONG 1 (TMA): the warpgroups take turns to issue their wgmma, so one warpgroup's
//              softmax runs beside another's MMA (FlashAttention-3's warp scheduling)
//   MMA_TMA_PAGES (TMA) page ids of a group's key range kept in local memory (default 1024,
//              4 KB); longer ranges read the page table at each copy
// H100 figures of every variant and of the alternatives behind these choices:
// docs/results-h100.md.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_extend() {
  static const std::vector<Row> rows = {
      // 128 work-items (4 warps / 2 wave64), 16 rows x 8 lanes, 32-key steps: 27 KB of local
      // memory at D=128, inside OpenCL's 32 KB minimum. MMA_WARPS / MMA_KEYS are read only
      // where MMA=1 (the nvidia row).
      {"extend", Level::Generic, "", "*",
       {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}, {"MMA_WARPS", 4}, {"MMA_KEYS", 64}},
       "portable default (by design; not tuned)"},
      // 16-key steps keep D=256 at 34 KB of local memory (48 KB on NVIDIA, 64 KB on AMD/Intel).
      {"extend", Level::Generic, "", "d256", {{"KEYS", 16}, {"MMA_KEYS", 32}},
       "portable default (by design; not tuned)"},
      // nv_mma_sync: FlashAttention-2 (Dao 2023) layout, 8 warps x 16 rows, mma.sync m16n8k16
      // (PTX ISA, warp-level matrix fragments). 16-bit KV by cp.async: two 32-key K and V
      // stages, 33 KB at D=128 within the 48 KB OpenCL local limit (DEVICE.md); fp8 KV stages
      // 64-key K and transposed-V tiles through registers (33 KB). Generic fallback: 32 rows x
      // 4 lanes, 37 KB.
      {"extend", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 1}, {"MMA_WARPS", 8}, {"MMA_KEYS", 64}, {"MMA_ASYNC", 1}},
       "by design: the 48 KB local limit (DEVICE.md); MMA_ASYNC and MMA_WARPS: clattn-bench extend --param, "
       "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // 32-key K and transposed-V tiles keep D=256 at 32 KB of local memory (two cp.async
      // stages do not fit: register staging).
      {"extend", Level::Vendor, "nvidia", "d256", {{"ROWS", 16}, {"KEYS", 16}, {"MMA_KEYS", 32}},
       "by design: the 48 KB local limit (DEVICE.md)"},
      // 4 x wave64 per group, 32 rows x 8 lanes; 37 KB of the 64 KB LDS at D=128.
      {"extend", Level::Vendor, "amd", "*", {{"WG", 256}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 0}},
       "vendor guide: AMD CDNA3 ISA, LDS size; not tuned on hardware"},
      // 16 x 16 lanes keeps D=256 under 34 KB of LDS.
      {"extend", Level::Vendor, "amd", "d256", {{"ROWS", 16}, {"KEYS", 16}},
       "vendor guide: AMD CDNA3 ISA, LDS size; not tuned on hardware"},
      // 8 x SIMD16 per group; 27 KB of SLM at D=128 (64 KB per Xe-core).
      {"extend", Level::Vendor, "intel", "*", {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "vendor guide: Intel oneAPI GPU optimization guide, SLM; not tuned on hardware"},
      // PoCL runs a group as one vectorised loop, so one lane per row (no redundant row
      // reductions) and 16 rows = one AVX-512 float vector.
      {"extend", Level::Vendor, "cpu", "*", {{"WG", 16}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "vendor docs: PoCL pthread device; not tuned"},
      // The tile values from clattn-tune (--time-budget 300; its table: docs/results-h100.md);
      // by hand on top: nv_wgmma with three warpgroups, the TMA feed and warpgroup turns, the
      // fastest extend kernel on this GPU (docs/results-h100.md). MMA_WARPS 12 means 8 for
      // nv_mma_sync, the fallback.
      {"extend", Level::Device, "NVIDIA H100 80GB HBM3", "d128",
       {{"KEYS", 32}, {"MMA", 1}, {"MMA_KEYS", 128}, {"MMA_WARPS", 12}, {"ROWS", 32}, {"WG", 128}, {"MMA_ASYNC", 1},
        {"MMA_WGMMA", 1}, {"MMA_TMA", 1}, {"MMA_PINGPONG", 1}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; MMA_WGMMA, MMA_WARPS 12, MMA_TMA, "
       "MMA_PINGPONG: clattn-bench extend, same machine and day"},
  };
  return rows;
}
}  // namespace clattn::params
