// extend / prefill parameters: generic, vendor and device rows. Each says where its numbers
// come from. Keys: "d128" (head_dim <= 128), "d256" (192, 256); "*" rows apply to both.
//
// Portable kernel (variant "generic", cl_kernels/extend.cl; FlashAttention-2 with GEMM-style
// register blocking, CLBlast xgemm's tiling as the model):
//   WG    work-items per group, a (ROWS / TM) x TX grid
//   ROWS  packed query rows (tokens x GQA group) per group
//   TM    rows per work-item (a multiple of 4); TX = WG / (ROWS / TM) work-items share a row
//   KEYS  keys per tile (one online-softmax step); each work-item scores KEYS / TX of them
//         for its TM rows and owns TM x D / TX output accumulators
//   DC    head-dim chunk of the Q and K staging (lowered to a divisor of head_dim)
//   VC    keys per V chunk
//   QRES  1 (default): the group's Q rows stay in local memory, staged once
//   SUB_TX  work-items along tx in each 32 consecutive ones (default 8: 8 x 4 of the grid per
//         NVIDIA warp; H200 1x4096: 4 as fast, 2 and 16 17 % slower)
//   local memory = max(SR (DC + 4), VC (D + 4)) + QRES ROWS (D + 4) + KEYS (ROWS + 4) +
//   ROWS (TX + 4) floats + KEYS longs, SR = KEYS with QRES, else ROWS + KEYS (the dispatcher
//   drops QRES, then halves KEYS, then ROWS and WG, while it exceeds the device's). Registers per work-item: about TM x (D / TX + KEYS / TX) + 4 (TM + KEYS / TX).
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
// Intel matrix-engine kernel (variant "intel_dpas", cl_kernels/extend_dpas_intel.cl; devices
// with cl_intel_subgroup_matrix_multiply_accumulate, f16 / bf16 KV, head dims multiples of 16):
//   DPAS       1: prefer it where variant_available() says the device has DPAS (Xe-HPG,
//              Xe-HPC, Xe2; not Xe-LP), else generic (logged)
//   DPAS_SG    sub-group size, the device's minimum one as the extension requires: 8 on
//              Xe-HPG, 16 on Xe-HPC and Xe2
//   DPAS_RB    blocks of 8 query rows per sub-group (DPAS M = 8)
//   DPAS_RG    sub-groups along the rows: ROWS = 8 x DPAS_RB x DPAS_RG
//   DPAS_CG    sub-groups sharing those rows, splitting S by keys and O by head-dim columns
//              (halved, and DPAS_KEYS with it, while DPAS_CG x DPAS_SG does not divide
//              head_dim: D = 80)
//   DPAS_KEYS  keys per tile (a multiple of 16 x DPAS_CG; halved while local memory is short)
//   work-group = DPAS_RG x DPAS_CG x DPAS_SG; per work-item DPAS_RB x (D / DPAS_CG + KEYS /
//   DPAS_CG) / DPAS_SG float8 accumulators; local memory = ROWS x (2 D + 6 KEYS + 4 (WG /
//   ROWS + 3)) + 8 KEYS bytes
// H100 figures of every variant and of the alternatives behind these choices:
// docs/results-h100.md.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_extend() {
  static const std::vector<Row> rows = {
      // 128 work-items as 8 x 16, 4 rows x 2 keys per work-item, 32 x 32 tiles: 17 KB of local
      // memory at D=128 (24 KB at D=256), inside the 32 KB that Apple, Arm Mali and Adreno
      // offer. MMA_WARPS / MMA_KEYS are read only where MMA=1 (the nvidia row).
      {"extend", Level::Generic, "", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"TM", 4}, {"DC", 32}, {"VC", 16}, {"MMA", 0}, {"MMA_WARPS", 4},
        {"MMA_KEYS", 64}},
       "portable default: the 32 KB local-memory floor of the OpenCL 1.2 full profile; not tuned"},
      {"extend", Level::Generic, "", "d256", {{"MMA_KEYS", 32}}, "portable default (by design; not tuned)"},
      // nv_mma_sync: FlashAttention-2 (Dao 2023) layout, 8 warps x 16 rows, mma.sync m16n8k16
      // (PTX ISA, warp-level matrix fragments). 16-bit KV by cp.async: two 32-key K and V
      // stages, 33 KB at D=128 within the 48 KB OpenCL local limit (DEVICE.md); fp8 KV stages
      // 64-key K and transposed-V tiles through registers (33 KB). Portable kernel (portable-only
      // mode, or where the tensor-core kernels do not apply): 128 work-items as 8 x 16, 4 rows x
      // 4 keys each, 32 x 64 tiles, Q resident: 38 KB, 128 registers (the fastest of the tiles in
      // clattn-bench extend --param sweeps, NVIDIA H200, driver 580.159.04, 2026-11-26).
      {"extend", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 64}, {"TM", 4}, {"DC", 32}, {"VC", 16}, {"MMA", 1}, {"MMA_WARPS", 8},
        {"MMA_KEYS", 64}, {"MMA_ASYNC", 1}},
       "by design: the 48 KB local limit (DEVICE.md); MMA_ASYNC and MMA_WARPS: clattn-bench extend --param, "
       "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; the portable tile: clattn-bench extend --param, "
       "NVIDIA H200, driver 580.159.04, 2026-11-26"},
      // 32-key K and transposed-V tiles keep D=256 at 32 KB of local memory (two cp.async
      // stages do not fit: register staging).
      {"extend", Level::Vendor, "nvidia", "d256", {{"ROWS", 32}, {"KEYS", 32}, {"TM", 4}, {"MMA_KEYS", 32}},
       "by design: the 48 KB local limit (DEVICE.md)"},
      // GCN / CDNA (wave64): 4 waves of 64 as a 16 x 16 grid, 4 rows x 4 keys per work-item,
      // 64 x 64 tiles: 41 KB of the 64 KB LDS a work-group may use at D=128; 32 accumulators
      // leave VGPRs for 2 groups per SIMD.
      // The matrix-instruction kernels' tiles (asked for by the architecture rows below; forced
      // by ExtendOptions::variant elsewhere). WMMA: 8 wave32 on one 16-row block, each wave one
      // 16-column tile of O at D=128 (8 VGPRs of accumulators), 32-key tiles: 0 spills at
      // D=64/128 f16/bf16 under clang-15 for gfx1100, which allots at most 128 VGPRs a lane;
      // 28 KB of LDS. MFMA: 4 wave64, one 16-row block each (O is 32 VGPRs at D=128), 32-key
      // tiles.
      {"extend", Level::Vendor, "amd", "*",
       {{"WG", 256}, {"ROWS", 64}, {"KEYS", 64}, {"TM", 4}, {"MMA", 0}, {"WMMA_WAVES", 8}, {"WMMA_WSPLIT", 8},
        {"WMMA_KEYS", 32}, {"MFMA_WAVES", 4}, {"MFMA_WSPLIT", 1}, {"MFMA_KEYS", 32}},
       "vendor guide: AMD CDNA3 ISA and the AMD GPU performance guide (LDS 64 KB per work-group, 512 VGPRs); "
       "WMMA_* / MFMA_*: AMD RDNA3 ISA (wave32 WMMA operand layout) and CDNA3 ISA / AMD matrix instruction "
       "calculator (16x16x16 MFMA layout), registers and spills from offline clang-15 builds; not tuned on "
       "hardware"},
      // WMMA (v_wmma_f32_16x16x16_{f16,bf16}) on RDNA3: the amd_wmma kernel.
      {"extend", Level::Arch, "gfx1100", "*", {{"WMMA", 1}},
       "vendor guide: AMD RDNA3 ISA reference guide (WMMA); not run on hardware"},
      {"extend", Level::Arch, "gfx1101", "*", {{"WMMA", 1}},
       "vendor guide: AMD RDNA3 ISA reference guide (WMMA); not run on hardware"},
      {"extend", Level::Arch, "gfx1102", "*", {{"WMMA", 1}},
       "vendor guide: AMD RDNA3 ISA reference guide (WMMA); not run on hardware"},
      // MFMA 16x16x16 f16/bf16 (bf16_1k form from gfx90a) on CDNA2/3: the amd_mfma kernel.
      {"extend", Level::Arch, "gfx90a", "*", {{"MFMA", 1}},
       "vendor guide: AMD CDNA2 ISA (MFMA), AMD matrix instruction calculator; not run on hardware"},
      {"extend", Level::Arch, "gfx940", "*", {{"MFMA", 1}},
       "vendor guide: AMD CDNA3 ISA (MFMA), AMD matrix instruction calculator; not run on hardware"},
      {"extend", Level::Arch, "gfx942", "*", {{"MFMA", 1}},
       "vendor guide: AMD CDNA3 ISA (MFMA), AMD matrix instruction calculator; not run on hardware"},
      // RDNA (wave32 native, 2 SIMD32 per CU): 4 wave32 per group as 4 x 32, 4 rows x 2 keys (O
      // is 4 x 4 floats a work-item at D = 128): 32-row tiles as 8 x 16 spill at D = 80 on
      // gfx1030 and at every D on gfx1100 (clattn-kernel-report, clang-15).
      {"extend", Level::Arch, "rdna", "*", {{"WG", 128}, {"ROWS", 16}, {"KEYS", 64}, {"TM", 4}},
       "vendor guide: AMD RDNA3 ISA reference guide, wave32 native, 64 KB LDS per work-group; not tuned on hardware"},
      // Xe: 8 x SIMD16 per group as 8 x 16, 4 rows x 4 keys; 26 KB of SLM at D=128 (64 KB per
      // Xe-core), 32 accumulators inside the 128 GRF registers of SIMD16.
      // intel_dpas (DPAS=1) where the device has DPAS: sub-groups of 16 (Xe-HPC and Xe2, whose
      // DPAS is 8 x 16 x 16), 4 x 2 of them as 32 rows x 64 keys; the arch rows below.
      // KEYS_I8 32: over int8 caches the portable kernel at 64 keys spills 1-2 KB per thread in
      // ocloc's dg2 (D=80) and pvc (D=128) builds, over int4 (group 32, D=128, paged) 4 KB in
      // pvc's; 32 keys spill nothing.
      {"extend", Level::Vendor, "intel", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 64}, {"TM", 4}, {"MMA", 0}, {"DPAS", 1}, {"DPAS_SG", 16},
        {"DPAS_RB", 1}, {"DPAS_RG", 4}, {"DPAS_CG", 2}, {"DPAS_KEYS", 64}, {"KEYS_I8", 32}},
       "vendor guide: Intel oneAPI GPU optimization guide (SLM, GRF size per thread; XMX / DPAS sub-group "
       "sizes) and the cl_intel_subgroup_matrix_multiply_accumulate extension; not tuned on hardware; KEYS_I8: "
       "clattn-kernel-report --op extend (ocloc dg2 / pvc builds), 2026-11-26"},
      // D = 192, 256: 4 column groups keep a work-item's O at 4 float8 (no spill at 128 GRF
      // in ocloc's pvc build; 2 column groups spill 5 KB per thread there).
      // The portable kernel at D = 192, 256: 16-row tiles, 128 work-items as 4 x 32 (O is 4 x 8
      // floats a work-item): 32 rows as 8 x 16 (4 x 16 floats) spill 1-4 KB per thread (dg2,
      // tgllp, pvc).
      {"extend", Level::Vendor, "intel", "d256", {{"DPAS_CG", 4}, {"DPAS_KEYS", 64}, {"ROWS", 16}},
       "by design: register budget from ocloc 22.43 (IGC 1.0.12504) pvc builds; WG / TM: clattn-kernel-report "
       "(dg2, tgllp, pvc, 2026-11-26); not tuned on hardware"},
      // Xe-HPG (Arc, dg2): DPAS at sub-group size 8 (8 x 8 x 16 per call), 128 GRF of 32 bytes:
      // 4 x 4 sub-groups of 8, so that a work-item's O block is D / 32 columns (4 float8 = 32 GRF
      // at D = 128) and its S block 16 keys (2 float8). 21 KB of SLM at D = 128.
      {"extend", Level::Arch, "xe-hpg", "*", {{"DPAS_SG", 8}, {"DPAS_RB", 1}, {"DPAS_RG", 4}, {"DPAS_CG", 4},
        {"DPAS_KEYS", 64}},
       "vendor guide: Intel oneAPI GPU optimization guide (Xe-HPG: 8-wide XMX, 128 GRF) and the "
       "cl_intel_subgroup_matrix_multiply_accumulate extension (sub-group size 8 on these devices); "
       "not tuned on hardware"},
      // D = 192, 256: 8 column groups (256 work-items, 128-key tiles), O at 4 float8 again (4
      // column groups spill 2.5 KB per thread in ocloc's dg2 build at D = 256).
      {"extend", Level::Arch, "xe-hpg", "d256", {{"DPAS_CG", 8}, {"DPAS_KEYS", 128}},
       "by design: register budget from ocloc 22.43 (IGC 1.0.12504) dg2 builds; not tuned on hardware"},
      // Xe-HPC (Data Center GPU Max, pvc): DPAS at sub-group size 16 (8 x 16 x 16), GRF of 64
      // bytes: 4 x 2 sub-groups of 16, O blocks of D / 32 columns (4 float8 at D = 128).
      // DPAS_GRF 128: this kernel builds without scratch in IGC's 128-GRF mode, and spills 1-2 KB
      // per thread in the 256-GRF mode the device's other programs get (clattn-kernel-report, pvc;
      // D = 80, with one column group, the other way round: the host keeps the large file there).
      {"extend", Level::Arch, "xe-hpc", "*", {{"DPAS_SG", 16}, {"DPAS_RB", 1}, {"DPAS_RG", 4}, {"DPAS_CG", 2},
        {"DPAS_KEYS", 64}, {"DPAS_GRF", 128}},
       "vendor guide: Intel oneAPI GPU optimization guide (Xe-HPC: 16-wide XMX, 64-byte GRF) and the "
       "cl_intel_subgroup_matrix_multiply_accumulate extension (sub-group size 16 on these devices); "
       "DPAS_GRF: clattn-kernel-report (ocloc 22.43 pvc builds, 2026-11-26); not tuned on hardware"},
      {"extend", Level::Arch, "xe-hpc", "d256", {{"DPAS_CG", 4}, {"DPAS_KEYS", 64}},
       "by design: register budget from ocloc 22.43 (IGC 1.0.12504) pvc builds; not tuned on hardware"},
      // Apple GPUs: 32 KB threadgroup memory, SIMD-groups of 32: the portable default tile.
      {"extend", Level::Vendor, "apple", "*", {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"TM", 4}, {"MMA", 0}},
       "vendor guide: Apple Metal feature set tables (32 KB threadgroup memory); not tuned on hardware"},
      // Arm Mali (Valhall): 32 KB local memory mapped to the load/store cache, 64 registers per
      // thread at full occupancy: 64 work-items, 4 rows x 4 keys (16 accumulators at D=64).
      {"extend", Level::Vendor, "arm", "*", {{"WG", 64}, {"ROWS", 32}, {"KEYS", 32}, {"TM", 4}, {"MMA", 0}},
       "vendor guide: Arm Mali GPU best practices / Valhall OpenCL optimization guide; not tuned on hardware"},
      // Qualcomm Adreno: 32 KB local memory, waves of 64 or 128: 128 work-items, the default
      // tile.
      {"extend", Level::Vendor, "qualcomm", "*", {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"TM", 4}, {"MMA", 0}},
       "vendor guide: Qualcomm Snapdragon Mobile Platform OpenCL general programming and optimization; "
       "not tuned on hardware"},
      // CPU devices: the cpu variant (extend_cpu.cl), one work-item per group with vectors
      // across 2 x VW packed rows and 32-key blocks (Q^T, O^T, K and V blocks: 56 KB at D=128
      // with VW 16, L2-resident, the K and V blocks L1-sized). The portable tile behind it (PoCL
      // runs a group as one loop over work-items, vectorised across them): 32 work-items as
      // 8 x 4, 4 rows x 8 keys each.
      {"extend", Level::Vendor, "cpu", "*",
       {{"CPU_KERNEL", 1}, {"VW", 0}, {"RV", 2}, {"BK", 32}, {"SK", 0}, {"PD", 0}, {"WG", 32}, {"ROWS", 32},
        {"KEYS", 32}, {"TM", 4}, {"MMA", 0}},
       "vendor docs: PoCL pthread device (one work-group per core thread), the CPU's vector width and cache sizes; "
       "BK and RV: clattn-bench --device cpu extend --param, PoCL cpu-skylake-avx512 on a 16-core Intel Xeon, "
       "2026-11-26 (BK 64 and RV 3 as fast, BK 16 and RV 1 slower)"},
      // The tile values from clattn-tune (--time-budget 300; its table: docs/results-h100.md);
      // by hand on top: nv_wgmma with three warpgroups, the TMA feed and warpgroup turns, the
      // fastest extend kernel on this GPU (docs/results-h100.md). MMA_WARPS 12 means 8 for
      // nv_mma_sync, the fallback.
      {"extend", Level::Device, "NVIDIA H100 80GB HBM3", "d128",
       {{"MMA", 1}, {"MMA_KEYS", 128}, {"MMA_WARPS", 12}, {"MMA_ASYNC", 1},
        {"MMA_WGMMA", 1}, {"MMA_TMA", 1}, {"MMA_PINGPONG", 1}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; MMA_WGMMA, MMA_WARPS 12, MMA_TMA, "
       "MMA_PINGPONG: clattn-bench extend, same machine and day"},
  };
  return rows;
}
}  // namespace clattn::params
