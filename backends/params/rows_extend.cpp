// extend / prefill parameters: generic, vendor rows. Each says where its numbers come from
// and which kernel variant they select. Keys: "d128" (head_dim <= 128), "d256" (192, 256);
// "*" rows apply to both.
//
// Portable kernel (variant "generic", cl_kernels/extend.cl):
//   WG    work-items per group
//   ROWS  packed query rows (tokens x GQA group) per group; WG / ROWS lanes share a row
//   KEYS  keys per step; local memory = (ROWS*D + KEYS*(D+1) + ROWS*KEYS) floats + KEYS
//         longs (the dispatcher halves KEYS, then ROWS, while it exceeds the device's)
// Tensor-core kernel (variant "nv_mma_sync", cl_kernels/extend_mma_nv.cl):
//   MMA        1: prefer the tensor-core kernel where variant_available() says the device
//              runs it (NVIDIA inline PTX, compute capability >= 8.0), else generic (logged)
//   MMA_WARPS  warps per group, 16 packed query rows each (FlashAttention-2 layout)
//   MMA_KEYS   keys per tile (32, 64 or 128); local memory = K tile (KEYS x D halves, rows
//              padded for D = 80) + transposed V tile (D x KEYS halves) + KEYS row offsets
//              (halved while it exceeds the device's local memory; below 32 -> generic)
//   MMA_ASYNC  1: 16-bit K and V tiles by cp.async into two stage buffers (row-major V, P V's
//              B fragments by ldmatrix.trans; twice the tile memory, so 32 keys at D = 128
//              and register staging at D >= 192); one barrier per tile, no staging
//              registers. H100 2026-11-22 (clattn-bench extend --param MMA_ASYNC=1): 154 ->
//              191 (1 x 4096), 187 -> 235 (1 x 16384), 168 -> 211 (8 x 1024 over 2048)
//              TFLOP/s; 4 warps: 183 / 218 / 202
//   MMA_MT     16-row m-tiles per warp (1 or 2; 2 only at head dims <= 128): 2 shares every K
//              and V fragment between two m-tiles (group rows = 16 x MMA_WARPS x MMA_MT). H100
//              2026-11-22, 8 warps (256 rows per group; 255 registers, 224 bytes spilled):
//              188 / 252 / 219 TFLOP/s against 195 / 236 / 212 with 1 (the 1 x 4096 case has
//              half as many groups and pays more ramp and tail); not the default
// Hopper warpgroup-MMA form (variant "nv_wgmma", the same file with WGMMA=1; compute
// capability 9.x, 16-bit KV, MMA_ASYNC, MMA_MT 1, head dims 64 and 128):
//   MMA_WGMMA  1: prefer it where variant_available() says the device has sm_90a (the PTX is
//              rebuilt for sm_90a, runtime/ptx_retarget.hpp); nv_mma_sync stays the fallback
//   MMA_WARPS  4, 8 or 12 for this form (12 = three warpgroups, 192 rows per group, registers
//              capped at 168 by PTX .maxnreg so that 384 work-items fit)
//   MMA_STAGGER 1: each group starts its walk over the key tiles at its own offset (helped the
//              cp.async feed; with the TMA feed 0 is 3-7% faster, eighth session)
//   H100 2026-11-22 (clattn-bench extend --variant nv_wgmma): 8 warps 176 / 207 / 165 TFLOP/s,
//   12 warps + stagger 217 / 259 / 189 against nv_mma_sync 200 / 224 / 195 in the same run
//   MMA_TMA    1: K and V by Hopper TMA tensor copies (maps built on the device, tma_maps_nv.cl)
//              where every box of 16 keys stays in a page (page size and start offsets
//              multiples of 16; ragged KV always), else cp.async. H100 (seventh session, same
//              job): 220 / 275 / 198 against 217 / 259 / 189 with the per-tile barrier
//   MMA_PINGPONG 1 (TMA): no work-group barrier per tile (per-stage empty mbarriers) and the
//              warpgroups take turns to issue their wgmma: 237 / 305 / 219 (final pass with
//              the prologue reordered: 248 / 312 / 225; eighth session, 16-byte q / o, refills
//              after the producers' turns, local page-id table, MMA_STAGGER 0: 276.8 / 333.6 /
//              233.4 in the final pass; ninth session, page ids computed for a group whose ids
//              form one run and each tile's copies split between two producer warps: 315.7 /
//              391.5 / 262.7, shuffled ids 290.7 / 355.5 / 240.6)
//   MMA_REGS   register cap (0: by work-group size); with MMA_WARPS 4, 168 lets three groups
//              share a multiprocessor (254 at 1 x 4096, but 227 at 1 x 16384: 3x the KV reads)
//   MMA_TMA_PAGES (TMA) page ids of a group's key range kept in local memory (default 1024,
//              4 KB); longer ranges read the page table at each copy
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_extend() {
  static const std::vector<Row> rows = {
      {"extend", Level::Generic, "", "*",
       {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}, {"MMA_WARPS", 4}, {"MMA_KEYS", 64}},
       "variant generic: 128 work-items (4 warps / 2 wave64), 16 rows x 8 lanes, 32-key steps: 27 KB of local "
       "memory at D=128, inside OpenCL's 32 KB minimum; not tuned. MMA_WARPS / MMA_KEYS are read only where MMA=1 "
       "(the nvidia row explains them)"},
      {"extend", Level::Generic, "", "d256", {{"KEYS", 16}, {"MMA_KEYS", 32}},
       "variant generic: 16-key steps keep D=256 at 34 KB of local memory (48 KB on NVIDIA, 64 KB on AMD/Intel)"},
      {"extend", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 1}, {"MMA_WARPS", 8}, {"MMA_KEYS", 64}, {"MMA_ASYNC", 1}},
       "variant nv_mma_sync: FlashAttention-2 (Dao 2023) layout, 8 warps x 16 rows, 64-key K and transposed-V "
       "tiles = 33 KB at D=128 within the 48 KB OpenCL local limit (DEVICE.md); the next K and V tiles wait in "
       "registers (16 each per work-item with 8 warps) during the current tile's mma.sync m16n8k16 (PTX ISA "
       "8.x, warp-level matrix fragments). Generic fallback: 32 rows x 4 lanes, 37 KB"},
      {"extend", Level::Vendor, "nvidia", "d256", {{"ROWS", 16}, {"KEYS", 16}, {"MMA_KEYS", 32}},
       "variant nv_mma_sync: 32-key K and transposed-V tiles keep D=256 at 32 KB of local memory"},
      {"extend", Level::Vendor, "amd", "*", {{"WG", 256}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: 4 x wave64 per group, 32 rows x 8 lanes; 37 KB of the 64 KB LDS at D=128 (AMD CDNA3 ISA, "
       "LDS size); not tuned on hardware"},
      {"extend", Level::Vendor, "amd", "d256", {{"ROWS", 16}, {"KEYS", 16}},
       "variant generic: 16 x 16 lanes keeps D=256 under 34 KB of LDS"},
      {"extend", Level::Vendor, "intel", "*", {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: 8 x SIMD16 per group; 27 KB of SLM at D=128 (oneAPI GPU optimization guide, SLM 64 KB "
       "per Xe-core); not tuned on hardware"},
      {"extend", Level::Vendor, "cpu", "*", {{"WG", 16}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: PoCL runs a group as one vectorised loop, so one lane per row (no redundant row "
       "reductions) and 16 rows = one AVX-512 float vector (PoCL pthread device docs); not tuned"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"extend", Level::Device, "NVIDIA H100 80GB HBM3", "d128",
       {{"KEYS", 32}, {"MMA", 1}, {"MMA_KEYS", 128}, {"MMA_WARPS", 12}, {"ROWS", 32}, {"WG", 128}, {"MMA_ASYNC", 1},
        {"MMA_WGMMA", 1}, {"MMA_STAGGER", 0}, {"MMA_TMA", 1}, {"MMA_PINGPONG", 1}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 166.9 TFLOP/s; vendor default 163.3, generic 4.368 (geomean over B=4 qo=1024 kv=2048 Hq=32 Hkv=8 D=128 bf16 causal; B=1 qo=4096 kv=4096 Hq=32 Hkv=8 D=128 bf16 causal); 18 candidates, 0 rejected as wrong. "
       "Sixth session (by hand, clattn-bench extend): nv_wgmma with 12 warps and stagger, 217 / 259 / 189 TFLOP/s "
       "against nv_mma_sync's 200 / 224 / 195 (8 warps; MMA_WARPS 12 means 8 for nv_mma_sync). Seventh session: "
       "TMA feed with warpgroup turns (MMA_TMA, MMA_PINGPONG) 248 / 312 / 225. Eighth session: MMA_STAGGER 0 "
       "with the TMA feed, 277.7 / 334.5 / 234.2 against 268.3 / 313.7 / 225.9 with 1 (same job, twice each)"},

  };
  return rows;
}
}  // namespace clattn::params
